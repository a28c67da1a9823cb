"""Retrieval latency against index size: the product's KNN and HYBRID search next to exact brute force.

For 10,000 and 100,000 chunks, over the same vectors:

* **brute force**: numpy ``X @ q`` and ``argpartition`` top-k over the float32 matrix in this
  process (the exact answer, and the reference every index has to beat);
* **KNN (HNSW)**: the bare RediSearch HNSW query (through redisvl) at several ``EF_RUNTIME``
  values, each with its recall@k against the exact top-k, and
  :meth:`~ragtopics.storage.chunk_index.ChunkIndex.search_vector`, the product's vector search at
  its own value (:data:`~ragtopics.storage.chunk_index.HNSW_EF_RUNTIME` for an index made now);
* **KNN (FLAT)**: a second RediSearch index with the FLAT (exact) algorithm over the same hashes;
* **HYBRID**: :func:`ragtopics.rag.retrieval.retrieve` with strategy HYBRID (KNN, BM25 keyword
  search and reciprocal rank fusion), the question's embedding excluded; and where its time goes
  (:func:`hybrid_parts`): the KNN, the keyword document frequencies (read from the index's counts,
  against one count query per term), the keyword candidates (the terms searched, against every
  term), the BM25 scoring and the fusion.

Every chunk is written with the keywords a HYBRID upload writes (its file name's and text's), so
the keyword search works on real term statistics.

The first 10,000 chunk texts are real (sentence windows of the HotpotQA passages, embedded by
the bundled model). The other 90,000 are derived from them, because embedding 100,000 texts on a
small CPU takes longer than the rest of the benchmark: each is the text of two random real chunks
joined, with the vector ``normalise(w * a + (1 - w) * b)``, ``w`` uniform in [0.55, 0.8]. The
derived vectors lie among the real ones (a nearest-neighbour search over them is no easier than
over real ones), and their texts have real term statistics for BM25.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import redis
from redisvl.index import SearchIndex
from redisvl.query import VectorQuery

from ragtopics.rag.retrieval import FUSION_DEPTH, fuse_rrf, reciprocal_rank_fusion, retrieve
from ragtopics.runtime import Runtime
from ragtopics.storage import chunk_index as chunk_index_module
from ragtopics.storage.chunk_index import (
    _RANKING_FIELDS,
    _RETURN_FIELDS,
    _STEMMER,
    _TERMS_COMPLETE,
    _TERMS_TOTAL,
    CODE_WEIGHT,
    ChunkHit,
    ChunkIndex,
    ChunkRecord,
    _escape_term,
    _hit,
    _search_rows,
    bm25_idf,
    bm25_score,
    candidate_terms,
    chunk_term_counts,
    keyword_candidates_limit,
    packed_count,
    packed_length,
    union_terms,
)
from ragtopics.text.keywords import index_keywords, is_identifier, query_keywords
from ragtopics.topics.topics import create_topic

SIZES = (10_000, 100_000)
#: Set to a number of chunks (``300000``, ``1000000``) to add that size to the latency section of ``make bench``
#: (opt in: writing and indexing 100,000 chunks takes minutes; Redis needs about 6 KB of memory a chunk).
LARGE_ENV = "RAGTOPICS_BENCH_LATENCY_LARGE"
TOP_K = 10
EF_VALUES = (10, 20, 30, 40, 60, 100, 200)
#: Chunks written per fake document (one chunk swap, one MULTI/EXEC): the server indexes each chunk's vector
#: inside the EXEC, so a larger batch holds every other client up for seconds on a busy host.
STORE_BATCH = 250
#: Tries of a batch whose write timed out (a chunk swap of a whole document can be repeated as it is).
STORE_TRIES = 3
#: The candidate query's limits and postings budgets compared in :func:`hybrid_parts`.
CANDIDATE_LIMITS = (120, 60, 40)
POSTINGS_BUDGETS = (2_000, 1_000)
ROUNDS = 5


@dataclass(frozen=True, slots=True)
class Timing:
    """Latencies of one kind of search over one index size.

    Attributes:
        p50_ms / p95_ms: percentiles over every timed query of every round, in milliseconds.
        recall: mean share of the exact top-k found (1.0 for exact searches; NaN for HYBRID, whose
            fused list is not a nearest-neighbour list).
    """

    p50_ms: float
    p95_ms: float
    recall: float = 1.0


def derive(vectors: np.ndarray, texts: list[str], total: int, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """Grow ``vectors`` (``(n, d)``, unit rows) and ``texts`` to ``total`` rows by mixing random pairs.

    Returns:
        ``(total, d)`` float32 unit vectors and ``total`` texts; the first ``n`` are the inputs.
    """
    n = len(texts)
    extra = total - n
    if extra <= 0:
        return vectors[:total], texts[:total]
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, extra), rng.integers(0, n, extra)
    w = rng.uniform(0.55, 0.8, extra).astype(np.float32)[:, None]
    mixed = w * vectors[a] + (1.0 - w) * vectors[b]
    mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
    return np.vstack([vectors, mixed]).astype(np.float32), texts + [f"{texts[i]} {texts[j]}" for i, j in zip(a, b)]


def exact_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the ``k`` rows of ``matrix`` (``(n, d)``) with the largest dot product with ``query``, best first."""
    scores = matrix @ query
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])]


