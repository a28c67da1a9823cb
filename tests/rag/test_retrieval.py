"""Reciprocal rank fusion, filtering and keyword extraction as pure functions."""

from __future__ import annotations

import numpy as np
import pytest

from ragtopics.rag.retrieval import filter_hits, fuse_rrf
from ragtopics.storage.chunk_index import ChunkHit
from ragtopics.text.keywords import extract_keywords, query_keywords


def hit(cid: str, score: float = 0.5) -> ChunkHit:
    return ChunkHit(cid, "doc", f"{cid}.txt", 0, "text", score)


def test_rrf_sums_reciprocal_ranks_and_normalises_to_one():
    fused, ranks = fuse_rrf({"dense": [hit("a"), hit("b"), hit("c")], "keyword": [hit("c"), hit("a")]}, k=60)
    assert [h.chunk_id for h in fused] == ["a", "c", "b"]
    assert ranks["a"] == {"dense": 1, "keyword": 2, "rrf": pytest.approx(1 / 61 + 1 / 62)}
    assert ranks["b"]["keyword"] is None
    assert fused[0].score == pytest.approx((1 / 61 + 1 / 62) / (2 / 61), abs=1e-6)
    assert all(0 < h.score <= 1 for h in fused)


def test_rrf_with_one_empty_list_scores_its_top_hit_one():
    fused, _ = fuse_rrf({"dense": [hit("a"), hit("b")], "keyword": []}, k=60)
    assert [h.score for h in fused] == [1.0, pytest.approx(61 / 62, abs=1e-6)]


def test_a_larger_k_flattens_the_advantage_of_the_top_rank():
    lists = {"dense": [hit("a"), hit("b")], "keyword": [hit("b")]}
    assert fuse_rrf(lists, k=1)[0][0].chunk_id == "b"
    small = fuse_rrf({"dense": [hit("a"), hit("b")]}, k=1)[0]
    large = fuse_rrf({"dense": [hit("a"), hit("b")]}, k=1000)[0]
    assert small[1].score < large[1].score


def test_filter_drops_below_min_score_then_keeps_top_k():
    hits = [hit("a", 0.9), hit("b", 0.2), hit("c", 0.5), hit("d", 0.4)]
    assert [h.chunk_id for h in filter_hits(hits, min_score=0.3, top_k=2)] == ["a", "c"]


def test_codes_are_kept_whole_and_stop_words_dropped():
    words = extract_keywords("The error E-4711 on part SK-44 is what the manual calls a fault.")
    assert words[:2] == ["e4711", "sk44"]
    assert "the" not in words and "is" not in words and "fault" in words


def test_a_question_with_a_code_searches_for_the_code_and_its_words():
    # Changed with the real-world inputs work: the words are searched too (codes first, weighted up in the search).
    assert query_keywords("What does error E-4711 mean?") == ["e4711", "error", "mean"]
    assert query_keywords("Which pumps are noisy?") == ["pumps", "noisy"]


def test_vectors_are_unit_length(embedder):
    vectors = embedder.embed(["one", "two three"])
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
