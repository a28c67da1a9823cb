"""HYBRID search reads stored term counts, not texts: each chunk's BM25 term frequencies are written with it at
upload and equal what its text gives; a HYBRID retrieval sends a fixed set of commands to the real Redis (the
KNN, the record and the document frequencies together, one candidate query without texts, then the kept hits
only), in two round trips once its terms' frequencies were read before (the candidate query goes with the
KNN) and three otherwise, with the same results either way, also when the frequencies changed in between;
and its results equal those of the scoring from the text, which a chunk stored before the counts were kept
still gets."""

from __future__ import annotations

import numpy as np
import pytest

from ragtopics.rag.retrieval import fuse_rrf, retrieve
from ragtopics.storage import chunk_index
from ragtopics.storage.chunk_index import (
    TERM_COUNTS_FIELD,
    ChunkIndex,
    ChunkRecord,
    bm25_idf,
    bm25_rank,
    bm25_score,
    candidate_terms,
    chunk_terms,
    pack_term_counts,
    packed_count,
    packed_length,
)
from ragtopics.text.keywords import index_keywords, is_identifier, query_keywords
from tests.redis_commands import CommandLog, RoundTrips

TEXTS = {
    "Pump manual.txt": ["The pump P-7 moves coolant; the pump runs at 40 rpm.", "Service the valve V-12 every year."],
    "Valve guide.md": ["A valve stops flow. Valves wear; valve seats crack.", "The coolant pump P-7 feeds valve V-12."],
    "Leland.txt": ["Leland is a town in North Carolina.", "A film was shot in Leland in 1986."],
    "Films of 1986.txt": ["Films shot in 1986 include one about a pump.", "The director filmed the coolant plant."],
}
QUESTIONS = [
    "Which pump moves coolant?",
    "How often is valve V-12 serviced?",
    "What film was shot in Leland in 1986?",
    "P-7 coolant",
    "valves crack",
]


def unpack(packed: str) -> tuple[int, dict[str, int]]:
    """``(length, {term: count})`` of a packed field, read by splitting (independent of :func:`packed_count`)."""
    length, *pairs = packed.split()
    return int(length), {term: int(count) for term, count in (p.rsplit(":", 1) for p in pairs)}


def vector(seed: int, dims: int = 8) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=dims).astype(np.float32)
    return v / np.linalg.norm(v)


def build(rt, topic: str, *, enrich: str = "") -> ChunkIndex:
    """An index of :data:`TEXTS`, keywords as a HYBRID upload writes them (plus ``enrich``, a model's keywords)."""
    index = ChunkIndex(rt.redis, topic, dims=8, embedding_model="m")
    n = 0
    for d, (name, texts) in enumerate(TEXTS.items()):
        records = []
        for position, text in enumerate(texts):
            keywords = " ".join(filter(None, [index_keywords(name, text), enrich]))
            records.append(
                ChunkRecord(
                    chunk_id=f"chunk-{d}-{position}",
                    document_id=f"doc-{d}",
                    file_name=name,
                    position=position,
                    text=text,
                    embedding=vector(n),
                    keywords=keywords,
                )
            )
            n += 1
        index.replace_document(f"doc-{d}", records)
    return index


def test_each_chunk_stores_the_term_counts_its_text_gives(rt):
    index = build(rt, "topic-tf", enrich="turbomachinery note:odd")
    for d, (name, texts) in enumerate(TEXTS.items()):
        for position, text in enumerate(texts):
            stored = rt.redis.hgetall(index.key(f"chunk-{d}-{position}"))
            packed = stored[TERM_COUNTS_FIELD.encode()].decode()
            keywords = stored[b"keywords"].decode().split()
            expected = chunk_terms(name, text, keywords)
            length, counts = unpack(packed)
            assert length == sum(expected.values())  # the ":" keyword counts in the length ...
            assert counts == {t: c for t, c in expected.items() if ":" not in t}  # ... but is not listed
            assert counts["turbomachinery"] == 1  # an enrichment keyword the text lacks counts once
            assert packed_length(packed) == length
            assert all(packed_count(packed, t) == c for t, c in expected.items() if ":" not in t)
            assert packed_count(packed, "absent") == 0
    assert unpack(pack_term_counts(chunk_terms("Pump manual.txt", "The pump P-7: the pump.", [])))[1] == {
        "pump": 3,
        "manual": 1,
        "p7": 1,
    }
    # a chunk without keywords (a DENSE upload) stores no counts: it is never a keyword candidate
    index.replace_document(
        "doc-dense",
        [
            ChunkRecord(
                chunk_id="chunk-dense", document_id="doc-dense", file_name="d.txt", position=0, text="pump", embedding=vector(99)
            )
        ],
    )
    assert rt.redis.hget(index.key("chunk-dense"), TERM_COUNTS_FIELD) == b""