def timed_rounds(
    searches: dict[str, Callable[[int], Any]], count: int, rounds: int = ROUNDS, warm_up: range = range(0)
) -> dict[str, tuple[list, Timing]]:
    """Time several searches over the same ``count`` queries, interleaved round by round.

    Each round runs every search over every query, one search after the other, so a slow
    spell of a shared machine falls on all of them alike rather than on whichever ran then.
    Before each search's timed queries, it runs the ``warm_up`` queries untimed: unrelated
    queries, as a steady stream of other users' searches would have run, so an index is not
    timed right after the brute force (which streams every vector through the CPU caches)
    evicted all of it. The p50 and p95 are over every timed query of every round, so a slow
    round counts in full.

    Args:
        searches: ``{name: fn}``; ``fn(i)`` searches for query ``i`` and returns what it found.
        count: number of timed queries (``0 .. count - 1``).
        rounds: rounds.
        warm_up: query numbers run untimed before each timed block (at least query 0 is).

    Returns:
        ``{name: (first round's results, Timing)}`` (recall is filled in by the caller).
    """
    results: dict[str, list] = {name: [] for name in searches}
    durations: dict[str, list[float]] = {name: [] for name in searches}
    for r in range(rounds):
        for name, fn in searches.items():
            for i in warm_up or range(1):
                fn(i)
            for i in range(count):
                t0 = time.perf_counter()
                out = fn(i)
                durations[name].append(time.perf_counter() - t0)
                if r == 0:
                    results[name].append(out)
    out = {}
    for name in searches:
        ms = np.asarray(durations[name]) * 1000.0
        out[name] = (results[name], Timing(float(np.percentile(ms, 50)), float(np.percentile(ms, 95))))
    return out


def store(index: ChunkIndex, vectors: np.ndarray, texts: list[str], start: int) -> None:
    """Write rows ``start:`` as chunks of fake documents of :data:`STORE_BATCH` chunks each.

    A batch whose write times out (a slow spell of a shared host) is written again, up to :data:`STORE_TRIES`
    times: each is a chunk swap of its whole document, which gives the same chunks however often it runs.

    Raises:
        redis.TimeoutError: when a batch timed out :data:`STORE_TRIES` times.
    """
    for b in range(start, len(texts), STORE_BATCH):
        doc_id = f"doc-lat{b // STORE_BATCH:04d}"
        records = [
            ChunkRecord(
                chunk_id=f"chunk-lat{n:06d}",
                document_id=doc_id,
                file_name=f"lat-{b // STORE_BATCH:04d}.txt",
                position=n - b,
                text=texts[n],
                embedding=vectors[n],
                keywords=index_keywords(f"lat-{b // STORE_BATCH:04d}.txt", texts[n]),
            )
            for n in range(b, min(b + STORE_BATCH, len(texts)))
        ]
        for attempt in range(1, STORE_TRIES + 1):
            try:
                index.replace_document(doc_id, records)
                break
            except redis.TimeoutError:
                if attempt == STORE_TRIES:
                    raise
                print(f"  writing {doc_id} timed out (try {attempt} of {STORE_TRIES}); writing it again", flush=True)
                time.sleep(5.0)


