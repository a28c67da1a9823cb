"""A chunk swap that parks the previous chunks (``ChunkIndex.swap_documents``): put back, the index is as before
the swap in every key it owns (chunk hashes, file names, keyword counts) and searchable; settled, the parked
chunks are gone and the new ones stay. Parked chunks are outside the index and expire on their own."""

from __future__ import annotations

import numpy as np

from ragtopics.storage.chunk_index import PARKED_TTL_S, ChunkIndex
from tests.storage.test_term_counts import TERMS, chunk, counted_by_queries


def dump(rt, index: ChunkIndex) -> dict:
    """Every key the index owns, but the files generation (a cache token), with its whole value."""
    keys = sorted(k for k in rt.redis.scan_iter(match=f"rt:{index.topic_id}:*") if k != index.files_key.encode())
    out = {}
    for key in keys:
        if rt.redis.type(key) == b"hash":
            values = rt.redis.hgetall(key)
            out[key] = {k: v for k, v in values.items() if not (key == index.terms_key.encode() and v == b"0")}
        else:
            out[key] = rt.redis.get(key)
    return out


def found(index: ChunkIndex) -> list[tuple[str, str]]:
    hits = index.search_vector(np.array([1, 0, 0, 1], dtype=np.float32) / np.sqrt(2), 10)
    return sorted((hit.document_id, hit.text) for hit in hits)


def test_a_swap_put_back_leaves_the_index_as_before_and_a_settled_one_leaves_no_parked_chunk(rt):
    index = ChunkIndex(rt.redis, "topic-swap", dims=4, embedding_model="m")
    index.replace_documents(
        {
            "doc-a": [chunk("doc-a", "alpha.txt", "The pump was recalled."), chunk("doc-a", "alpha.txt", "The valve.", 1)],
            "doc-b": [chunk("doc-b", "beta.txt", "Pumps and valve service manual.")],
        }
    )
    index.file_names()  # the names hash marked complete, as a search's source list leaves it
    before, searched = dump(rt, index), found(index)
    # doc-a renamed and shortened (its chunk 0 kept under its id, with new text), doc-b deleted, doc-c new
    swaps = {
        "doc-a": [chunk("doc-a", "gamma.txt", "The pump is in service.")],
        "doc-b": [],
        "doc-c": [chunk("doc-c", "manual.txt", "Valve manual.")],
    }
    swap = index.swap_documents(swaps)
    assert swap.removed == {"doc-a": 1, "doc-b": 1, "doc-c": 0}
    assert [d for d, _ in found(index)] == ["doc-a", "doc-c"] and index.file_names() == {
        "doc-a": "gamma.txt",
        "doc-c": "manual.txt",
    }
    assert index.term_frequencies(TERMS) == counted_by_queries(index, TERMS)
    parked = list(rt.redis.scan_iter(match=f"{index.parked_prefix}:*"))
    assert len(parked) == 3 and all(0 < rt.redis.ttl(key) <= PARKED_TTL_S for key in parked)

    swap.put_back()
    assert dump(rt, index) == before and found(index) == searched
    assert index.term_frequencies(TERMS) == counted_by_queries(index, TERMS)
    assert all(rt.redis.ttl(index.key(cid)) == -1 for cid in ["chunk-doc-a-0", "chunk-doc-a-1", "chunk-doc-b-0"])

    index.swap_documents(swaps).settle()
    assert not list(rt.redis.scan_iter(match=f"{index.parked_prefix}:*"))
    assert [d for d, _ in found(index)] == ["doc-a", "doc-c"] and "doc-b" not in index.file_names()
    assert index.term_frequencies(TERMS) == counted_by_queries(index, TERMS)
    index.drop()