def test_a_hybrid_search_reads_the_kept_hits_only(rt):
    index = build(rt, "topic-hybrid-commands")
    question = "Which pump P-7 moves coolant through valve V-12?"
    index.search_vector(vector(3), 1)  # the index's profile, read once a process
    chunk_index._FREQUENCIES.pop(index.index.name, None)  # the question's terms not seen before
    with CommandLog(rt.redis) as log:
        found = retrieve(index, question, vector(3), strategy="HYBRID", top_k=3, min_score=0.0, candidates=3)
    assert len(found.hits) == 3 and found.keyword
    searches = [c for c in log.commands if c[0] == "FT.SEARCH"]
    assert len(searches) == 2  # the KNN and the keyword candidates
    for command in searches:
        returned = command[command.index("RETURN") + 2 :][: int(command[command.index("RETURN") + 1])]
        assert "text" not in returned and "keywords" not in returned
    assert [c[0] for c in log.commands if c[1] == index.terms_key] == ["HMGET"]  # the document frequencies, once
    assert log.count("HGETALL") == 1  # the embedder record
    chunk_reads = [c for c in log.commands if len(c) > 1 and c[1].startswith(index.prefix)]
    assert sorted(c[1] for c in chunk_reads) == sorted(index.key(h.chunk_id) for h in found.hits)
    assert all(c[0] == "HMGET" for c in chunk_reads)
    sent = [c for c in log.commands if c[0] != "CLIENT"]  # less a new connection's handshake
    assert len(sent) == 2 + 2 + len(found.hits)  # record, KNN, frequencies, candidates; the kept hits
    assert all(h.text for h in found.hits)  # the kept hits carry every field a source shows
    assert not any(h.text for h in found.keyword + found.dense)  # the lists fused carry ids and file names only


@pytest.mark.parametrize("enrich", ["", "coolant turbomachinery"])
def test_results_equal_the_scoring_from_the_text(rt, monkeypatch, enrich):
    index = build(rt, f"topic-hybrid-same-{bool(enrich)}", enrich=enrich)
    # the same chunks as an older release wrote them: no stored counts, so each candidate is counted from its text
    monkeypatch.setattr(chunk_index, "pack_term_counts", lambda counts: "")
    before = build(rt, f"topic-hybrid-before-{bool(enrich)}", enrich=enrich)
    monkeypatch.undo()
    assert rt.redis.hget(before.key("chunk-0-0"), TERM_COUNTS_FIELD) == b""
    for i, q in enumerate(QUESTIONS):
        stored = index.search_keywords(query_keywords(q), 10)
        counted = before.search_keywords(query_keywords(q), 10)
        # equal scores; RediSearch orders tied candidates differently in two indexes, so ties are compared as sets
        assert stored and sorted((-h.score, h.chunk_id, h.text, h.file_name) for h in stored) == sorted(
            (-h.score, h.chunk_id, h.text, h.file_name) for h in counted
        )
        now = retrieve(index, q, vector(i), strategy="HYBRID", top_k=4, min_score=0.0, candidates=4)
        # the fusion equals fuse_rrf over full hits, the scores are cosine similarities of the stored vectors
        dense = [h for h in index.search_vector(vector(i), 30) if h.score >= 0.0]  # Min. Similarity Score 0
        fused, _ = fuse_rrf({"dense": dense, "keyword": index.search_keywords(query_keywords(q), 30)})
        assert [h.chunk_id for h in now.hits] == [h.chunk_id for h in fused[:4]]
        vectors = index.embeddings([h.chunk_id for h in now.hits])
        assert [h.score for h in now.hits] == pytest.approx([float(vectors[h.chunk_id] @ vector(i)) for h in now.hits], abs=1e-3)


def test_a_question_whose_terms_were_seen_takes_two_round_trips(rt):
    index = build(rt, "topic-hybrid-trips")
    question = "Which pump P-7 moves coolant through valve V-12?"
    index.search_vector(vector(3), 1)  # the index's profile, read once a process
    chunk_index._FREQUENCIES.pop(index.index.name, None)

    def search():
        return retrieve(index, question, vector(3), strategy="HYBRID", top_k=3, min_score=0.0, candidates=3)

    with RoundTrips(rt.redis) as cold:
        first = search()
    with RoundTrips(rt.redis) as warm:
        second = search()
    with CommandLog(rt.redis) as log:
        search()
    assert cold.count == 3  # record + KNN + frequencies; the candidates; the kept hits
    assert warm.count == 2  # record + KNN + frequencies + candidates; the kept hits
    assert log.count("FT.SEARCH") == 2 and [c[0] for c in log.commands if c[1] == index.terms_key] == ["HMGET"]
    assert second.hits == first.hits and second.keyword == first.keyword and second.dense == first.dense
    assert second.fused_ranks == first.fused_ranks and first.keyword


