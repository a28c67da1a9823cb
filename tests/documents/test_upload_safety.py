"""Bad input and injected failures through the real queue and worker: a clear error, nothing stored lost.

Each case first indexes a good version of a file, then uploads a bad version under the same name
and checks that the job failed with a message naming the problem, that the document row says
the previous version is still searchable, and that its chunks and original bytes are untouched.
Also: the keyword index is written only under HYBRID, ALGORITHMIC keeps codes whole, LLM makes
one call per chunk, and a failure in a late step (after embedding) still changes nothing.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from ragtopics.documents.uploads import document_trace, get_document, list_documents, receive_upload
from ragtopics.errors import RefusedFileError
from ragtopics.jobs.queue import job_progress, queue_for
from ragtopics.text.keywords import query_keywords
from ragtopics.topics.topics import create_topic
from tests.ingest.test_docling import make_docx, make_pdf, make_xlsx, make_zip_bomb
from tests.ingest.test_ingest import stored_chunks, upload
from tests.ingest.test_structured import BILLION_LAUGHS

GOOD_XML = b"<catalog><book id='1'><title>Valves</title></book><book id='2'><title>Pumps</title></book></catalog>"
GOOD_JSON = json.dumps([{"part": "SK-44", "name": "bracket"}, {"part": "SK-45", "name": "hinge"}]).encode()


def _single_line(megabytes: int) -> bytes:
    """``megabytes`` MB of prose on one line, no newline anywhere."""
    rng = random.Random(7)
    words = ["valve", "pump", "E-4711", "the", "service", "interval", "is", "twelve", "months", "and"]
    line = " ".join(rng.choice(words) for _ in range(megabytes * 1_000_000 // 5))
    return line.encode()[: megabytes * 1_000_000]


#: Office files are zip archives: a broken archive or a zip bomb is refused when received, before anything is stored.
REFUSED_AT_RECEIVE = {
    "corrupt docx": (
        "report.docx",
        make_docx,
        lambda: bytes(range(256)) * 40,
        r"report\.docx was refused: report\.docx is not a valid DOCX",
    ),
    "truncated docx": ("report.docx", make_docx, lambda: make_docx()[:2000], r"report\.docx is not a valid DOCX"),
    "truncated xlsx": ("figures.xlsx", make_xlsx, lambda: make_xlsx()[:1500], r"figures\.xlsx is not a valid XLSX"),
    "zip bomb docx": ("report.docx", make_docx, make_zip_bomb, r"report\.docx is refused as a zip bomb"),
    "truncated pdf": ("plant.pdf", make_pdf, lambda: make_pdf()[:900], r"plant\.pdf was refused: plant\.pdf is not a valid PDF"),
}

BAD_INPUTS = {
    "xml entity expansion": ("catalog.xml", lambda: GOOD_XML, lambda: BILLION_LAUGHS, r"catalog\.xml: the XML uses entities"),
    "deeply nested json": (
        "parts.json",
        lambda: GOOD_JSON,
        lambda: b"[" * 200_000 + b"]" * 200_000,
        r"parts\.json .*nested too deeply",
    ),
    "binary bytes as txt": (
        "notes.txt",
        lambda: b"Service the pump every 12 months.",
        lambda: bytes(range(256)) * 64,
        r"notes\.txt .*binary",
    ),
    "50 MB on one line": (
        "notes.txt",
        lambda: b"Service the pump every 12 months.",
        lambda: _single_line(50),
        (
            r"notes\.txt was refused: it would give at least [\d,]+ chunks at Chunk Size 1000, "
            r"and one document may give at most 20,000 \(MAX_CHUNKS_PER_DOCUMENT\)"
        ),
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_fails_clearly_and_keeps_the_previous_version(rt, run_jobs, case):
    name, good, bad, message = BAD_INPUTS[case]
    topic = create_topic(rt, "Bad input")
    good_bytes = good()
    doc, _ = upload(rt, topic, name, good_bytes)
    run_jobs()
    before = get_document(rt, doc.id)
    assert before.status == "indexed", before.error
    chunks_before = stored_chunks(rt, topic, doc.id)

    _, job_id = upload(rt, topic, name, bad())
    pending = get_document(rt, doc.id).pending_blob_path
    assert pending and rt.blobs.path(pending).exists()
    run_jobs()

    progress = job_progress(rt, job_id)
    assert progress.status == "failed"
    row = get_document(rt, doc.id)
    assert row.status == "failed"
    assert row.error.endswith("(the previous version is still searchable)")
    assert re.search(message, row.error), row.error
    assert not re.search(r"[0-9a-f]{32}", row.error), "internal hash keys are no help to the operator"
    assert stored_chunks(rt, topic, doc.id) == chunks_before
    assert row.chunk_count == before.chunk_count and row.blob_path == before.blob_path
    assert rt.blobs.read(row.blob_path) == good_bytes
    assert row.pending_blob_path == "" and not rt.blobs.path(pending).exists()
    assert [d.file_name for d in list_documents(rt, topic)] == [name]


@pytest.mark.parametrize("case", list(REFUSED_AT_RECEIVE))
def test_a_broken_archive_is_refused_when_received_and_nothing_is_stored(rt, run_jobs, case):
    name, good, bad, message = REFUSED_AT_RECEIVE[case]
    topic = create_topic(rt, "Archives")
    doc, _ = upload(rt, topic, name, good())
    run_jobs()
    before = get_document(rt, doc.id)
    files_before = sorted(p for p in (rt.blobs.root / topic.id).rglob("*") if p.is_file())
    jobs_before = len(queue_for(rt).finished_job_registry.get_job_ids())

    with pytest.raises(RefusedFileError, match=message):
        receive_upload(rt, topic, name, bad())

    row = get_document(rt, doc.id)
    assert (row.status, row.job_id, row.blob_path, row.pending_blob_path, row.error) == (
        "indexed",
        before.job_id,
        before.blob_path,
        "",
        "",
    )
    assert sorted(p for p in (rt.blobs.root / topic.id).rglob("*") if p.is_file()) == files_before
    assert len(queue_for(rt)) == 0 and len(queue_for(rt).finished_job_registry.get_job_ids()) == jobs_before


def test_a_chunk_budget_refusal_comes_before_any_model_call(reconfigure, run_jobs, scripted_llm):
    rt = reconfigure(MAX_CHUNKS_PER_DOCUMENT=3)
    topic = create_topic(rt, "Budget", settings={"chunk_size": 100, "chunk_overlap": 0, "chunking_strategy": "SEMANTIC"})
    doc, _ = upload(rt, topic, "long.md", ("Pump maintenance takes time. " * 40).encode())
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "failed" and re.search(r"would give at least 1\d chunks at Chunk Size 100, .* at most 3 ", row.error)
    assert scripted_llm.prompts("context_line") == []
    assert stored_chunks(rt, topic, doc.id) == []


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("../../../secrets/../passwd.md", "passwd.md"),
        ("reports/2024/q1.txt", "q1.txt"),
        ("tab\there\r\n.txt", "tabhere.txt"),
        ("ü" * 300 + ".txt", "ü" * 125 + ".txt"),
    ],
)
def test_hostile_file_names_are_stored_under_a_safe_name(rt, run_jobs, raw, expected):
    topic = create_topic(rt, "Names")
    doc = receive_upload(rt, topic, raw, b"Some text.")
    assert doc.file_name == expected and len(expected.encode()) <= 255
    stored = rt.blobs.path(get_document(rt, doc.id).pending_blob_path)
    assert stored.resolve().is_relative_to(rt.blobs.root.resolve())


def test_hybrid_writes_keywords_with_codes_whole_and_dense_writes_none(rt, run_jobs):
    text = b"Error E-4711 means the SK-44 bracket is loose. Tighten it."
    hybrid = create_topic(rt, "Hybrid", settings={"retrieval_strategy": "HYBRID", "keyword_enrichment": "ALGORITHMIC"})
    dense = create_topic(rt, "Dense", settings={"retrieval_strategy": "DENSE"})
    h_doc, _ = upload(rt, hybrid, "codes.txt", text)
    d_doc, _ = upload(rt, dense, "codes.txt", text)
    run_jobs()

    (h_chunk,) = stored_chunks(rt, hybrid, h_doc.id)
    keywords = h_chunk["keywords"].decode().split()
    # Codes come first, whole and normalised (so "E-4711", "E4711" and "e 4711" all match), stop words go.
    assert keywords[:2] == ["e4711", "sk44"] and "bracket" in keywords and "the" not in keywords
    terms = query_keywords("What does E-4711 mean?")
    assert [h.file_name for h in rt.chunk_index(hybrid.id).search_keywords(terms, 5)] == ["codes.txt"]
    (d_chunk,) = stored_chunks(rt, dense, d_doc.id)
    assert d_chunk["keywords"].decode() == ""
    assert rt.chunk_index(dense.id).search_keywords(terms, 5) == []
    # The indexed-documents list tells the operator which version has a keyword index.
    assert list_documents(rt, hybrid)[0].indexed_with["keyword_index"] is True
    assert list_documents(rt, dense)[0].indexed_with["keyword_index"] is False


def test_llm_keywords_make_one_call_per_chunk_and_are_searchable(rt, run_jobs, scripted_llm):
    topic = create_topic(
        rt,
        "LLM keywords",
        settings={"retrieval_strategy": "HYBRID", "keyword_enrichment": "LLM", "chunk_size": 120, "chunk_overlap": 0},
    )
    scripted_llm.replies["keywords"] = "coolant, overheating, PX-900"
    text = "\n\n".join(f"Section {i}: the pump runs hot when the fluid level drops below the mark." for i in range(3))
    doc, _ = upload(rt, topic, "pump.md", text.encode())
    run_jobs()
    chunks = stored_chunks(rt, topic, doc.id)
    assert len(scripted_llm.prompts("keywords")) == len(chunks) > 1
    assert all({"coolant", "px900", "pump"} <= set(c["keywords"].decode().split()) for c in chunks)
    assert len(rt.chunk_index(topic.id).search_keywords(["coolant"], 10)) == len(chunks)
    calls = get_document(rt, doc.id).indexed_with["model_calls"]
    assert calls == {"keywords": len(chunks), "embedding": len(chunks)}


def test_a_failure_after_embedding_leaves_the_previous_version_whole(rt, run_jobs, scripted_llm):
    topic = create_topic(
        rt,
        "Late failure",
        settings={"retrieval_strategy": "HYBRID", "keyword_enrichment": "ALGORITHMIC", "chunk_size": 100, "chunk_overlap": 0},
    )
    first = ("Version one talks about valves. " * 12).encode()
    doc, _ = upload(rt, topic, "manual.txt", first)
    run_jobs()
    chunks_before = stored_chunks(rt, topic, doc.id)
    # Switch to LLM keywords with no scripted reply: the keyword step (after reading, chunking and
    # embedding the new version) fails on its first model call.
    from ragtopics.topics.topics import update_settings

    update_settings(rt, topic.id, {"keyword_enrichment": "LLM"})
    scripted_llm.replies.pop("keywords", None)
    _, job_id = upload(rt, topic, "manual.txt", ("Version two talks about pumps. " * 12).encode())
    run_jobs()

    row = get_document(rt, doc.id)
    assert job_progress(rt, job_id).status == "failed" and row.status == "failed"
    steps = [e["step"] for e in document_trace(rt, row.id)]
    assert "embed" in steps and "store" not in steps
    assert stored_chunks(rt, topic, doc.id) == chunks_before
    assert rt.chunk_index(topic.id).count() == len(chunks_before)
    assert rt.blobs.read(row.blob_path) == first
    hits = rt.chunk_index(topic.id).search_keywords(["valves"], 50)
    assert {h.document_id for h in hits} == {doc.id} and len(hits) == len(chunks_before)
    assert rt.chunk_index(topic.id).search_keywords(["pumps"], 5) == []
