"""Benchmark run by ``make bench``: ingest speed, retrieval quality and retrieval latency.

Everything runs in-process on a throwaway embedded Redis and a temporary data
directory, on the HotpotQA subset in ``shared/eval/hotpotqa`` (beside the
repository; ``RAGTOPICS_EVAL_DIR`` overrides it). The language model is the bundled one
(sections 6 and 11) or a scripted loopback server. The script prints figures, one per line;
it asserts nothing.

Sections:
    1. ingest of the 994 passages through the real pipeline (receive_upload + ingest_documents, BATCH_FILES a job);
    2. retrieval quality: recall@5 / recall@10 of the gold passages for the 100 questions;
    3. retrieval latency over a 10,000-chunk index (search alone, and embed + search);
    4. ingest throughput per file type (txt, md, csv, json, xml, docx, xlsx, pptx, pdf, png),
       each type's files built from the same passages (see ``bench.filetypes``);
    5. chat overhead per turn apart from the model, with an instant scripted model (``bench.chat``);
    6. time to first token and a routed small-talk turn with the bundled model (``bench.chat``);
    7. router accuracy, confusion matrix and latency on ``shared/eval/router`` (``bench.router``);
    8. GraphRAG (``bench.graph``): graph quality (titles found as entities) and ingest speed with the
       NLP method, NLP extraction against embedding in chunks/s, extraction calls per chunk (LLM 1,
       NLP 0), an edited re-upload's extraction calls, community rebuild calls after a change, memory;
       the language model there is a scripted loopback server (``tests/scripted_llm.py``);
    9. entity deduplication of 10,000 and 100,000 names against a naive all-pairs loop, and an upload's
       look-up of its stored partners against reading every entity (``bench.dedup``);
    10. Leiden on 10,000 and 100,000 entities, and rebuild model calls (``bench.communities``);
    11. peak memory of the worker and of the console (``bench.memory``);
    12. an open Upload tab's console CPU per tick, 2,000 uploads tracked, 200 running (``bench.console_poll``);
    13. answer containment and token F1 of quoted (EXTRACTIVE) answers against the bundled model's
        written ones on the three eval sets beside ``hotpotqa`` (``bench.answers``);
    14. the cost preview's error: estimated against actual chunks and model calls by kind for a RAG
        Topic, a GraphRAG NLP Topic and a GraphRAG LLM Topic, scripted model (``bench.estimate``);
    16. graph questions: LOCAL, PATH and GLOBAL retrieval p50 / p95 on synthetic graphs of 10,000 and
        100,000 entities with heavy-tailed mentions, and on a HotpotQA GraphRAG Topic, next to the goal
        "LOCAL p95 <= 150 ms at 100,000 entities" (``bench.graph_questions``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import resource
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import communities as communities_bench
from bench import console_poll as console_poll_bench
from bench import dedup as dedup_bench
from bench.answers import bench_answers
from bench.chat import bench_bundled_model, bench_overhead
from bench.estimate import bench_estimate
from bench.filetypes import BUILDERS
from bench.graph import bench_graph
from bench.graph_questions import bench_graph_questions
from bench.latency import bench_latency, sizes_from_env
from bench.memory import bench_graph_upload_memory, bench_memory
from bench.report import figure, keep, print_ratios, section, versus, write
from bench.router import bench_router
from ragtopics.answer.context import RetrievalQuery
from ragtopics.documents.uploads import JobGroups, batchable, receive_upload
from ragtopics.ingest.pipeline import ingest_document, ingest_documents
from ragtopics.ops.redis_server import EmbeddedRedis
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.quality.evaluate import retrieval_metrics
from ragtopics.rag.retriever import ChunkRetriever
from ragtopics.runtime import Runtime, freeze_startup_heap, set_runtime
from ragtopics.settings.env import Settings
from ragtopics.topics.topics import Topic, create_topic
from ragtopics.tracing.trace import Trace

TOP_K = 5
QUALITY_TOP_K = 10
LATENCY_CHUNKS = 10_000
#: ``{size: {search: Timing}}`` of the last latency run (for ``bench.plot``).
LATENCY_ROWS: dict = {}
EMBED_BATCH = 32
#: Batch sizes tried for the embedding model's raw throughput (the best one is the reference).
RAW_BATCHES = (1, 8, 32)
#: Passages joined into one file for the multi-chunk ingest figure.
PASSAGES_PER_BIG_FILE = 30
TYPE_FILES = 8
PASSAGES_PER_FILE = 12


@dataclass(frozen=True, slots=True)
class EvalData:
    """The HotpotQA subset.

    Attributes:
        corpus: ``{title: [sentence, ...]}``.
        questions: ``[{question, answer, supporting_facts: [[title, idx], ...]}, ...]``.
    """

    corpus: dict[str, list[str]]
    questions: list[dict]


# ----------------------------------------------------------------------------- output


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MB (``ru_maxrss`` is KiB on Linux)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def redis_memory_mb(rt: Runtime) -> float:
    """Memory Redis reports as used, in MB."""
    return int(rt.redis.info("memory")["used_memory"]) / (1024 * 1024)


# ----------------------------------------------------------------------------- setup


def eval_dir() -> Path:
    """The eval folder: ``RAGTOPICS_EVAL_DIR``, else ``shared/eval/hotpotqa`` beside the repository."""
    override = os.environ.get("RAGTOPICS_EVAL_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "shared" / "eval" / "hotpotqa"


def shown_path(folder: Path) -> str:
    """A folder as the figures name it: relative to the directory that holds the repository when it is
    inside it (``shared/eval/hotpotqa``), else its last two parts, so saved results name no machine's paths."""
    base = Path(__file__).resolve().parents[2]
    try:
        return str(folder.resolve().relative_to(base))
    except ValueError:
        return str(Path(*folder.resolve().parts[-2:]))