def test_frequencies_changed_since_they_were_read_do_not_change_the_results(rt, monkeypatch):
    # one term searched, the rarest: which one depends on the frequencies
    monkeypatch.setattr(chunk_index, "CANDIDATE_POSTINGS", 1)
    monkeypatch.setattr(chunk_index, "CANDIDATE_TERMS_KEPT", 1)
    index = build(rt, "topic-hybrid-stale")
    terms = query_keywords("Leland coolant")

    def chosen() -> list[str]:
        counts, _ = index.term_frequencies(terms)
        return candidate_terms(dict(zip(terms, counts, strict=True)), terms)

    def search():
        return retrieve(index, "Leland coolant", vector(5), strategy="HYBRID", top_k=3, min_score=0.0, candidates=3)

    assert chosen() == ["leland"]  # in 2 chunks (the file's name), coolant in 3
    search()  # the frequencies remembered
    more = [
        ChunkRecord(
            chunk_id=f"chunk-notes-{i}",
            document_id="doc-notes",
            file_name="Leland notes.txt",
            position=i,
            text=f"Leland note {i}.",
            embedding=vector(50 + i),
            keywords=index_keywords("Leland notes.txt", f"Leland note {i}."),
        )
        for i in range(3)
    ]
    index.replace_document("doc-notes", more)
    assert chosen() == ["coolant"]  # leland is in 5 chunks now
    with RoundTrips(rt.redis) as stale:
        found = search()  # the candidate query sent with the KNN searched leland: its reply is not used
    chunk_index._FREQUENCIES.pop(index.index.name, None)
    fresh = search()
    assert stale.count == 3
    assert found.keyword == fresh.keyword and found.hits == fresh.hits and found.keyword
    assert {h.chunk_id for h in found.keyword} >= {"chunk-0-0", "chunk-1-1", "chunk-3-1"}  # the coolant chunks


def test_ranking_the_candidates_equals_bm25_of_each_term(rt):
    index = build(rt, "topic-hybrid-rank", enrich="coolant")
    for q in [*QUESTIONS, "P-7 V-12 pump", "shot film 1986 Leland coolant"]:
        terms = query_keywords(q)
        counts, total = index.term_frequencies(terms)
        frequencies = dict(zip(terms, counts, strict=True))
        terms = [t for t in terms if frequencies[t]]
        weights = {t: (3.0 if is_identifier(t) else 1.0) * bm25_idf(total, frequencies[t]) for t in terms}
        rows = index._keyword_candidates(terms, 100)
        identifiers = [t for t in terms if is_identifier(t)]
        # the reference: each term's count found apart, then bm25_score
        counted = [(hit, {t: packed_count(p, t) for t in terms}, packed_length(p)) for hit, p in rows]
        holding = [row for row in counted if any(row[1][t] for t in identifiers)]
        counted = holding or counted
        average = sum(length for _, _, length in counted) / len(counted)
        expected = [(round(bm25_score(tf, weights, average_length=average, length=n), 6), hit.chunk_id) for hit, tf, n in counted]
        expected = sorted((pair for pair in expected if pair[0] > 0), key=lambda pair: -pair[0])[:4]
        assert [(h.score, h.chunk_id) for h in bm25_rank(rows, weights, identifiers, 4)] == expected and expected


def test_ranking_reads_each_term_whole_from_the_packed_counts():
    from ragtopics.storage.chunk_index import ChunkHit

    packed = [
        pack_term_counts({"films": 3, "film": 2, "p7": 1, "leland2": 1}),
        pack_term_counts({"filmography": 4, "leland": 1, "p70": 2}),  # "film" and "p7" only as parts of others
        pack_term_counts({"unrelated": 5}),
    ]
    rows = [(ChunkHit(f"chunk-{i}", "doc", "f.txt", i, "", 0.0), p) for i, p in enumerate(packed)]
    weights = {"film": 1.0, "films": 0.5, "p7": 2.0, "leland": 0.7}
    counted = [{t: packed_count(p, t) for t in weights} for p in packed]
    assert counted[0] == {"film": 2, "films": 3, "p7": 1, "leland": 0}
    assert counted[1] == {"film": 0, "films": 0, "p7": 0, "leland": 1}
    average = sum(packed_length(p) for p in packed) / len(packed)
    expected = [
        (round(bm25_score(tf, weights, average_length=average, length=packed_length(p)), 6), f"chunk-{i}")
        for i, (tf, p) in enumerate(zip(counted, packed, strict=True))
    ]
    expected = sorted((pair for pair in expected if pair[0] > 0), key=lambda pair: -pair[0])
    assert [(h.score, h.chunk_id) for h in bm25_rank(rows, weights, [], 3)] == expected
    assert [h.chunk_id for h in bm25_rank(rows, weights, ["p7"], 3)] == ["chunk-0"]  # only the chunk with P7
