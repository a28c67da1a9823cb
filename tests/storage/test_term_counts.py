"""Keyword document frequencies for BM25: kept in a hash by every chunk swap (so a keyword search reads them in
one HMGET instead of one count query per term), equal to what count queries over the index give after uploads,
re-uploads, renames and deletes; built once from the chunks for an index written before the hash was kept;
never marked complete over a concurrent swap. And the candidate query leaves out common terms."""

from __future__ import annotations

import numpy as np

from ragtopics.storage import chunk_index
from ragtopics.storage.chunk_index import ChunkIndex, ChunkRecord, candidate_terms
from ragtopics.text.keywords import index_keywords


def chunk(document_id: str, file_name: str, text: str, n: int = 0) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=f"chunk-{document_id}-{n}",
        document_id=document_id,
        file_name=file_name,
        position=n,
        text=text,
        embedding=np.array([1, 0, 0, n + 1], dtype=np.float32) / np.sqrt(1 + (n + 1) ** 2),
        keywords=index_keywords(file_name, text),
    )


def counted_by_queries(index: ChunkIndex, terms: list[str]) -> tuple[list[int], int]:
    return index._count_each(terms)


TERMS = ["pump", "pumps", "valve", "recalled", "recall", "service", "alpha", "beta", "gamma", "manual"]


def test_swaps_keep_the_counts_equal_to_count_queries(rt):
    index = ChunkIndex(rt.redis, "topic-terms", dims=4, embedding_model="m")
    index.replace_documents(
        {
            "doc-a": [chunk("doc-a", "alpha.txt", "The pump was recalled."), chunk("doc-a", "alpha.txt", "The valve.", 1)],
            "doc-b": [chunk("doc-b", "beta.txt", "Pumps and valve service manual.")],  # counted by stem, as RediSearch matches
        }
    )
    assert index.term_frequencies(TERMS) == counted_by_queries(index, TERMS)
    assert index.term_frequencies(["pump", "valve", "alpha"]) == ([2, 2, 2], 3)
    # a re-upload with other text, a rename (same chunk id, new file-name keyword), a delete, a new file
    index.replace_document("doc-a", [chunk("doc-a", "gamma.txt", "The pump was recalled.")])
    index.delete_document("doc-b")
    index.replace_document("doc-c", [chunk("doc-c", "manual.txt", "Pump service.")])
    assert index.term_frequencies(TERMS) == counted_by_queries(index, TERMS)
    assert index.term_frequencies(["pump", "valve", "alpha", "gamma"]) == ([2, 0, 0, 1], 2)
    index.drop()
    assert not rt.redis.exists(index.terms_key)


def test_an_index_from_before_the_counts_gets_them_from_its_chunks(rt):
    index = ChunkIndex(rt.redis, "topic-terms-old", dims=4, embedding_model="m")
    index.replace_documents(
        {
            "doc-a": [chunk("doc-a", "a.txt", f"pump number {n}", n) for n in range(7)],
            "doc-b": [chunk("doc-b", "b.txt", "valve")],
        }
    )
    rt.redis.delete(index.terms_key)  # as an older release left it
    index.replace_document("doc-c", [chunk("doc-c", "c.txt", "pump valve")])  # partial counts: not used
    assert index.term_frequencies(["pump", "valve"]) == ([8, 2], 9)
    assert rt.redis.hget(index.terms_key, "") == b"english-stem"
    assert index.search_keywords(["valve"], 5)[0].chunk_id in {"chunk-doc-b-0", "chunk-doc-c-0"}


def test_a_swap_during_the_rebuild_leaves_the_counts_unmarked(rt, monkeypatch):
    index = ChunkIndex(rt.redis, "topic-terms-race", dims=4, embedding_model="m")
    index.replace_document("doc-a", [chunk("doc-a", "a.txt", "pump")])
    rt.redis.delete(index.terms_key)
    read = ChunkIndex._all_keywords

    def swap_meanwhile(self):
        yield from read(self)
        self.delete_document("doc-a")

    monkeypatch.setattr(ChunkIndex, "_all_keywords", swap_meanwhile)
    assert index.term_frequencies(["pump"]) is None  # the caller counts with queries instead
    assert rt.redis.hget(index.terms_key, "") is None
    assert index.search_keywords(["pump"], 5) == []  # the fallback still answers (the chunk is gone)
    monkeypatch.setattr(ChunkIndex, "_all_keywords", read)
    assert index.term_frequencies(["pump"]) == ([0], 0)


def test_common_terms_are_scored_but_not_searched(monkeypatch):
    monkeypatch.setattr(chunk_index, "CANDIDATE_POSTINGS", 4_000)
    frequencies = {"film": 19_750, "directed": 9_973, "leland": 637, "1986": 2_000, "shot": 1_350}
    terms = ["1986", "directed", "film", "shot", "leland"]
    assert candidate_terms(frequencies, terms) == [
        "1986",
        "shot",
        "leland",
    ]  # 637 + 1,350 + 2,000 <= 4,000; then directed would pass it
    assert candidate_terms(dict.fromkeys(terms, 40), terms) == terms  # a small index: every term
    # the two rarest are searched whatever their postings
    assert candidate_terms({"film": 90_000, "state": 80_000, "war": 70_000}, ["film", "state", "war"]) == ["state", "war"]


def test_keyword_search_finds_a_chunk_by_its_rare_term_among_common_ones(rt, monkeypatch):
    monkeypatch.setattr(chunk_index, "CANDIDATE_POSTINGS", 100)  # film and directed (121 chunks each) are not searched
    index = ChunkIndex(rt.redis, "topic-terms-common", dims=4, embedding_model="m")
    filler = {f"doc-{n}": [chunk(f"doc-{n}", f"f{n}.txt", "film directed in the state")] for n in range(120)}
    index.replace_documents(filler)
    index.replace_document("doc-x", [chunk("doc-x", "x.txt", "A film directed in Leland.")])
    hits = index.search_keywords(["film", "directed", "leland"], 5)
    assert hits[0].chunk_id == "chunk-doc-x-0"
    assert hits[0].score > 0