def wait_for_indexing(index: SearchIndex, timeout_s: float = 900.0) -> float:
    """Wait until RediSearch has indexed every hash written; returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        info = index.info()
        if str(info.get("indexing", "0")) in ("0", "0.0") and float(info.get("percent_indexed", 1)) >= 1.0:
            break
        time.sleep(0.2)
    return time.perf_counter() - t0


def flat_index(rt: Runtime, index: ChunkIndex) -> SearchIndex:
    """A second index over the same chunk hashes with the FLAT (exact) vector algorithm."""
    schema = ChunkIndex.schema(index.topic_id, index.dims, index.datatype())
    schema["index"]["name"] += "-flat"
    schema["fields"] = [{**f, "attrs": {**f["attrs"], "algorithm": "flat"}} for f in schema["fields"] if f["type"] == "vector"]
    flat = SearchIndex.from_dict(schema, redis_client=rt.redis)
    flat.create(overwrite=True)
    return flat


def knn(index: SearchIndex, vector: np.ndarray, k: int, ef: int | None, datatype: str) -> list[str]:
    """Chunk ids of a KNN query on ``index`` (ids only), the query vector in the index's ``datatype``."""
    query = VectorQuery(
        vector=vector.astype(datatype).tobytes(),
        vector_field_name="embedding",
        dtype=datatype,
        return_fields=["chunk_id"],
        num_results=k,
        ef_runtime=ef,
    )
    return [row["chunk_id"] for row in index.query(query)]


def recall_at_k(found: list[list[str]], exact: list[list[str]]) -> float:
    """Mean share of each exact top-k list found in the matching approximate list."""
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact)]))


def hybrid_before(index: ChunkIndex, question: str, vector: np.ndarray, candidates: int = TOP_K) -> list[str]:
    """The HYBRID retrieval as it was before 2026-12-05, for the same run's before/after: ids of the kept hits.

    Five round trips (the KNN with every field a source shows; the embedder record; the terms'
    document frequencies; the keyword candidates with their text and keywords; the embeddings of the
    keyword-only hits kept), each candidate's term frequencies counted from its text with the keyword
    regular expressions (:func:`~ragtopics.storage.chunk_index.chunk_term_counts`, its cache of 20,000
    chunks included), and the fusion over full hits. Its results equal the product's (checked by
    :func:`bench_latency` on every timed question).
    """
    depth = max(FUSION_DEPTH, 3 * candidates)
    dense = index.search_vector(vector, depth)
    terms = list(dict.fromkeys(query_keywords(question)))
    keyword = []
    if terms and index.built_with() is not None:
        counts, chunks = index.term_frequencies(terms) or index._count_each(terms)
        frequencies = dict(zip(terms, counts, strict=True))
        terms = [t for t in terms if frequencies[t]]
        if terms:
            total = max(chunks, max(frequencies.values()))
            weights = {t: (CODE_WEIGHT if is_identifier(t) else 1.0) * bm25_idf(total, frequencies[t]) for t in terms}
            fields = (*_RETURN_FIELDS, "keywords")
            reply = index.client.execute_command(
                "FT.SEARCH",
                index.index.name,
                f"@keywords:({'|'.join(_escape_term(t) for t in union_terms(candidate_terms(frequencies, terms)))})",
                "RETURN",
                len(fields),
                *fields,
                "SCORER",
                "BM25STD",
                "LIMIT",
                0,
                max(4 * depth, 100),  # the candidates of the time
                "DIALECT",
                2,
            )
            rows = [(_hit(row, 0.0), row.get("keywords", "").split()) for row in _search_rows(reply, index.prefix)]
            counted = [(hit, chunk_term_counts(hit, words)) for hit, words in rows]
            identifiers = [t for t in terms if is_identifier(t)]
            holding = [(hit, c) for hit, c in counted if any(t in c for t in identifiers)]
            counted = holding or counted
            average = sum(sum(c.values()) for _, c in counted) / len(counted) if counted else 1.0
            scored = [replace(hit, score=round(bm25_score(c, weights, average_length=average), 6)) for hit, c in counted]
            keyword = sorted((h for h in scored if h.score > 0), key=lambda h: -h.score)[:depth]
    fused, _ = fuse_rrf({"dense": dense, "keyword": keyword})
    pool = fused[:candidates]
    known = {h.chunk_id for h in dense}
    index.embeddings([h.chunk_id for h in pool if h.chunk_id not in known])
    return [h.chunk_id for h in pool]


