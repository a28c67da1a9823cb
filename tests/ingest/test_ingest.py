"""Upload phase through the real queue and worker: stored chunks, replacement, refusals, failures."""

from __future__ import annotations

import numpy as np
import pytest

from ragtopics.documents.uploads import document_trace, get_document, list_documents, receive_upload, upload_file
from ragtopics.errors import RefusedFileError
from ragtopics.jobs.queue import job_progress
from ragtopics.llm.embedding import OpenAIEmbedder
from ragtopics.storage.chunk_index import decode_vector
from ragtopics.storage.metadata import DocumentRow
from ragtopics.topics.topics import create_topic


def upload(rt, topic, name, data: bytes):
    doc = upload_file(rt, topic, name, data)
    return doc, doc.job_id


def stored_chunks(rt, topic, doc_id):
    index = rt.chunk_index(topic.id)
    ids = index.document_chunk_ids(doc_id)
    return [{k.decode(): v for k, v in rt.redis.hgetall(index.key(cid)).items()} for cid in ids]


def test_ingest_writes_chunks_with_embeddings_through_the_worker(rt, run_jobs):
    topic = create_topic(rt, "Manuals", settings={"chunk_size": 200, "chunk_overlap": 20})
    text = "\n\n".join(f"Paragraph {i} explains how valve {i} is serviced every {i + 2} months." for i in range(12))
    doc, job_id = upload(rt, topic, "valves.md", text.encode())
    run_jobs()

    progress = job_progress(rt, job_id)
    assert progress.status == "finished" and progress.phase == "done"
    row = get_document(rt, doc.id)
    chunks = stored_chunks(rt, topic, doc.id)
    assert row.status == "indexed" and row.chunk_count == len(chunks) > 1
    assert all(len(c["text"].decode()) <= 200 for c in chunks)
    assert "Paragraph 0 explains" in chunks[0]["text"].decode()
    assert len(chunks[0]["embedding"]) == 2 * 384  # stored in half precision (VECTOR_DATATYPE)
    vector = decode_vector(chunks[0]["embedding"], 384)
    assert vector.shape == (384,) and abs(np.linalg.norm(vector) - 1) < 1e-3
    assert row.indexed_with["chunk_size"] == 200
    steps = [e["step"] for e in document_trace(rt, row.id)]
    assert {"read", "chunk", "embed", "store"} <= set(steps)
    assert (rt.blobs.read(row.blob_path)) == text.encode()


def test_reupload_replaces_the_chunks_of_the_previous_version(rt, run_jobs):
    topic = create_topic(rt, "Replace", settings={"chunk_size": 100, "chunk_overlap": 0})
    doc, _ = upload(rt, topic, "notes.txt", ("Old content about apples. " * 20).encode())
    run_jobs()
    old = get_document(rt, doc.id)
    assert old.chunk_count > 1
    upload(rt, topic, "notes.txt", b"New content about pears only.")
    run_jobs()
    chunks = stored_chunks(rt, topic, doc.id)
    assert [c["text"].decode() for c in chunks] == ["New content about pears only."]
    assert rt.chunk_index(topic.id).count() == 1
    row = get_document(rt, doc.id)
    assert row.chunk_count == 1 and row.blob_path != old.blob_path
    assert not rt.blobs.path(old.blob_path).exists()
    assert len(list_documents(rt, topic)) == 1


def test_refused_type_names_the_accepted_types_and_stores_nothing(rt):
    topic = create_topic(rt, "Only text", settings={"file_types": "txt,md"})
    with pytest.raises(RefusedFileError, match=r"accepts only these file types: md, txt"):
        receive_upload(rt, topic, "report.py", b"print(1)")
    with rt.metadata.session() as s:
        assert s.get(DocumentRow, "x") is None
    assert list_documents(rt, topic) == []
    assert not any(rt.blobs.root.rglob("report.py"))


def test_file_over_the_size_limit_is_refused(rt):
    topic = create_topic(rt, "Small", settings={"max_file_size_mb": 0.001})
    with pytest.raises(RefusedFileError, match="limit of this Topic is 0.001 MB"):
        receive_upload(rt, topic, "big.txt", b"x" * 5000)


def test_empty_file_is_stored_with_zero_chunks_and_a_warning(rt, run_jobs, caplog):
    topic = create_topic(rt, "Empty")
    doc, job_id = upload(rt, topic, "blank.txt", b"  \n\n ")
    with caplog.at_level("WARNING"):
        run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "empty" and row.chunk_count == 0 and "no readable text" in row.warning
    assert job_progress(rt, job_id).status == "finished"
    assert any("no readable text" in r.getMessage() for r in caplog.records)
    assert rt.blobs.read(row.blob_path) == b"  \n\n "


def test_binary_under_a_text_name_fails_and_keeps_the_previous_version(rt, run_jobs):
    topic = create_topic(rt, "Binary")
    doc, _ = upload(rt, topic, "data.txt", b"A perfectly good first version.")
    run_jobs()
    _, job_id = upload(rt, topic, "data.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    run_jobs()
    progress = job_progress(rt, job_id)
    assert progress.status == "failed" and "binary" in progress.error
    row = get_document(rt, doc.id)
    assert row.status == "failed" and "previous version is still searchable" in row.error
    assert [c["text"].decode() for c in stored_chunks(rt, topic, doc.id)] == ["A perfectly good first version."]
    assert rt.blobs.read(row.blob_path) == b"A perfectly good first version."


def test_unreachable_embedding_model_fails_the_upload_and_changes_nothing(rt, run_jobs):
    topic = create_topic(rt, "No embeddings")
    doc, _ = upload(rt, topic, "a.txt", b"First version that was embedded fine.")
    run_jobs()
    working = rt.gateway.embedder
    rt.gateway.embedder = OpenAIEmbedder("http://127.0.0.1:9/v1", "k", "remote-model", 384, timeout_s=1)
    try:
        _, job_id = upload(rt, topic, "a.txt", b"Second version that cannot be embedded.")
        run_jobs()
    finally:
        rt.gateway.embedder = working
    progress = job_progress(rt, job_id)
    assert progress.status == "failed" and "embedding model at http://127.0.0.1:9/v1 is not reachable" in progress.error
    assert [c["text"].decode() for c in stored_chunks(rt, topic, doc.id)] == ["First version that was embedded fine."]
    assert get_document(rt, doc.id).chunk_count == 1


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("../../etc/passwd.txt", "passwd.txt"),
        ("a\x00b\x1f.txt", "ab.txt"),
        ("dir\\sub\\file.md", "file.md"),
        (".hack.txt", ".hack.txt"),
    ],
)
def test_file_names_are_cleaned(rt, raw, expected):
    topic = create_topic(rt, "Names")
    assert receive_upload(rt, topic, raw, b"text").file_name == expected


def test_unusable_file_name_is_refused(rt):
    topic = create_topic(rt, "Bad names")
    with pytest.raises(RefusedFileError, match="not usable"):
        receive_upload(rt, topic, "../..", b"text")