def load_eval_data(folder: Path) -> EvalData:
    """Read ``corpus.json`` and ``questions.json``; exit 1 with a message when they are missing."""
    corpus_path, questions_path = folder / "corpus.json", folder / "questions.json"
    if not corpus_path.is_file() or not questions_path.is_file():
        print(
            f"bench: the HotpotQA eval data is missing: expected {corpus_path} and {questions_path}.\n"
            f"       Put the subset there, or set RAGTOPICS_EVAL_DIR to the folder that holds it.",
            file=sys.stderr,
        )
        sys.exit(1)
    return EvalData(json.loads(corpus_path.read_text()), json.loads(questions_path.read_text()))


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_runtime(tmp: Path, server: EmbeddedRedis) -> Runtime:
    """A runtime on the throwaway Redis and data dir, also installed as the process-wide one."""
    settings = Settings(RAGTOPICS_DATA_DIR=tmp / "var", REDIS_URL=server.url, _env_file=None, RQ_QUEUE="bench")
    rt = Runtime(settings)
    set_runtime(rt)
    return rt


@contextlib.contextmanager
def throwaway_runtime(folder: Path | None = None, *, prefix: str = "ragtopics-bench-") -> Iterator[Runtime]:
    """A runtime on an embedded Redis started for the block, its embedding model loaded; always stopped after.

    Args:
        folder: keep the Redis data and files there (a second run finds them); None: a temporary folder.
        prefix: the temporary folder's name prefix.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp_name:
        place = folder.resolve() if folder else Path(tmp_name)
        server = EmbeddedRedis(place / "redis", free_port()).start()
        try:
            rt = build_runtime(place, server)
            load_embedder(rt)
            yield rt
        finally:
            set_runtime(None)
            server.stop()


def print_header(folder: Path, data: EvalData) -> None:
    """Header: what runs where."""
    import torch

    print("ragtopics benchmark", flush=True)
    figure("date", time.strftime("%Y-%m-%d %H:%M:%S"))
    figure("python", platform.python_version())
    figure("cpu count (os.cpu_count)", os.cpu_count() or 0)
    figure("cpus usable by this process", len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0)
    figure("torch threads", torch.get_num_threads())
    figure("eval data", shown_path(folder))
    figure("passages / questions", f"{len(data.corpus)} / {len(data.questions)}")


def load_embedder(rt: Runtime) -> None:
    """Load the embedding model (outside every timed section) and print how long it took."""
    section("embedding model")
    _quiet_progress_bars()
    t0 = time.perf_counter()
    rt.gateway.embedder.load()
    figure("model", rt.gateway.embedder.model)
    figure("load time", time.perf_counter() - t0, "s")
    freeze_startup_heap()  # as the console and the worker do once their models are loaded


def _quiet_progress_bars() -> None:
    """Keep transformers / huggingface_hub progress bars (``Loading weights``) out of the output."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - a remote embedder needs no transformers
        pass