def hybrid_three_trips(index: ChunkIndex, question: str, vector: np.ndarray, candidates: int = TOP_K) -> list[str]:
    """The HYBRID retrieval of the morning of 2026-12-05 (after stored term counts, before one pipeline), for the
    same run's before/after: ids of the kept hits.

    Three round trips (the embedder record, the KNN and the terms' document frequencies; the keyword candidates,
    up to 120, the rarest terms up to 2,000 postings; the kept hits), each candidate's frequency of each term
    found apart (:func:`~ragtopics.storage.chunk_index.packed_count`), BM25 by
    :func:`~ragtopics.storage.chunk_index.bm25_score`.
    """
    depth = max(FUSION_DEPTH, 3 * candidates)
    terms = list(dict.fromkeys(t for t in query_keywords(question) if t))
    also = [("HMGET", index.terms_key, _TERMS_COMPLETE, _TERMS_TOTAL, *_STEMMER.stemWords(terms))] if terms else []
    dense, extra = index._search_vector(vector, depth, _RANKING_FIELDS, also)
    dense = [h for h in dense or [] if h.score >= 0.0]  # Min. Similarity Score 0, as the timed retrieve
    keyword = []
    if terms:
        values = extra[0]
        frequencies = dict(zip(terms, [max(0, int(v or 0)) for v in values[2:]], strict=True))
        present = [t for t in terms if frequencies[t]]
        if present:
            total = max(int(values[1] or 0), max(frequencies.values()))
            weights = {t: (CODE_WEIGHT if is_identifier(t) else 1.0) * bm25_idf(total, frequencies[t]) for t in present}
            rows = index._keyword_candidates(candidate_terms(frequencies, present, postings=2_000), max(4 * depth, 100))
            identifiers = [t for t in present if is_identifier(t)]
            keyword = [hit for _, hit in bm25_term_by_term(rows, weights, identifiers, depth)]
    ranks = reciprocal_rank_fusion({"dense": [h.chunk_id for h in dense], "keyword": [h.chunk_id for h in keyword]})
    pool = list(ranks)[:candidates]
    known = {h.chunk_id for h in dense}
    index.read_hits(pool, vectors=[c for c in pool if c not in known])
    return pool


