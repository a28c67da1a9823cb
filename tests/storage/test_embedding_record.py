"""A Topic's chunk index records the embedding model and dimension it was built with."""

from __future__ import annotations

import numpy as np
import pytest

from ragtopics.documents.uploads import enqueue_document, get_document, upload_file
from ragtopics.errors import EmbeddingMismatchError, NotFoundError
from ragtopics.storage.chunk_index import ChunkIndex, ChunkRecord
from ragtopics.topics.topics import create_topic, reembed_topic


def _chunk(dims: int, n: int = 0) -> ChunkRecord:
    vector = np.zeros(dims, dtype=np.float32)
    vector[n] = 1.0
    return ChunkRecord(
        chunk_id=f"chunk-{n}", document_id="doc-1", file_name="a.txt", position=n, text=f"text {n}", embedding=vector
    )


def test_index_records_the_model_and_refuses_another(rt):
    built = ChunkIndex(rt.redis, "topic-x", dims=8, embedding_model="model-a")
    built.replace_document("doc-1", [_chunk(8)])
    assert built.built_with() == ("model-a", 8)

    for other in (
        ChunkIndex(rt.redis, "topic-x", dims=8, embedding_model="model-b"),
        ChunkIndex(rt.redis, "topic-x", dims=16, embedding_model="model-a"),
    ):
        with pytest.raises(EmbeddingMismatchError, match=r"built with the embedding model model-a \(8 dims\).*re-embed") as err:
            other.search_vector(np.ones(other.dims, dtype=np.float32), 3)
        assert f"configured embedding model is {other.embedding_model} ({other.dims} dims)" in str(err.value)
        with pytest.raises(EmbeddingMismatchError):
            other.replace_document("doc-1", [_chunk(other.dims)])
    assert built.count() == 1 and built.search_vector(_chunk(8).embedding, 1)[0].chunk_id == "chunk-0"


def test_an_index_without_chunks_is_rebuilt_for_the_new_model(rt):
    ChunkIndex(rt.redis, "topic-y", dims=8, embedding_model="model-a").ensure()
    fresh = ChunkIndex(rt.redis, "topic-y", dims=16, embedding_model="model-b")
    fresh.replace_document("doc-1", [_chunk(16)])
    assert fresh.built_with() == ("model-b", 16) and fresh.count() == 1


def test_an_index_from_before_the_record_is_adopted_when_its_dims_match(rt):
    old = ChunkIndex(rt.redis, "topic-z", dims=8, embedding_model="model-a")
    old.replace_document("doc-1", [_chunk(8)])
    rt.redis.delete(old.record_key)
    assert old.built_with() == ("", 8)
    with pytest.raises(EmbeddingMismatchError, match=r"model unknown \(8 dims\)|unknown \(8 dims\)"):
        ChunkIndex(rt.redis, "topic-z", dims=16, embedding_model="model-b").search_vector(np.ones(16, dtype=np.float32), 1)
    assert len(ChunkIndex(rt.redis, "topic-z", dims=8, embedding_model="model-c").search_vector(_chunk(8).embedding, 1)) == 1
    assert old.built_with() == ("model-c", 8)


def test_reembed_topic_rebuilds_the_index_with_the_configured_model(rt, run_jobs):
    topic = create_topic(rt, "Manuals", settings={"chunk_size": 200, "chunk_overlap": 20})
    doc = upload_file(rt, topic, "valves.md", b"Valve 7 is serviced every nine months.\n\nPump 3 runs dry.")
    run_jobs()
    index = rt.chunk_index(topic.id)
    rt.redis.hset(index.record_key, "embedding_model", "text-embedding-3-small")  # as if built by another model
    with pytest.raises(EmbeddingMismatchError, match="text-embedding-3-small"):
        index.search_vector(np.ones(index.dims, dtype=np.float32), 1)

    jobs = reembed_topic(rt, "Manuals", enqueue_document)
    assert len(jobs) == 1 and get_document(rt, doc.id).status == "queued"
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and row.chunk_count >= 1 and row.blob_path and not row.pending_blob_path
    assert index.built_with() == (rt.gateway.embedder.model, rt.gateway.embedder.dims)
    assert index.search_vector(rt.gateway.embed(["valve service"])[0], 1)


def test_files_can_be_deleted_after_the_embedding_model_changed(rt, run_jobs):
    """Removing chunks needs no embedder check: the mismatch message's advice (delete and upload again) works."""
    from ragtopics.documents.delete import delete_document

    topic = create_topic(rt, "Manuals", settings={"chunk_size": 200, "chunk_overlap": 20})
    kept = upload_file(rt, topic, "pumps.md", b"Pump 3 runs dry every spring.")
    gone = upload_file(rt, topic, "valves.md", b"Valve 7 is serviced every nine months.")
    run_jobs()
    index = rt.chunk_index(topic.id)
    rt.redis.hset(index.record_key, "embedding_model", "text-embedding-3-small")  # as if built by another model
    removed = delete_document(rt, topic, "valves.md")
    assert removed["chunks"] == 1
    with pytest.raises(NotFoundError):
        get_document(rt, gone.id)
    assert index.document_chunk_ids(gone.id) == [] and len(index.document_chunk_ids(kept.id)) == 1
    assert index.built_with() == ("text-embedding-3-small", index.dims)  # the record is not rewritten by a delete
    with pytest.raises(EmbeddingMismatchError):  # adding chunks is still refused
        index.replace_document(
            kept.id,
            [
                ChunkRecord(
                    chunk_id="c",
                    document_id=kept.id,
                    file_name="pumps.md",
                    position=0,
                    text="x",
                    embedding=np.ones(index.dims, dtype=np.float32),
                )
            ],
        )
