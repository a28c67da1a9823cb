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

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from redisvl.index import SearchIndex
from redisvl.query import VectorQuery

from ragtopics.rag.retrieval import FUSION_DEPTH, fuse_rrf, retrieve
from ragtopics.runtime import Runtime
from ragtopics.storage.chunk_index import _MIN_KEYWORD_CANDIDATES, ChunkIndex, ChunkRecord, candidate_terms
from ragtopics.text.keywords import index_keywords, query_keywords
from ragtopics.topics.topics import create_topic

SIZES = (10_000, 100_000)
TOP_K = 10
EF_VALUES = (10, 20, 30, 40, 60, 100, 200)
STORE_BATCH = 1_000
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
    """Write rows ``start:`` as chunks of fake documents of :data:`STORE_BATCH` chunks each."""
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
        index.replace_document(doc_id, records)


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


def hybrid_parts(index: ChunkIndex, questions: list[str], qvecs: np.ndarray, count: int) -> dict[str, Timing]:
    """Time each part of a HYBRID search alone, over the first ``count`` questions (one round each).

    Parts: the KNN (:meth:`ChunkIndex.search_vector` at the fusion depth); the keyword document
    frequencies from the index's counts (:meth:`ChunkIndex.term_frequencies`, one ``HMGET``) and, for
    reference, from one count query per term (what the search did before the counts were kept);
    the keyword candidates for the terms searched (:func:`candidate_terms`) and, for reference, for
    every term; the whole keyword search; and the fusion of the two lists.
    """
    depth = max(FUSION_DEPTH, 3 * TOP_K)
    limit = max(4 * depth, _MIN_KEYWORD_CANDIDATES)
    terms = [query_keywords(q) for q in questions[:count]]
    found = [index.term_frequencies(t) or index._count_each(t) for t in terms]
    searched = []
    for t, (counts, _) in zip(terms, found):
        frequencies = dict(zip(t, counts, strict=True))
        present = [w for w in t if frequencies[w]]
        searched.append(candidate_terms(frequencies, present) if present else [])
    dense = [index.search_vector(qvecs[i], depth) for i in range(count)]
    keyword = [index.search_keywords(terms[i], depth) for i in range(count)]
    parts = {
        "KNN (fusion depth)": lambda i: index.search_vector(qvecs[i], depth),
        "term frequencies: counts (HMGET)": lambda i: index.term_frequencies(terms[i]),
        "term frequencies: a count query a term": lambda i: index._count_each(terms[i]),
        "candidates: terms searched": lambda i: index._keyword_candidates(searched[i], limit) if searched[i] else [],
        "candidates: every term": lambda i: index._keyword_candidates(terms[i], limit) if terms[i] else [],
        "keyword search (all of it)": lambda i: index.search_keywords(terms[i], depth),
        "fusion (RRF)": lambda i: fuse_rrf({"dense": dense[i], "keyword": keyword[i]}),
    }
    timed = timed_rounds(parts, count, rounds=1)
    return {name: timing for name, (_, timing) in timed.items()}


def bench_latency(rt: Runtime, vectors: np.ndarray, texts: list[str], questions: list[str], figure, section) -> dict:
    """Measure every search at each size in :data:`SIZES`; print the figures and return them for the plot.

    Args:
        vectors: ``(n, d)`` unit float32 embeddings of ``texts`` (n = the real chunks).
        questions: the questions to search for (embedded here, outside the timings).
        figure: ``figure(label, value, unit)`` prints one figure.

    Returns:
        ``{size: {"brute force": Timing, "KNN HNSW ef=..": Timing, "KNN FLAT": Timing, "HYBRID": Timing}}``.
    """
    timed = len(questions)
    # Warm-up queries unrelated to the timed questions: random chunks of the index (their text and vector).
    picks = np.random.default_rng(1).integers(0, len(texts), timed)
    qvecs = np.vstack([rt.gateway.embed(questions), vectors[picks]]).astype(np.float32)
    questions = questions + [texts[i] for i in picks]
    all_vectors, all_texts = derive(vectors, texts, max(SIZES))
    topic = create_topic(rt, "bench-latency", settings={"top_k_results": TOP_K})
    index = rt.chunk_index(topic.id)
    index.ensure()
    baseline = int(rt.redis.info("memory")["used_memory"])
    flat = flat_index(rt, index)
    written, out = 0, {}
    for size in SIZES:
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
        searches["product HYBRID (KNN + BM25 + RRF)"] = lambda i: (
            retrieve(index, questions[i], qvecs[i], strategy="HYBRID", top_k=TOP_K, min_score=0.0, candidates=TOP_K).hits
        )
        timings = timed_rounds(searches, timed, warm_up=range(timed, 2 * timed))
        exact_ids = [[ids[i] for i in row] for row in timings[brute_name][0]]
        rows = {}
        for name, (found, timing) in timings.items():
            if name.startswith("product HYBRID"):  # a fused list, not a nearest-neighbour list: no recall against exact
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
        print("  where a HYBRID search's time goes (each part alone):", flush=True)
        for name, t in hybrid_parts(index, questions, qvecs, timed).items():
            print(f"    {name:<42} p50 {t.p50_ms:>7.2f} ms   p95 {t.p95_ms:>7.2f} ms", flush=True)
        out[size] = rows
    flat.delete(drop=False)
    return out