def bm25_term_by_term(
    rows: list[tuple[ChunkHit, str]], weights: dict[str, float], identifiers: list[str], k: int
) -> list[tuple[float, ChunkHit]]:
    """The reference BM25 ranking of keyword candidates, as the search ranked them before
    :func:`~ragtopics.storage.chunk_index.bm25_rank`: each term's count found apart
    (:func:`~ragtopics.storage.chunk_index.packed_count`), then :func:`~ragtopics.storage.chunk_index.bm25_score`.

    Returns:
        Up to ``k`` ``(score, hit)`` with a score > 0, best first.
    """
    counted = [(hit, {t: packed_count(p, t) for t in weights}, packed_length(p)) for hit, p in rows]
    counted = [row for row in counted if any(row[1][t] for t in identifiers)] or counted
    average = sum(n for _, _, n in counted) / len(counted) if counted else 1.0
    scored = [(round(bm25_score(tf, weights, average_length=average, length=n), 6), hit) for hit, tf, n in counted]
    return sorted((x for x in scored if x[0] > 0), key=lambda x: -x[0])[:k]


def hybrid_parts(index: ChunkIndex, questions: list[str], qvecs: np.ndarray, count: int) -> dict[str, Timing]:
    """Time each part of a HYBRID search alone, over the first ``count`` questions (one round each).

    Parts: the KNN alone at the fusion depth with the ids and file names only; the first round trip of
    :meth:`ChunkIndex.search_hybrid` (the embedder record, the KNN, the keyword document frequencies and,
    for a question whose terms were seen, the keyword candidates, in one pipeline) and, for reference, the
    same without the candidates and the KNN with every field; the keyword candidates for the terms searched
    (:func:`candidate_terms`) with their stored term counts at each limit of :data:`CANDIDATE_LIMITS` and
    budget of :data:`POSTINGS_BUDGETS`; BM25 over 120 fetched candidates, now
    (:func:`~ragtopics.storage.chunk_index.bm25_rank`) and term by term as before; the whole keyword search
    (frequencies, candidates and BM25); the fusion; and the kept hits' fields (:meth:`ChunkIndex.read_hits`).
    """
    depth = max(FUSION_DEPTH, 3 * TOP_K)
    limit = keyword_candidates_limit(depth)
    terms = [list(dict.fromkeys(query_keywords(q))) for q in questions[:count]]
    found = [index.term_frequencies(t) or index._count_each(t) for t in terms]
    searched: dict[int, list[list[str]]] = {budget: [] for budget in POSTINGS_BUDGETS}
    weights: list[dict[str, float]] = []
    identifiers: list[list[str]] = []
    current: list[list[str]] = []
    for t, (counts, total) in zip(terms, found):
        frequencies = dict(zip(t, counts, strict=True))
        present = [w for w in t if frequencies[w]]
        current.append(candidate_terms(frequencies, present) if present else [])
        for budget in POSTINGS_BUDGETS:
            searched[budget].append(candidate_terms(frequencies, present, postings=budget) if present else [])
        most = max([total, *frequencies.values()])
        weights.append({w: (CODE_WEIGHT if is_identifier(w) else 1.0) * bm25_idf(most, frequencies[w]) for w in present})
        identifiers.append([w for w in present if is_identifier(w)])
    lists = [index.search_hybrid(qvecs[i], terms[i], depth) for i in range(count)]
    fetched = [index._keyword_candidates(searched[2_000][i], 120) if searched[2_000][i] else [] for i in range(count)]

    def frequencies_command(i: int) -> list[tuple]:
        return [("HMGET", index.terms_key, _TERMS_COMPLETE, _TERMS_TOTAL, *_STEMMER.stemWords(terms[i]))] if terms[i] else []

    def bm25_before(i: int) -> list:
        return bm25_term_by_term(fetched[i], weights[i], identifiers[i], depth)

    def fusion(i: int) -> dict:
        dense, keyword = lists[i]
        return reciprocal_rank_fusion({"dense": [h.chunk_id for h in dense], "keyword": [h.chunk_id for h in keyword]})

    kept = [list(fusion(i))[:TOP_K] for i in range(count)]
    known = [{h.chunk_id for h in lists[i][0]} for i in range(count)]
    parts: dict[str, Callable[[int], Any]] = {
        "KNN alone (fusion depth, ids and file names)": lambda i: index.search_vector(
            qvecs[i], depth, fields=("document_id", "file_name")
        ),
        "KNN + frequencies + candidates (one pipeline)": lambda i: index._search_vector(
            qvecs[i],
            depth,
            _RANKING_FIELDS,
            [*frequencies_command(i), *([index._candidates_command(current[i], limit)] if current[i] else [])],
        ),
        "before: KNN + frequencies (one pipeline)": lambda i: index._search_vector(
            qvecs[i], depth, _RANKING_FIELDS, frequencies_command(i)
        ),
        "before: KNN, every field": lambda i: index.search_vector(qvecs[i], depth),
    }
    for budget in POSTINGS_BUDGETS:
        for cap in CANDIDATE_LIMITS:
            parts[f"candidates: {cap}, postings {budget:,}"] = lambda i, cap=cap, budget=budget: (
                index._keyword_candidates(searched[budget][i], cap) if searched[budget][i] else []
            )
    parts.update(
        {
            "BM25 of 120 candidates (bm25_rank)": lambda i: chunk_index_module.bm25_rank(
                fetched[i], weights[i], identifiers[i], depth
            ),
            "before: BM25 of 120, term by term": bm25_before,
            "keyword search (frequencies, candidates, BM25)": lambda i: index.search_keywords(terms[i], depth, full=False),
            "fusion (RRF over ids)": fusion,
            "the kept hits' fields (read_hits)": lambda i: index.read_hits(
                kept[i], vectors=[c for c in kept[i] if c not in known[i]]
            ),
        }
    )
    timed = timed_rounds(parts, count, rounds=1)
    return {name: timing for name, (_, timing) in timed.items()}