# ----------------------------------------------------------------------------- 1. ingest


def raw_throughput(rt: Runtime, texts: list[str], runs: int = 3, sizes: tuple[int, ...] = RAW_BATCHES) -> tuple[float, int]:
    """The embedding model's best throughput on ``texts``: length-sorted batches of each size in
    ``sizes``, the median of ``runs`` runs per size, the best size kept.

    A reference measured once per text set passes the one batch size found best before, by
    several runs: the best of several single noisy runs would overstate the model's speed
    (the largest of a few samples lies above their mean).

    Returns:
        ``(texts per second, batch size)``.
    """
    ordered = sorted(texts, key=len)
    embedder = rt.gateway.embedder
    product_forward = getattr(embedder, "forward_batch", None)
    best = (0.0, 0)
    try:
        for size in sizes:
            if product_forward is not None:
                embedder.forward_batch = size  # one forward pass per batch, whatever the product uses
            rates = []
            for _ in range(runs):
                t0 = time.perf_counter()
                for i in range(0, len(ordered), size):
                    rt.gateway.embed(ordered[i : i + size])
                rates.append(len(ordered) / (time.perf_counter() - t0))
            best = max(best, (float(np.median(rates)), size))
    finally:
        if product_forward is not None:
            embedder.forward_batch = product_forward
    return best


def _ingest_files(
    rt: Runtime, topic: Topic, files: list[tuple[str, str]], *, shared: bool = True
) -> tuple[float, list[str], float, dict[str, str]]:
    """Upload and index ``(file name, text)`` pairs in-process, in the jobs an upload of them gets
    (:func:`job_groups`: small files share a job, :func:`ingest_documents`), or each file alone
    (``shared`` False, :func:`ingest_document`: a single small upload).

    Returns:
        ``(seconds indexing, chunk texts, seconds in embed steps, {file name asked: stored name})``; the
        time excludes receiving the files (:func:`receive_upload`, the upload request's part).
    """
    chunks: list[str] = []
    stored: dict[str, str] = {}
    embed_ms = 0.0
    seconds = 0.0
    for group in job_groups(topic, files) if shared else [[f] for f in files]:
        rows = [receive_upload(rt, topic, name, text.encode()) for name, text in group]
        stored.update({name: row.file_name for (name, _), row in zip(group, rows, strict=True)})
        t0 = time.perf_counter()  # the indexing is timed, as the worker's is; receiving the files is the upload's
        if len(rows) == 1:
            results = [ingest_document(rt, rows[0].id)]
        else:
            results = list(ingest_documents(rt, topic.id, [(r.id, r.job_id, r.pending_blob_path) for r in rows]).values())
        seconds += time.perf_counter() - t0
        shared_ms = 0.0
        for result in results:
            for event in result.trace:
                if event["step"] == "chunk":
                    chunks.extend(event["data"].get("chunks", []))
                elif event["step"] == "embed":
                    shared_ms = max(shared_ms, event["duration_ms"])
        embed_ms += shared_ms  # a job's embedding is one step that every file of it shares: counted once
    return seconds, chunks, embed_ms / 1000, stored


