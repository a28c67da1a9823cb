"""The chunk index's vector search: its HNSW answers match exact search, and a missing index answers empty."""

from __future__ import annotations

import numpy as np

from bench.latency import exact_top_k, recall_at_k
from ragtopics.storage.chunk_index import HNSW_EF_RUNTIME, ChunkIndex, ChunkRecord


def _unit_rows(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    rows = rng.standard_normal((n, dims)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_hnsw_search_finds_the_exact_nearest_chunks(rt):
    """3,000 random unit vectors in 32 dimensions (hard for HNSW: no clusters to follow); the product's
    EF_RUNTIME must find at least 98% of the exact top 10 (RediSearch's default of 10 finds about 71%)."""
    rng = np.random.default_rng(7)
    vectors, queries = _unit_rows(rng, 3_000, 32), _unit_rows(rng, 50, 32)
    index = ChunkIndex(rt.redis, "topic-knn", dims=32, embedding_model="random")
    for start in range(0, len(vectors), 1_000):
        index.replace_document(f"doc-{start}", [
            ChunkRecord(chunk_id=f"chunk-{n:05d}", document_id=f"doc-{start}", file_name=f"f{start}.txt", position=n,
                        text=f"row {n}", embedding=vectors[n]) for n in range(start, start + 1_000)])  # fmt: skip
    assert index.count() == 3_000
    exact = [[f"chunk-{i:05d}" for i in exact_top_k(vectors, q, 10)] for q in queries]
    found = [[h.chunk_id for h in index.search_vector(q, 10)] for q in queries]
    assert all(len(f) == 10 for f in found)
    assert recall_at_k(found, exact) >= 0.98, f"recall@10 {recall_at_k(found, exact):.3f} at EF_RUNTIME {HNSW_EF_RUNTIME}"
    scores = [h.score for h in index.search_vector(queries[0], 10)]
    assert scores == sorted(scores, reverse=True)
    assert np.isclose(scores[0], float(vectors[exact_top_k(vectors, queries[0], 1)[0]] @ queries[0]), atol=1e-5)


def test_an_index_dropped_behind_its_record_answers_empty(rt):
    index = ChunkIndex(rt.redis, "topic-gone", dims=4, embedding_model="m")
    index.replace_document("doc-1", [ChunkRecord(chunk_id="chunk-1", document_id="doc-1", file_name="a.txt", position=0,
                                                 text="pump seal", embedding=np.array([1, 0, 0, 0], dtype=np.float32),
                                                 keywords="pump seal")])  # fmt: skip
    assert index.count() == 1 and index.search_keywords(["pump"], 3)[0].chunk_id == "chunk-1"
    index.index.delete(drop=False)  # the record hash stays
    assert index.built_with() == ("m", 4)
    assert index.search_vector(np.array([1, 0, 0, 0], dtype=np.float32), 3) == []
    assert index.search_keywords(["pump"], 3) == [] and index.count() == 0