def sizes_from_env(sizes: tuple[int, ...] = SIZES) -> tuple[int, ...]:
    """:data:`SIZES` and the size named by :data:`LARGE_ENV`, when set (a positive whole number of chunks).

    Raises:
        ValueError: when the variable is set to anything but a positive whole number.
    """
    raw = os.environ.get(LARGE_ENV, "").replace(",", "").replace("_", "").strip()
    if not raw:
        return sizes
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"{LARGE_ENV} must be a number of chunks such as 300000, not {raw!r}")
    return tuple(sorted({*sizes, int(raw)}))


def bench_latency(
    rt: Runtime, vectors: np.ndarray, texts: list[str], questions: list[str], figure, section, sizes: tuple[int, ...] = SIZES
) -> dict:
    """Measure every search at each size in ``sizes``; print the figures and return them for the plot.

    After the largest size, Redis's memory per chunk is printed without the bench's FLAT index as well,
    with what it comes to at 1,000,000 chunks (the sizes measured show it constant per chunk).

    Args:
        vectors: ``(n, d)`` unit float32 embeddings of ``texts`` (n = the real chunks).
        questions: the questions to search for (embedded here, outside the timings).
        figure: ``figure(label, value, unit)`` prints one figure.
        sizes: index sizes, ascending (:func:`sizes_from_env` adds the opt-in large one).

    Returns:
        ``{size: {"brute force": Timing, "KNN HNSW ef=..": Timing, "KNN FLAT": Timing, "HYBRID": Timing}}``.
    """
    timed = len(questions)
    # Warm-up queries unrelated to the timed questions: random chunks of the index (their text and vector).
    picks = np.random.default_rng(1).integers(0, len(texts), timed)
    qvecs = np.vstack([rt.gateway.embed(questions), vectors[picks]]).astype(np.float32)
    questions = questions + [texts[i] for i in picks]
    all_vectors, all_texts = derive(vectors, texts, max(sizes))
    topic = create_topic(rt, "bench-latency", settings={"top_k_results": TOP_K})
    index = rt.chunk_index(topic.id)
    index.ensure()
    baseline = int(rt.redis.info("memory")["used_memory"])
    flat = flat_index(rt, index)
    written, out = 0, {}
    for size in sizes:
        section(f"3. retrieval latency over {size:,} chunks ({timed} questions x {ROUNDS} rounds, top {TOP_K})")
        t0 = time.perf_counter()
        store(index, all_vectors[:size], all_texts[:size], written)
        written = size
        waited = wait_for_indexing(index.index) + wait_for_indexing(flat)
        figure("chunks in index", index.count())
        figure("write + index time", time.perf_counter() - t0, "s")
        figure("of which waiting for indexing", waited, "s")
        # both vector copies (hash and HNSW graph), the text, the keyword index, and the FLAT index of this bench
        figure(
            f"Redis memory per chunk ({index.datatype()} vectors, with the bench's FLAT index)",
            (int(rt.redis.info("memory")["used_memory"]) - baseline) / size,
            "bytes",
        )
        matrix = all_vectors[:size]
        ids = [f"chunk-lat{n:06d}" for n in range(size)]
        brute_name, product_name = "brute force (numpy, exact)", "product search_vector"
        searches = {brute_name: lambda i, matrix=matrix: exact_top_k(matrix, qvecs[i], TOP_K)}
        for ef in EF_VALUES:
            searches[f"KNN HNSW EF_RUNTIME={ef}"] = lambda i, ef=ef: knn(index.index, qvecs[i], TOP_K, ef, index.datatype())
        searches["KNN FLAT (RediSearch, exact)"] = lambda i: knn(flat, qvecs[i], TOP_K, None, index.datatype())
        searches[product_name] = lambda i: [h.chunk_id for h in index.search_vector(qvecs[i], TOP_K)]
        searches["product HYBRID (KNN + BM25 + RRF)"] = lambda i: [
            h.chunk_id
            for h in retrieve(index, questions[i], qvecs[i], strategy="HYBRID", top_k=TOP_K, min_score=0.0, candidates=TOP_K).hits
        ]
        searches["HYBRID, three round trips (12-05 am)"] = lambda i: hybrid_three_trips(index, questions[i], qvecs[i])
        searches["HYBRID before 2026-12-05"] = lambda i: hybrid_before(index, questions[i], qvecs[i])
        timings = timed_rounds(searches, timed, warm_up=range(timed, 2 * timed))
        exact_ids = [[ids[i] for i in row] for row in timings[brute_name][0]]
        rows = {}
        for name, (found, timing) in timings.items():
            if "HYBRID" in name:  # a fused list, not a nearest-neighbour list: no recall against exact
                rows[name] = replace(timing, recall=float("nan"))
            else:
                rows[name] = timing if name == brute_name else replace(timing, recall=recall_at_k(found, exact_ids))
        print(f"  {'search':<36} {'p50 ms':>8} {'p95 ms':>8} {'recall@10':>10} {'vs brute p95':>13}", flush=True)
        brute = rows[brute_name]
        for name, t in rows.items():
            speedup = brute.p95_ms / t.p95_ms if t.p95_ms else 0.0
            recall = "n/a" if np.isnan(t.recall) else f"{t.recall:.3f}"
            print(f"  {name:<36} {t.p50_ms:>8.2f} {t.p95_ms:>8.2f} {recall:>10} {speedup:>12.1f}x", flush=True)
        figure("product EF_RUNTIME (this index's)", index.ef_runtime())
        hybrid, knn_row = rows["product HYBRID (KNN + BM25 + RRF)"], rows[product_name]
        figure(
            "goal: HYBRID p95 <= 5 ms, >= 3x brute force",
            f"{hybrid.p95_ms:.2f} ms, {brute.p95_ms / hybrid.p95_ms:.1f}x (brute force p95 {brute.p95_ms:.2f} ms)",
        )
        figure(
            "goal: KNN p95 >= 10x brute force, recall@10 >= 0.99",
            f"{brute.p95_ms / knn_row.p95_ms:.1f}x ({knn_row.p95_ms:.2f} ms), recall@10 {knn_row.recall:.3f}",
        )
        same = sum(
            a == b for a, b in zip(timings["product HYBRID (KNN + BM25 + RRF)"][0], timings["HYBRID before 2026-12-05"][0])
        )
        figure("HYBRID questions with the same hits as before", f"{same} of {timed}")
        same = sum(
            a == b
            for a, b in zip(timings["product HYBRID (KNN + BM25 + RRF)"][0], timings["HYBRID, three round trips (12-05 am)"][0])
        )
        figure("HYBRID questions with the same hits as three round trips", f"{same} of {timed}")
        print("  where a HYBRID search's time goes (each part alone):", flush=True)
        for name, t in hybrid_parts(index, questions, qvecs, timed).items():
            print(f"    {name:<42} p50 {t.p50_ms:>7.2f} ms   p95 {t.p95_ms:>7.2f} ms", flush=True)
        out[size] = rows
    flat.delete(drop=False)
    per_chunk = (int(rt.redis.info("memory")["used_memory"]) - baseline) / written
    figure(f"Redis memory per chunk at {written:,}, the product's index alone", per_chunk, "bytes")
    figure("the same, projected to 1,000,000 chunks", per_chunk * 1_000_000 / 2**30, "GiB")
    return out