def job_groups(topic: Topic, files: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The files in the jobs :class:`~ragtopics.documents.uploads.BatchedUploads` would queue for them: a file
    that may not share (:func:`batchable`) alone, the others grouped by :class:`JobGroups`."""
    groups: list[list[tuple[str, str]]] = []
    shared = JobGroups()
    for name, text in files:
        size = len(text.encode())
        if batchable(topic, name, size):
            groups += shared.add((name, text), size)
        else:
            groups.append([(name, text)])
    return [g for g in [*groups, shared.close()] if g]


def bench_ingest(rt: Runtime, data: EvalData) -> tuple[Topic, dict[str, str]]:
    """Ingest every passage, one passage per file, in-process, next to raw embedding speed.

    Two corpora: the 994 passages as one file each (the worst case for embedding: one chunk
    per file), in three runs of a third each, indexed as an upload of many small files is
    (:data:`BATCH_FILES` files share a job and their embedding batches, :func:`ingest_documents`);
    and the same passages joined :data:`PASSAGES_PER_BIG_FILE` to a file. Each run's chunks/s
    stands next to the embedding model's raw throughput on the very chunk texts of that run
    (:func:`raw_throughput`); the figures are medians over the runs. Then the same small files
    through the queue and a worker (:func:`_bench_worker_ingest`), and some of them each alone
    (a single small upload: one file, one job).

    Returns:
        The Topic of the one-passage files, and ``{title: stored file name}`` (the product keeps
        only the last path component of a name, so a title with ``/`` is stored under a shorter name).
    """
    section(f"1. ingest ({len(data.corpus)} passages, in-process, no queue)")
    topic = create_topic(rt, "bench", settings={"top_k_results": TOP_K})
    titles = list(data.corpus)
    thirds = [titles[i::3] for i in range(3)]
    rates, raws, embed_shares, stored_name, chunk_total, total_s, part_chunks = [], [], [], {}, 0, 0.0, []
    size = 0
    for part in thirds:
        seconds, chunks, embed_s, stored = _ingest_files(rt, topic, [(f"{t}.txt", "".join(data.corpus[t])) for t in part])
        part_chunks.append(chunks)
        stored_name.update({t: stored[f"{t}.txt"] for t in part})
        rates.append(len(chunks) / seconds)
        if not size:  # the model's best batch size for one-chunk files, from three runs of each
            size = raw_throughput(rt, chunks)[1]
        raws.append(raw_throughput(rt, chunks, runs=1, sizes=(size,))[0])
        embed_shares.append(embed_s / seconds)
        chunk_total += len(chunks)
        total_s += seconds
    figure("files", len(titles))
    figure("chunks", chunk_total)
    figure("chunks in index", rt.chunk_index(topic.id).count())
    figure("total time", total_s, "s")
    figure("files/s", len(titles) / total_s)
    figure("share of the time in embed steps", float(np.median(embed_shares)))
    versus(
        "ingest chunks/s, one passage per file",
        float(np.median(rates)),
        "chunks/s",
        "raw embedding",
        float(np.median(raws)),
        higher_is_better=True,
        goal=0.9,
    )
    _bench_worker_ingest(rt, data, thirds, part_chunks, size)
    alone = create_topic(rt, "bench-alone")
    seconds, chunks, _, _ = _ingest_files(
        rt, alone, [(f"{t}.txt", "".join(data.corpus[t])) for t in titles[: len(titles) // 6]], shared=False
    )
    versus(
        "ingest chunks/s, one passage per file, each file its own job",
        len(chunks) / seconds,
        "chunks/s",
        "raw embedding",
        raw_throughput(rt, chunks, runs=1, sizes=(size,))[0],
        higher_is_better=True,
    )
    big = create_topic(rt, "bench-big-files")
    files = [
        (f"joined-{i:03d}.txt", "\n\n".join("".join(data.corpus[t]) for t in titles[i : i + PASSAGES_PER_BIG_FILE]))
        for i in range(0, len(titles), PASSAGES_PER_BIG_FILE)
    ]
    seconds, chunks, embed_s, _ = _ingest_files(rt, big, files)
    raw, batch = raw_throughput(rt, chunks)
    figure(f"files of {PASSAGES_PER_BIG_FILE} passages", len(files))
    figure("their chunks", len(chunks))
    figure("share of the time in embed steps", embed_s / seconds)
    versus(
        f"ingest chunks/s, {PASSAGES_PER_BIG_FILE} passages per file",
        len(chunks) / seconds,
        "chunks/s",
        f"raw embedding (batch {batch})",
        raw,
        higher_is_better=True,
        goal=0.9,
    )
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")
    figure("redis used_memory", redis_memory_mb(rt), "MB")
    return topic, stored_name


def _bench_worker_ingest(rt: Runtime, data: EvalData, parts: list[list[str]], part_chunks: list[list[str]], size: int) -> None:
    """The same one-passage files uploaded as the console and ``ragtopics ingest`` upload them
    (:class:`~ragtopics.documents.uploads.BatchedUploads`: small files share jobs) and indexed by an
    RQ worker in this process: the in-process figure plus the queue's cost per job.

    One run per part of ``parts`` (a Topic each), timed from the worker's start until the queue
    is empty. The raw embedding of the part's chunks (``part_chunks``, as the in-process run
    chunked them, in batches of ``size``) is measured right before and right after each run and
    their mean is the run's reference: on a shared machine the model's speed drifts by several
    percent within a minute. The figures are those of the run with the median ratio."""
    from rq import SimpleWorker

    from ragtopics.documents.uploads import BatchedUploads
    from ragtopics.jobs.queue import queue_for

    logging.getLogger("rq").setLevel(logging.WARNING)
    rates, raws, ratios, files_per_s, jobs = [], [], [], [], []
    for n, (titles, chunks) in enumerate(zip(parts, part_chunks, strict=True), start=1):
        topic = create_topic(rt, f"bench-worker-{n}", settings={"top_k_results": TOP_K})
        with BatchedUploads(rt, topic) as uploads:
            for title in titles:
                uploads.add(f"{title}.txt", "".join(data.corpus[title]).encode())
        jobs.append(len(queue_for(rt).get_job_ids()))
        before = raw_throughput(rt, chunks, runs=1, sizes=(size,))[0]
        t0 = time.perf_counter()
        SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, logging_level="WARNING")
        seconds = time.perf_counter() - t0
        index = rt.chunk_index(topic.id)
        texts = [
            rt.redis.hget(index.key(cid), "text").decode()
            for doc in index.chunk_counts()
            for cid in index.document_chunk_ids(doc)
        ]
        rates.append(len(texts) / seconds)
        files_per_s.append(len(titles) / seconds)
        raws.append((before + raw_throughput(rt, texts, runs=1, sizes=(size,))[0]) / 2)
        ratios.append(rates[-1] / raws[-1])
    figure("files through the worker (queued uploads)", sum(len(p) for p in parts))
    figure("runs / jobs per run", f"{len(parts)} / {max(jobs)}")
    figure("worker files/s (median)", float(np.median(files_per_s)))
    figure("worker chunks/s of each run", " / ".join(f"{r:.1f}" for r in rates))
    figure("raw embedding chunks/s around each run", " / ".join(f"{r:.1f}" for r in raws))
    figure("ratio of each run", " / ".join(f"{r:.2f}x" for r in ratios))
    middle = int(np.argsort(ratios)[len(ratios) // 2])  # the run with the median ratio
    versus(
        "ingest chunks/s, one passage per file, through the worker",
        rates[middle],
        "chunks/s",
        "raw embedding",
        raws[middle],
        higher_is_better=True,
        goal=0.9,
    )


# ----------------------------------------------------------------------------- 2. quality


def bench_quality(rt: Runtime, topic: Topic, data: EvalData, stored_name: dict[str, str]) -> None:
    """recall@1/5/10, any-gold@5 and MRR of DENSE and HYBRID through the product's retriever (no language model).

    ``make eval`` (:mod:`bench.graph_recall`) measures the same and the GraphRAG ways.
    """
    section(f"2. retrieval quality ({len(data.questions)} questions, Top-K {QUALITY_TOP_K}, no language model)")
    prompts = resolve_prompts(rt, topic.id)
    columns = ("recall@1", "recall@5", "recall@10", "any_gold@5", "mrr")
    print(f"  {'strategy':<10}" + "".join(f"{c:>11}" for c in columns), flush=True)
    for strategy in ("DENSE", "HYBRID"):
        cfg = topic.settings.model_copy(
            update={"retrieval_strategy": strategy, "top_k_results": QUALITY_TOP_K, "min_similarity_score": 0.0}
        )
        retriever = ChunkRetriever(rt, topic.id, cfg, prompts["rerank"])
        rows = []
        for q in data.questions:
            context = retriever.retrieve(RetrievalQuery(q["question"]), Trace("chat", q["question"]))
            files = [item.provenance[0].file_name for item in context.items if item.kind == "chunk"]
            rows.append(retrieval_metrics(files, [stored_name[t] for t, _ in q["supporting_facts"]]))
        means = {c: float(np.mean([r[c] for r in rows])) for c in columns}
        print(f"  {strategy:<10}" + "".join(f"{means[c]:>11.3f}" for c in columns), flush=True)
        for c in columns:
            keep(f"{strategy} {c}", means[c])


# ----------------------------------------------------------------------------- 3. latency


def latency_texts(corpus: dict[str, list[str]], limit: int) -> list[str]:
    """Real chunk texts: every sentence, then every consecutive pair, triple, ... until ``limit``.

    The corpus has 4,139 sentences and 3,145 pairs, so windows of three and four
    sentences fill the rest of the 10,000.
    """
    texts: list[str] = []
    width = 1
    longest = max(len(s) for s in corpus.values())
    while len(texts) < limit and width <= longest:
        for sentences in corpus.values():
            for i in range(len(sentences) - width + 1):
                text = "".join(sentences[i : i + width]).strip()
                if text:
                    texts.append(text)
                if len(texts) == limit:
                    return texts
        width += 1
    return texts


def embed_texts(rt: Runtime, texts: list[str]) -> tuple[np.ndarray, float]:
    """Embed ``texts`` through the gateway in batches; returns the vectors (in input order) and the seconds taken.

    The texts are embedded shortest first, so each forward pass pads little (this
    halves the time on CPU for a mix of 1- to 4-sentence texts); the timing
    includes nothing but the ``embed`` calls.
    """
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    ordered = [texts[i] for i in order]
    parts = []
    t0 = time.perf_counter()
    for i in range(0, len(ordered), EMBED_BATCH):
        parts.append(rt.gateway.embed(ordered[i : i + EMBED_BATCH]))
    elapsed = time.perf_counter() - t0
    vectors = np.empty((len(texts), rt.gateway.embedder.dims), dtype=np.float32)
    vectors[order] = np.concatenate(parts)
    return vectors, elapsed


def bench_search_latency(rt: Runtime, data: EvalData) -> None:
    """Embed :data:`LATENCY_CHUNKS` real chunk texts, then time every search at 10,000 and 100,000 chunks
    (:mod:`bench.latency`), each next to a numpy brute-force top-k over the same vectors."""
    section(f"3. embedding {LATENCY_CHUNKS:,} real chunk texts for the latency index")
    texts = latency_texts(data.corpus, LATENCY_CHUNKS)
    vectors, embed_s = embed_texts(rt, texts)
    figure("chunk texts", len(texts))
    figure("embed time", embed_s, "s")
    figure(f"embeddings/s (length-sorted batches of {EMBED_BATCH})", len(texts) / embed_s)
    rows = bench_latency(rt, vectors, texts, [q["question"] for q in data.questions], figure, section, sizes_from_env())
    for size, timings in rows.items():
        brute = timings["brute force (numpy, exact)"]
        knn = timings["product search_vector"]
        hybrid = timings["product HYBRID (KNN + BM25 + RRF)"]
        versus(
            f"KNN p95 at {size:,} chunks",
            knn.p95_ms,
            "ms",
            "numpy brute force p95",
            brute.p95_ms,
            higher_is_better=False,
            goal=10,
        )
        versus(
            f"KNN p50 at {size:,} chunks", knn.p50_ms, "ms", "numpy brute force p50", brute.p50_ms, higher_is_better=False
        )  # a slow tail of either side moves the p95 ratio
        versus(
            f"HYBRID p95 at {size:,} chunks", hybrid.p95_ms, "ms", "numpy brute force p95", brute.p95_ms, higher_is_better=False
        )
        figure(f"KNN recall@10 against exact at {size:,}", knn.recall)
    LATENCY_ROWS.update(rows)


# ----------------------------------------------------------------------------- 4. per file type


def bench_file_types(rt: Runtime, data: EvalData) -> None:
    """Ingest the same passages as each file type and print one line of throughput per type.

    Every type gets ``TYPE_FILES`` files of ``PASSAGES_PER_FILE`` passages (the same passages
    for every type), uploaded into a Topic of its own with default settings (HYBRID, ALGORITHMIC
    keywords, no pictures described). One untimed file per type comes first, so the one-off
    cost of importing a reader (docling takes seconds) is printed apart, as ``first file``.
    """
    section(f"4. ingest per file type ({TYPE_FILES} files x {PASSAGES_PER_FILE} passages each, in-process)")
    passages = [(t, "".join(s).strip()) for t, s in data.corpus.items()]
    groups = [passages[i * PASSAGES_PER_FILE : (i + 1) * PASSAGES_PER_FILE] for i in range(TYPE_FILES + 1)]
    print(
        f"  {'type':<5} {'first file':>10} {'files/s':>8} {'MB/s':>7} {'chunks':>7} {'chunks/s':>9} {'MB':>6}  reader", flush=True
    )
    for ext, build in BUILDERS.items():
        files = [build(g) for g in groups]
        topic = create_topic(rt, f"bench-{ext}", settings={"file_types": ext})
        t0 = time.perf_counter()
        first = ingest_document(rt, receive_upload(rt, topic, f"warm-up.{ext}", files[0]).id)
        first_s = time.perf_counter() - t0
        chunks = 0
        t0 = time.perf_counter()
        for n, data_bytes in enumerate(files[1:]):
            chunks += ingest_document(rt, receive_upload(rt, topic, f"file-{n:02d}.{ext}", data_bytes).id).chunk_count
        total_s = time.perf_counter() - t0
        megabytes = sum(len(f) for f in files[1:]) / 1e6
        reader = next((e["data"].get("reader", "") for e in first.trace if e["step"] == "read"), "")
        print(
            f"  {ext:<5} {first_s:>9.2f}s {TYPE_FILES / total_s:>8.2f} {megabytes / total_s:>7.3f} {chunks:>7,} "
            f"{chunks / total_s:>9.1f} {megabytes:>6.2f}  {reader[:60]}",
            flush=True,
        )
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")


# ----------------------------------------------------------------------------- main


def main() -> int:
    """Run the sections on a throwaway Redis (9, 10 and 12 start their own); always stop it at the end.

    Writes ``bench/results.json`` (every figure, the ratios, the machine) and the plot of latency
    against index size (``docs/bench-latency.svg``).
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(logging.WARNING)
    folder = eval_dir()
    data = load_eval_data(folder)
    print_header(folder, data)
    started = time.perf_counter()
    with throwaway_runtime() as rt:
        topic, stored_name = bench_ingest(rt, data)
        bench_quality(rt, topic, data, stored_name)
        bench_search_latency(rt, data)
        bench_overhead(rt, topic, data.questions, figure, section)
        bench_bundled_model(rt, topic, data.questions, figure, section, free_port)
        bench_file_types(rt, data)
        bench_router(rt.gateway)
        section("8. GraphRAG (bench.graph)")
        bench_graph(rt, data, figure, section)
        bench_memory(rt, data.corpus, figure, section)
        bench_graph_upload_memory(rt, figure)
    section("9. entity deduplication (bench.dedup)")
    dedup = dedup_bench.main([])
    versus(
        "dedup of 10,000 names", dedup["dedup_10k_s"], "s", "naive all-pairs loop", dedup["naive_10k_s"], higher_is_better=False
    )
    for size in dedup_bench.STORED_SIZES:
        versus(
            f"upload's graph read, {size:,} stored entities",
            dedup[f"partners_{size}_ms"],
            "ms",
            "reading every entity",
            dedup[f"all_{size}_ms"],
            higher_is_better=False,
        )
    section("10. communities (bench.communities)")
    communities_bench.main([])
    console_poll_bench.main([])
    section("13. answers: quoted against the bundled model's written answers (bench.answers)")
    with throwaway_runtime(prefix="ragtopics-answers-") as rt:
        bench_answers(rt, folder.parent, free_port=free_port)
    with throwaway_runtime(prefix="ragtopics-estimate-") as rt:
        bench_estimate(rt, data, figure, section)
    with throwaway_runtime(prefix="ragtopics-graphq-") as rt:
        bench_graph_questions(rt, data)
    section("overall")
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")
    figure("total run time", time.perf_counter() - started, "s")
    section("ratios (each figure next to its reference, measured in this run)")
    print_ratios()
    path = write()
    print(f"\n  figures written to {path}", flush=True)
    if LATENCY_ROWS:
        from bench.plot import plot_latency

        print(f"  plot written to {plot_latency(LATENCY_ROWS)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
