"""Graph question benchmark: LOCAL, PATH and GLOBAL retrieval latency as a GraphRAG Topic grows.

Figures, one per line, never asserted (``make bench`` section 16; ``python -m bench.graph_questions``
alone, ``--quick``: 10,000 entities only, no HotpotQA part):

1. **Synthetic graphs of 10,000 and 100,000 entities**, written through the product's own store
   (:meth:`GraphStore.upsert`, one document of :data:`DOC_CHUNKS` chunks per query): each chunk mentions
   one entity in turn (so every entity has a chunk) and :data:`ZIPF_MENTIONS` more drawn from a Zipf law
   (exponent :data:`ZIPF_S`), so mentions are heavy-tailed as in real text: the most named entity is in
   about a fifth of the chunks at 100,000 (printed). Entities mentioned in one chunk are related in a
   chain. Chunks go to the Topic's chunk index and the :data:`VECTOR_ENTITIES` most named entities get
   vectors (random unit vectors: HNSW's worst case), and one community summary per :data:`COMMUNITY_SIZE`
   entities goes to the report index. Random vectors are nearly orthogonal to every question, so these
   Topics take Min. Similarity Score 0: every candidate seeds the search, as similar entities would.
2. **The HotpotQA Topic**: the gold passages of :data:`HOTPOT_QUESTIONS` questions ingested with the NLP
   method (the real pipeline and embedder), asked those questions.

For each graph, :data:`QUESTIONS` questions per way, through the product's retrievers with the Topic's
default settings (retrieval only, no answer written; the questions are embedded beforehand in one batch, so
the figures are the search's own, and the embedding's cost per question is printed apart): LOCAL ("What is
known about <entity>?", the entity drawn by the mention law, so hubs are asked about as often as users
name them), PATH ("How is <a> related to <b>?") and GLOBAL (overview questions over the summaries;
the bundled model's map step). p50 and p95 in ms, the goal "LOCAL p95 <= 150 ms at 100,000 entities"
next to it. The build time is printed too.
"""

from __future__ import annotations

import itertools
import random
import sys
import time
from collections.abc import Callable

import numpy as np

from bench.report import figure, section, versus

SIZES = (10_000, 100_000)
#: Chunks per synthetic document (one upsert query each).
DOC_CHUNKS = 500
#: Entities given a vector: the most mentioned ones (loading a vector costs about 1 ms, its parameters travel as text).
VECTOR_ENTITIES = 10_000
#: Entities drawn from the Zipf law per chunk, besides the one each chunk mentions in turn.
ZIPF_MENTIONS = 4
#: Zipf exponent of the mentions (word frequencies in text are near 1).
ZIPF_S = 1.1
#: Chunks per entity (0.5: 50,000 chunks for 100,000 entities).
CHUNKS_PER_ENTITY = 0.5
#: Entities per community summary.
COMMUNITY_SIZE = 50
#: Questions per way and graph (after :data:`WARMUP` unmeasured ones).
QUESTIONS = 40
WARMUP = 3
HOTPOT_QUESTIONS = 25
#: How long the bench's Redis client waits for a reply (redis-py's default, 5 s, is passed by a 100,000-entity
#: build's writes on a loaded host; the product's searches carry their own server-side limits).
SOCKET_TIMEOUT_S = 600
#: The goal of issue "Graph questions": LOCAL p95 at 100,000 entities, in ms.
LOCAL_P95_GOAL_MS = 150.0
TYPES = ("PERSON", "ORGANIZATION", "PLACE", "WORK", "EVENT")
_SYLLABLES = ("ka", "lo", "mi", "ren", "sa", "tor", "vel", "du", "ne", "bri", "gan", "os", "ul", "fe", "zi", "mar")


def entity_name(i: int) -> str:
    """A distinct, pronounceable two-word name for entity ``i`` (capitalised, as names in questions are)."""
    parts = []
    for _ in range(2):
        word, n = "", i
        for _ in range(3):
            word += _SYLLABLES[n % len(_SYLLABLES)]
            n //= len(_SYLLABLES)
        parts.append(word.capitalize())
        i //= len(_SYLLABLES) ** 3
    return f"{parts[0]} {parts[1]}{'' if i == 0 else f' {i}'}"


