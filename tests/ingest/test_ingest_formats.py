"""Upload of structured files and documents through the queue: records whole, Flatten/Narrate, Docling."""

from __future__ import annotations

import io
import json

import docx
import numpy as np
import pytest

from ragtopics.documents.uploads import document_trace, get_document
from ragtopics.storage.chunk_index import decode_vector
from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import stored_chunks, upload


def test_csv_rows_become_key_value_records_never_cut(rt, run_jobs):
    topic = create_topic(rt, "Parts", settings={"chunk_size": 120, "chunk_overlap": 0})
    rows = "part,name,city\n" + "\n".join(f"SK-{i},Bracket number {i},Lyon" for i in range(12))
    doc, _ = upload(rt, topic, "parts.csv", rows.encode())
    run_jobs()
    chunks = [c["text"].decode() for c in stored_chunks(rt, topic, doc.id)]
    joined = "\n\n".join(chunks)
    for i in range(12):
        record = f"part: SK-{i}\nname: Bracket number {i}\ncity: Lyon"
        assert sum(record in c for c in chunks) == 1, record  # every record whole, in exactly one chunk
    assert joined.count("part: ") == 12
    indexed_with = get_document(rt, doc.id).indexed_with
    assert indexed_with["reader"] == "csv records (12)"


def test_narrate_rewrites_each_record_with_one_model_call(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "People", settings={"import_strategy": "NARRATE"})
    scripted_llm.replies["narrate"] = lambda body: "Narrated: " + body["messages"][-1]["content"].splitlines()[-1]
    data = json.dumps([{"name": "Ada", "city": "London"}, {"name": "Grace", "city": "Arlington"}]).encode()
    doc, _ = upload(rt, topic, "people.json", data)
    run_jobs()
    assert len(scripted_llm.prompts("narrate")) == 2
    text = stored_chunks(rt, topic, doc.id)[0]["text"].decode()
    assert "Narrated: city: London" in text and "Narrated: city: Arlington" in text


def test_docx_is_converted_by_docling_and_its_pipeline_recorded(rt, run_jobs):
    topic = create_topic(rt, "Office")
    document = docx.Document()
    document.add_heading("Maintenance", level=1)
    document.add_paragraph("Valve ZX-9000 is replaced every 5 years.")
    buffer = io.BytesIO()
    document.save(buffer)
    doc, _ = upload(rt, topic, "manual.docx", buffer.getvalue())
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error
    assert "Valve ZX-9000 is replaced every 5 years." in stored_chunks(rt, topic, doc.id)[0]["text"].decode()
    assert "DOCX" in row.indexed_with["reader"]


def test_a_broken_json_file_fails_with_the_line_and_keeps_nothing_half_written(rt, run_jobs):
    topic = create_topic(rt, "Broken")
    # Changed with the real-world inputs work: one bad line is now skipped; a file fails when most lines are bad.
    doc, _job_id = upload(rt, topic, "bad.jsonl", b'{"a": 1}\n{oops}\n{"b": 2,,}\n')
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "failed" and "2 of 3 lines" in row.error and "line 2" in row.error
    assert stored_chunks(rt, topic, doc.id) == []


def test_semantic_chunks_get_a_context_line_that_is_stored_and_embedded(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Semantic", settings={"chunking_strategy": "SEMANTIC", "chunk_size": 200, "chunk_overlap": 0})
    scripted_llm.replies["context_line"] = lambda body: (
        "Section on " + body["messages"][-1]["content"].split("passage of it:\n")[1].split()[0]
    )
    text = "\n\n".join(
        f"Paragraph{i} describes maintenance step {i} of the pump in detail, with tools and order." for i in range(4)
    )
    doc, _ = upload(rt, topic, "steps.md", text.encode())
    run_jobs()
    chunks = stored_chunks(rt, topic, doc.id)
    assert len(scripted_llm.prompts("context_line")) == len(chunks) > 1
    contexts = [c["context"].decode() for c in chunks]
    assert contexts[0] == "Section on Paragraph0" and all(c.startswith("Section on Paragraph") for c in contexts)
    calls = get_document(rt, doc.id).indexed_with["model_calls"]
    assert calls == {"context_line": len(chunks), "embedding": len(chunks)}
    first = chunks[0]  # the stored vector embeds the context line together with the chunk
    expected = rt.gateway.embedder.embed([first["context"].decode() + "\n" + first["text"].decode()])[0]
    assert np.allclose(decode_vector(first["embedding"], len(expected)), expected, atol=1e-3)  # half precision


def test_a_document_is_refused_when_no_docling_server_answers(rt):
    from ragtopics.documents.uploads import list_documents, receive_upload
    from ragtopics.errors import RefusedFileError

    topic = create_topic(rt, "No Docling", settings={"docling_server": "http://127.0.0.1:9"})
    with pytest.raises(RefusedFileError, match=r"Docling is needed.*'http://127.0.0.1:9'"):
        receive_upload(rt, topic, "manual.pdf", b"%PDF-1.7")
    assert list_documents(rt, topic) == []
    assert receive_upload(rt, topic, "notes.txt", b"plain text needs no Docling").status == "queued"


def test_reader_warnings_reach_the_document_list_not_only_the_log(rt, run_jobs):
    topic = create_topic(rt, "Ragged")
    doc, _ = upload(rt, topic, "releases.csv", b"version,codename,eol\n1.1,Buzz,1997\n1.2,Rex\n1.3,Bo\n2.0,Hamm,2000\n")
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and row.chunk_count == 1
    assert row.warning == (
        "2 warning(s) while reading: releases.csv: line 3 has 2 fields but the header has 3; "
        "missing values left empty (and 1 more like it)"
    )
    read = next(e for e in document_trace(rt, row.id) if e["step"] == "read")
    assert len(read["data"]["warnings"]) == 2
    assert "codename: Rex\neol: " in stored_chunks(rt, topic, doc.id)[0]["text"].decode()
