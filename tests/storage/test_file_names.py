"""The chunk index's file names (Follow File Mentions reads them): kept in a hash by every chunk swap, built once
from the chunks for an index written before the hash was kept, and never marked complete over a concurrent swap."""

from __future__ import annotations

import numpy as np

from ragtopics.storage.chunk_index import ChunkIndex, ChunkRecord


def chunk(document_id: str, file_name: str, n: int = 0) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=f"chunk-{document_id}-{n}",
        document_id=document_id,
        file_name=file_name,
        position=n,
        text=f"text {n} of {file_name}",
        embedding=np.array([1, 0, 0, n], dtype=np.float32),
    )


def test_swaps_keep_the_names_renames_and_deletes_included(rt):
    index = ChunkIndex(rt.redis, "topic-names", dims=4, embedding_model="m")
    index.replace_documents({"doc-a": [chunk("doc-a", "a.txt"), chunk("doc-a", "a.txt", 1)], "doc-b": [chunk("doc-b", "b.txt")]})
    assert index.file_names() == {"doc-a": "a.txt", "doc-b": "b.txt"}
    index.replace_document("doc-a", [chunk("doc-a", "renamed.txt")])
    index.delete_document("doc-b")
    index.replace_document("doc-c", [chunk("doc-c", "c.txt")])
    assert index.file_names() == {"doc-a": "renamed.txt", "doc-c": "c.txt"}
    # read from the hash, not from the chunks: a chunk written behind the index's back is not a file of it
    rt.redis.hset(
        index.key("stray"),
        mapping={
            "chunk_id": "stray",
            "document_id": "doc-x",
            "file_name": "x.txt",
            "text": "t",
            "embedding": np.ones(4, dtype=np.float32).tobytes(),
        },
    )
    assert "doc-x" not in index.file_names()
    index.drop()
    assert not rt.redis.exists(index.names_key)


def test_an_index_from_before_the_hash_gets_it_from_its_chunks(rt):
    index = ChunkIndex(rt.redis, "topic-old", dims=4, embedding_model="m")
    index.replace_documents({"doc-a": [chunk("doc-a", "a.txt")], "doc-b": [chunk("doc-b", "b.txt")]})
    rt.redis.delete(index.names_key)  # as an older release left it
    assert index.file_names() == {"doc-a": "a.txt", "doc-b": "b.txt"}
    assert rt.redis.hget(index.names_key, "") == b"1"  # complete: later reads need no aggregation
    index.replace_document("doc-c", [chunk("doc-c", "c.txt")])
    assert index.file_names() == {"doc-a": "a.txt", "doc-b": "b.txt", "doc-c": "c.txt"}


def test_a_swap_during_the_first_build_leaves_the_hash_unmarked(rt, monkeypatch):
    index = ChunkIndex(rt.redis, "topic-race", dims=4, embedding_model="m")
    index.replace_document("doc-a", [chunk("doc-a", "a.txt")])
    rt.redis.delete(index.names_key)
    aggregated = ChunkIndex._aggregated_names

    def swap_meanwhile(self):
        names = aggregated(self)
        self.delete_document("doc-a")  # the file goes after the aggregation read it
        return names

    monkeypatch.setattr(ChunkIndex, "_aggregated_names", swap_meanwhile)
    assert index.file_names() == {"doc-a": "a.txt"}  # what the aggregation saw
    assert rt.redis.hget(index.names_key, "") is None  # but not kept as complete
    monkeypatch.setattr(ChunkIndex, "_aggregated_names", aggregated)
    assert index.file_names() == {}
    assert rt.redis.hget(index.names_key, "") == b"1"
