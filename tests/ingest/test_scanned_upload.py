"""A scanned PDF uploaded through the real queue and worker: "empty" with the reason, or indexed by OCR."""

from __future__ import annotations

from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.topics.topics import create_topic
from tests.ingest.scans import scanned_invoice_pdf, squashed


def chunk_texts(rt, topic, doc_id) -> list[str]:
    index = rt.chunk_index(topic.id)
    return [rt.redis.hget(index.key(cid), "text").decode() for cid in index.document_chunk_ids(doc_id)]


def test_a_scan_without_ocr_ends_empty_with_the_pages_named(rt, run_jobs):
    topic = create_topic(rt, "Scans")
    doc = upload_file(rt, topic, "scan.pdf", scanned_invoice_pdf())
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "empty" and row.chunk_count == 0
    assert "scan.pdf: page 1 has no text layer and was not read (turn on OCR in Docling Settings to read it)" in row.warning
    assert chunk_texts(rt, topic, doc.id) == []


def test_a_scan_with_ocr_is_indexed_with_its_recognised_text(rt, run_jobs):
    topic = create_topic(rt, "Scans read", settings={"docling_settings": {"ocr": True}})
    doc = upload_file(rt, topic, "scan.pdf", scanned_invoice_pdf())
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and row.chunk_count >= 1, row.warning
    text = squashed(" ".join(chunk_texts(rt, topic, doc.id)))
    assert "invoice4711" in text and "95.20" in text and "quillfeather" in text
    assert "no text layer" not in (row.warning or "")


def test_a_question_about_an_unread_scan_gets_the_no_answer_response(rt, run_jobs, scripted_llm):
    from ragtopics.answer.turn import ask

    topic = create_topic(rt, "Scans asked")
    upload_file(rt, topic, "scan.pdf", scanned_invoice_pdf())
    upload_file(rt, topic, "canteen.md", b"The canteen opens at eight and serves soup on Fridays.")
    run_jobs()
    scripted_llm.replies["answer"] = "The total due is 12.00 EUR [S1]."  # whatever it is shown, it must not be asked
    final = list(ask(rt, topic, "What is the total due on invoice 4711 from Quillfeather Ltd?"))[-1]
    assert final.no_answer and final.text == topic.settings.no_answer_response and final.sources == []
    assert scripted_llm.prompts("answer") == []