def zipf_draws(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` entity indexes in ``[0, n)`` drawn with probability proportional to ``1 / (rank + 1) ** ZIPF_S``."""
    weights = 1.0 / np.arange(1, n + 1) ** ZIPF_S
    return rng.choice(n, size=count, p=weights / weights.sum())


def unit_vectors(count: int, dims: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal((count, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def build_synthetic(rt, n: int, seed: int = 1):
    """A GraphRAG Topic with ``n`` synthetic entities (see the module docstring), its build figures printed.

    Returns:
        ``(topic, names, mention law draws)``: entity names by index, and a sampler of entity indexes.
    """
    from ragtopics.graph.community_index import CommunityIndex, CommunityRecord
    from ragtopics.graph.ingest import graph_store
    from ragtopics.graph.model import Entity, Relationship, entity_id_for
    from ragtopics.storage.chunk_index import ChunkRecord
    from ragtopics.text.keywords import index_keywords
    from ragtopics.topics.topics import create_topic

    rng = np.random.default_rng(seed)
    # Random vectors are nearly orthogonal to any question: with the default threshold nothing would seed the
    # search, so the synthetic Topics take every candidate (the work a question with similar entities makes).
    topic = create_topic(rt, f"bench-graph-q-{n}", kind="graphrag", settings={"min_similarity_score": 0.0})
    store, index = graph_store(rt, topic), rt.chunk_index(topic.id)
    dims = rt.gateway.embedder.dims
    names = [entity_name(i) for i in range(n)]
    types = [TYPES[i % len(TYPES)] for i in range(n)]
    ids = [entity_id_for(names[i], types[i]) for i in range(n)]
    chunks = int(n * CHUNKS_PER_ENTITY)
    drawn = zipf_draws(n, chunks * ZIPF_MENTIONS, rng).reshape(chunks, ZIPF_MENTIONS)
    counts = np.zeros(n, dtype=np.int64)
    t0 = time.perf_counter()
    graph_s = index_s = 0.0
    for start in range(0, chunks, DOC_CHUNKS):
        doc = f"doc-g{start // DOC_CHUNKS:04d}"
        rows, entities, rels, records = [], [], [], []
        vectors = unit_vectors(min(DOC_CHUNKS, chunks - start), dims, rng)
        for c in range(start, min(start + DOC_CHUNKS, chunks)):
            cid = f"chunk-g{c:07d}"
            members = list(dict.fromkeys([c % n, *(int(x) for x in drawn[c]), *([c + chunks] if c + chunks < n else [])]))
            counts[members] += 1
            rows.append((cid, c - start))
            text = " ".join(f"{names[m]} is mentioned here." for m in members)
            entities += [Entity(ids[m], names[m], types[m], f"{names[m]} is entity {m}.", (), frozenset({cid})) for m in members]
            rels += [
                Relationship(ids[a], ids[b], f"{names[a]} and {names[b]} appear together.", 1.0, frozenset({cid}))
                for a, b in itertools.pairwise(members)
            ]
            records.append(
                ChunkRecord(
                    chunk_id=cid,
                    document_id=doc,
                    file_name=f"{doc}.txt",
                    position=c - start,
                    text=text,
                    embedding=vectors[c - start],
                    keywords=index_keywords(f"{doc}.txt", text),
                )
            )
        t1 = time.perf_counter()
        store.upsert(doc, f"{doc}.txt", rows, entities, rels)
        t2 = time.perf_counter()
        index.replace_document(doc, records)
        graph_s += t2 - t1
        index_s += time.perf_counter() - t2
    t1 = time.perf_counter()
    with_vector = [ids[int(i)] for i in np.argsort(-counts)[:VECTOR_ENTITIES]]
    store.set_embeddings(with_vector, unit_vectors(len(with_vector), dims, rng))
    vectors_s = time.perf_counter() - t1
    t1 = time.perf_counter()
    reports = CommunityIndex(rt.redis, topic.id, dims=dims, embedding_model=rt.gateway.embedder.model)
    order = np.argsort(-counts)
    records = []
    for g in range(0, n, COMMUNITY_SIZE):
        members = [int(i) for i in order[g : g + COMMUNITY_SIZE]]
        key = [names[i] for i in members[:5]]
        summary = (
            f"This community gathers {len(members)} entities around {key[0]}. "
            f"{key[0]} appears with {', '.join(key[1:])}. They share documents and events."
        )
        records.append(
            CommunityRecord(
                community_id=f"community-{g:07d}",
                title=f"{key[0]} and others",
                summary=summary,
                entity_ids=tuple(sorted(ids[i] for i in members)),
                content_hash=str(g),
                embedding=unit_vectors(1, dims, rng)[0],
                key_entities=tuple(key),
            )
        )
    reports.put(records)
    reports_s = time.perf_counter() - t1
    stats = store.stats()
    top = sorted(counts, reverse=True)
    figure("entities / relationships", f"{stats['entities']:,} / {stats['relationships']:,}")
    figure("chunks / mentions", f"{stats['chunks']:,} / {int(counts.sum()):,}")
    figure("chunks mentioning the 3 most named", ", ".join(f"{int(x):,}" for x in top[:3]))
    figure("entities in 1 chunk / in >= 100 chunks", f"{int((counts == 1).sum()):,} / {int((counts >= 100).sum()):,}")
    figure("community summaries", len(records))
    figure("build: graph upserts", graph_s, "s")
    figure("build: chunk index", index_s, "s")
    figure(f"build: entity vectors ({len(with_vector):,} most named)", vectors_s, "s")
    figure("build: community summaries", reports_s, "s")
    figure("build: total", time.perf_counter() - t0, "s")
    weights = counts / counts.sum()
    return topic, names, lambda k: [int(i) for i in rng.choice(n, size=k, p=weights)]


def timings(ask: Callable[[str], object], questions: list[str]) -> tuple[float, float, float]:
    """``(p50, p95, mean)`` in ms of ``ask`` over ``questions`` (the first :data:`WARMUP` not measured)."""
    for q in questions[:WARMUP]:
        ask(q)
    ms = []
    for q in questions[WARMUP:]:
        t0 = time.perf_counter()
        ask(q)
        ms.append((time.perf_counter() - t0) * 1000)
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95)), float(np.mean(ms))


def time_ways(rt, topic, questions: dict[str, list[str]], label: str) -> dict[str, tuple[float, float, float]]:
    """Time each way's retriever on its questions; print p50 / p95."""
    from ragtopics.answer.context import RetrievalQuery
    from ragtopics.graph.global_search import GlobalRetriever
    from ragtopics.graph.local import LocalRetriever
    from ragtopics.graph.path import PathRetriever
    from ragtopics.prompts.resolve import resolve_prompts
    from ragtopics.topics.topics import get_topic
    from ragtopics.tracing.trace import Trace

    topic = get_topic(rt, topic.id)
    cfg = topic.settings
    prompts = resolve_prompts(rt, topic.id)
    ways = {
        "LOCAL": LocalRetriever(rt, topic, cfg),
        "PATH": PathRetriever(rt, topic, cfg),
        "GLOBAL": GlobalRetriever(rt, topic, cfg, prompts["global_map"]),
    }
    out = {}
    gateway = rt.gateway
    asked = list(dict.fromkeys(q for qs in questions.values() for q in qs))
    t0 = time.perf_counter()
    cached = dict(zip(asked, gateway.embed(asked, purpose="question")))
    figure(f"question embedding {label} (batch of {len(asked)})", (time.perf_counter() - t0) * 1000 / len(asked), "ms/question")
    real = gateway.embed

    def embed(texts: list[str], **options) -> np.ndarray:
        """The questions' vectors computed above; any other text (names of the PATH way) embedded as usual."""
        if all(t in cached for t in texts):
            return np.stack([cached[t] for t in texts])
        return real(texts, **options)

    gateway.embed = embed  # type: ignore[method-assign]
    try:
        for way, retriever in ways.items():
            items: list[int] = []

            def ask(q: str, retriever=retriever, items=items) -> None:
                items.append(len(retriever.retrieve(RetrievalQuery(q), Trace("chat", q)).items))

            p50, p95, mean = timings(ask, questions[way])
            out[way] = (p50, p95, mean)
            figure(f"{way} {label}: p50 / p95", f"{p50:,.1f} / {p95:,.1f}", "ms")
            figure(f"  {way} {label}: evidence items per question", float(np.mean(items)) if items else 0.0)
    finally:
        del gateway.embed  # the class's method again
    return out


def synthetic_questions(names: list[str], draw: Callable[[int], list[int]], count: int) -> dict[str, list[str]]:
    """LOCAL, PATH and GLOBAL questions about entities drawn by the mention law."""
    a, b = draw(count), draw(count)
    themes = [
        "What are the main themes?",
        "Give an overview of the collection.",
        "Which groups of entities stand out?",
        "What do the documents say overall?",
        "Summarise the main communities.",
    ]
    return {
        "LOCAL": [f"What is known about {names[i]}?" for i in a],
        "PATH": [f"How is {names[i]} related to {names[j]}?" for i, j in zip(a, b)],
        "GLOBAL": [themes[i % len(themes)] for i in range(count)],
    }


def settle(rt, limit_s: float = 600.0) -> None:
    """Wait until the server's background persistence (an AOF rewrite or a snapshot, which a large build sets off)
    is over, and print how long that took: the questions are timed against the searches, not beside a forked
    rewrite that takes a core of this machine's two."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        info = rt.redis.info("persistence")
        if not int(info.get("aof_rewrite_in_progress", 0)) and not int(info.get("rdb_bgsave_in_progress", 0)):
            break
        time.sleep(0.5)
    figure("waited for the server's background rewrite", time.perf_counter() - t0, "s")


def bench_synthetic(rt, sizes: tuple[int, ...] = SIZES) -> dict[int, dict[str, tuple[float, float, float]]]:
    """Build and time each size (a Topic each, dropped after it)."""
    from ragtopics.topics.delete import delete_topic

    results = {}
    for n in sizes:
        section(f"16.{sizes.index(n) + 1} graph questions: synthetic graph of {n:,} entities (heavy-tailed mentions)")
        topic, names, draw = build_synthetic(rt, n)
        settle(rt)
        results[n] = time_ways(rt, topic, synthetic_questions(names, draw, QUESTIONS + WARMUP), f"{n // 1000}k")
        p95 = results[n]["LOCAL"][1]
        figure(f"LOCAL p95 at {n:,} entities", f"{p95:,.1f} ms (goal <= {LOCAL_P95_GOAL_MS:g} ms at 100,000)")
        if n == 100_000:
            versus("LOCAL p95 at 100,000 entities", p95, "ms", "the goal", LOCAL_P95_GOAL_MS, higher_is_better=False, goal=1.0)
        try:
            delete_topic(rt, topic.id)
        except Exception as exc:  # a failed clean-up leaves more data on a throwaway server, nothing else
            print(f"  (deleting the bench Topic failed: {exc})", flush=True)
    return results


def bench_hotpot(rt, data, count: int = HOTPOT_QUESTIONS) -> dict[str, tuple[float, float, float]]:
    """The gold passages of ``count`` HotpotQA questions in an NLP GraphRAG Topic, asked those questions by each way."""
    from ragtopics.documents.uploads import receive_upload
    from ragtopics.graph.ingest import graph_store
    from ragtopics.ingest.pipeline import ingest_document
    from ragtopics.topics.topics import create_topic

    section(f"16.{len(SIZES) + 1} graph questions: HotpotQA Topic (gold passages of {count} questions, NLP method)")
    questions = data.questions[:count]
    titles = list(dict.fromkeys(t for q in questions for t, _ in q["supporting_facts"] if t in data.corpus))
    topic = create_topic(rt, "bench-graph-q-hotpot", kind="graphrag", settings={"graph_extraction_method": "NLP"})
    t0 = time.perf_counter()
    for title in titles:
        ingest_document(rt, receive_upload(rt, topic, f"{title}.txt", " ".join(data.corpus[title]).encode()).id)
    stats = graph_store(rt, topic).stats()
    figure("passages / entities / relationships", f"{len(titles)} / {stats['entities']:,} / {stats['relationships']:,}")
    figure("build (ingest, NLP)", time.perf_counter() - t0, "s")
    asked = [q["question"] for q in questions]
    warm = asked[:WARMUP]
    return time_ways(rt, topic, {"LOCAL": warm + asked, "PATH": warm + asked, "GLOBAL": warm + asked}, "HotpotQA")


def bench_graph_questions(rt, data, *, sizes: tuple[int, ...] = SIZES, hotpot: bool = True) -> dict:
    """Sections 15.x on ``rt`` (a throwaway runtime, embedder loaded); ``data`` is ``bench.run.EvalData`` or None."""
    import redis

    rt.redis = redis.Redis.from_url(
        rt.settings.effective_redis_url, socket_connect_timeout=3, socket_timeout=SOCKET_TIMEOUT_S, protocol=2
    )
    results: dict = {"synthetic": bench_synthetic(rt, sizes)}
    if hotpot and data is not None:
        results["hotpot"] = bench_hotpot(rt, data)
    return results


def main(argv: list[str]) -> int:
    """``python -m bench.graph_questions [--quick]``: on its own throwaway Redis."""
    import logging

    from bench.run import eval_dir, load_eval_data, throwaway_runtime

    logging.basicConfig(level=logging.WARNING)
    quick = "--quick" in argv
    random.seed(1)
    with throwaway_runtime(prefix="ragtopics-graphq-") as rt:
        data = None if quick else load_eval_data(eval_dir())
        bench_graph_questions(rt, data, sizes=SIZES[:1] if quick else SIZES, hotpot=not quick)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