def _texts_digest(model: str, texts: list[str]) -> str:
    """SHA-256 (hex) of the model's name and the texts, which a kept file of embeddings must match."""
    digest = hashlib.sha256(model.encode())
    for text in texts:
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()


def kept_embeddings(path: Path, model: str, texts: list[str]) -> np.ndarray | None:
    """The embeddings :func:`keep_embeddings` wrote to ``path`` for the same model and texts; ``None`` when the
    file is missing or was written for other ones."""
    if not path.is_file():
        return None
    with np.load(path) as kept:
        if str(kept["digest"]) != _texts_digest(model, texts) or kept["vectors"].shape[0] != len(texts):
            return None
        return kept["vectors"].astype(np.float32)


def keep_embeddings(path: Path, model: str, texts: list[str], vectors: np.ndarray) -> None:
    """Write ``vectors`` (``(len(texts), d)``) to ``path`` (.npz) with the digest of the model and the texts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, vectors=vectors, digest=np.asarray(_texts_digest(model, texts)))


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.latency [--sizes 10000,100000,300000] [--embeddings FILE]``: this section of ``make bench``
    alone, on a throwaway Redis (the same chunk texts, derived vectors and questions), with the time it took."""
    from bench.report import figure, section
    from bench.run import embed_texts, eval_dir, latency_texts, load_eval_data, throwaway_runtime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default=",".join(str(n) for n in sizes_from_env()),
        help="index sizes in chunks, comma separated (default: %(default)s)",
    )
    parser.add_argument(
        "--embeddings",
        type=Path,
        help="keep the 10,000 chunk texts' embeddings in this .npz file: a later run with the same model and texts "
        "reads them instead of embedding again (minutes on a small or busy CPU)",
    )
    args = parser.parse_args(argv)
    sizes = tuple(sorted({int(n.replace("_", "")) for n in args.sizes.split(",") if n.strip()}))
    started = time.perf_counter()
    data = load_eval_data(eval_dir())
    with throwaway_runtime(prefix="ragtopics-latency-") as rt:
        section("3. embedding 10,000 real chunk texts for the latency index")
        texts = latency_texts(data.corpus, 10_000)
        vectors = kept_embeddings(args.embeddings, rt.gateway.embedder.model, texts) if args.embeddings else None
        if vectors is None:
            vectors, embed_s = embed_texts(rt, texts)
            figure("embed time", embed_s, "s")
            if args.embeddings:
                keep_embeddings(args.embeddings, rt.gateway.embedder.model, texts, vectors)
        else:
            figure("embeddings read from", str(args.embeddings))
        bench_latency(rt, vectors, texts, [q["question"] for q in data.questions], figure, section, sizes)
    figure("whole run", time.perf_counter() - started, "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
