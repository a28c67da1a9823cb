"""Benchmark run by ``make bench``: ingest speed, retrieval quality and retrieval latency.

Everything runs in-process on a throwaway embedded Redis and a temporary data
directory, on the HotpotQA subset in ``shared/eval/hotpotqa`` (beside the
repository; ``RAGTOPICS_EVAL_DIR`` overrides it). The language model is never
called. The script prints figures, one per line; it asserts nothing.

Sections:
    1. ingest of the 994 passages through the real pipeline (receive_upload + ingest_document);
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
    9. entity deduplication of 10,000 and 100,000 names against a naive all-pairs loop (``bench.dedup``);
    10. Leiden on 10,000 and 100,000 entities, and rebuild model calls (``bench.communities``).
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
from dataclasses import dataclass
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench import communities as communities_bench
from bench import dedup as dedup_bench
from bench.chat import bench_bundled_model, bench_overhead
from bench.filetypes import BUILDERS
from bench.graph import bench_graph
from bench.router import bench_router
from ragtopics.settings.env import Settings
from ragtopics.documents.uploads import receive_upload
from ragtopics.ingest.pipeline import ingest_document
from ragtopics.runtime import Runtime, set_runtime
from ragtopics.topics.topics import Topic, create_topic
from ragtopics.storage.chunk_index import ChunkIndex, ChunkRecord
from ragtopics.ops.redis_server import EmbeddedRedis

TOP_K = 5
LATENCY_CHUNKS = 10_000
LATENCY_ROUNDS = 2
STORE_BATCH = 1_000
EMBED_BATCH = 256
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


def figure(label: str, value: object, unit: str = "") -> None:
    """Print one figure on its own line: ``label .......... value unit``."""
    text = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)
    print(f"  {label:<38} {text}{(' ' + unit) if unit else ''}", flush=True)


def section(title: str) -> None:
    """Print a section heading."""
    print(f"\n== {title}", flush=True)


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MB (``ru_maxrss`` is KiB on Linux)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def redis_memory_mb(rt: Runtime) -> float:
    """Memory Redis reports as used, in MB."""
    return int(rt.redis.info("memory")["used_memory"]) / (1024 * 1024)


def percentile_ms(samples_s: list[float], q: float) -> float:
    """The ``q``-th percentile of durations given in seconds, in milliseconds."""
    return float(np.percentile(np.asarray(samples_s) * 1000.0, q))


# ----------------------------------------------------------------------------- setup


def eval_dir() -> Path:
    """The eval folder: ``RAGTOPICS_EVAL_DIR``, else ``shared/eval/hotpotqa`` beside the repository."""
    override = os.environ.get("RAGTOPICS_EVAL_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "shared" / "eval" / "hotpotqa"


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
    figure("eval data", str(folder))
    figure("passages / questions", f"{len(data.corpus)} / {len(data.questions)}")


def load_embedder(rt: Runtime) -> None:
    """Load the embedding model (outside every timed section) and print how long it took."""
    section("embedding model")
    _quiet_progress_bars()
    t0 = time.perf_counter()
    rt.gateway.embedder.load()
    figure("model", rt.gateway.embedder.model)
    figure("load time", time.perf_counter() - t0, "s")


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


def bench_ingest(rt: Runtime, data: EvalData) -> tuple[Topic, dict[str, str]]:
    """Ingest every passage through receive_upload + ingest_document, in-process.

    Returns:
        The Topic, and ``{title: stored file name}`` (the product keeps only the last
        path component of a name, so a title with ``/`` is stored under a shorter name).
    """
    section(f"1. ingest ({len(data.corpus)} passages, in-process, no queue)")
    topic = create_topic(rt, "bench", settings={"top_k_results": TOP_K})
    stored_name: dict[str, str] = {}
    chunks = 0
    embed_ms = 0.0
    t0 = time.perf_counter()
    for title, sentences in data.corpus.items():
        doc = receive_upload(rt, topic, f"{title}.txt", "".join(sentences).encode())
        stored_name[title] = doc.file_name
        result = ingest_document(rt, doc.id)
        chunks += result.chunk_count
        embed_ms += sum(e["duration_ms"] for e in result.trace if e["step"] == "embed")
    total_s = time.perf_counter() - t0
    files = len(data.corpus)
    figure("files", files)
    figure("chunks", chunks)
    figure("chunks in index", rt.chunk_index(topic.id).count())
    figure("total time", total_s, "s")
    figure("files/s", files / total_s)
    figure("chunks/s", chunks / total_s)
    figure("time in embed steps", embed_ms / 1000, "s")
    figure("embeddings/s (embed steps only)", chunks / (embed_ms / 1000) if embed_ms else 0.0)
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")
    figure("redis used_memory", redis_memory_mb(rt), "MB")
    return topic, stored_name


# ----------------------------------------------------------------------------- 2. quality


def gold_files(question: dict, stored_name: dict[str, str]) -> set[str]:
    """File names of the passages a question's supporting facts come from."""
    return {stored_name[title] for title, _ in question["supporting_facts"]}


def bench_quality(rt: Runtime, topic: Topic, data: EvalData, stored_name: dict[str, str]) -> None:
    """Recall of the gold passages among the top-k vector hits (no language model)."""
    section(f"2. retrieval quality ({len(data.questions)} questions, vector search)")
    index = rt.chunk_index(topic.id)
    any5 = all5 = any10 = all10 = 0
    for q in data.questions:
        gold = gold_files(q, stored_name)
        vec = rt.gateway.embed([q["question"]])[0]
        hits = index.search_vector(vec, 10)
        top5 = {h.file_name for h in hits[:TOP_K]}
        top10 = {h.file_name for h in hits}
        any5 += bool(gold & top5)
        all5 += gold <= top5
        any10 += bool(gold & top10)
        all10 += gold <= top10
    n = len(data.questions)
    figure("recall@5  (>=1 gold passage in top 5)", any5 / n)
    figure("all gold passages in top 5", all5 / n)
    figure("recall@10 (>=1 gold passage in top 10)", any10 / n)
    figure("all gold passages in top 10", all10 / n)


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


def store_chunks(index: ChunkIndex, texts: list[str], vectors: np.ndarray) -> float:
    """Write the chunks with replace_document, 1,000 per fake document; returns seconds taken."""
    t0 = time.perf_counter()
    for b, start in enumerate(range(0, len(texts), STORE_BATCH)):
        doc_id = f"doc-bench{b:04d}"
        records = [
            ChunkRecord(chunk_id=f"chunk-bench{start + n:06d}", document_id=doc_id, file_name=f"bench-{b:04d}.txt",
                        position=n, text=text, embedding=vectors[start + n])  # fmt: skip
            for n, text in enumerate(texts[start : start + STORE_BATCH])
        ]
        index.replace_document(doc_id, records)
    return time.perf_counter() - t0


def bench_latency(rt: Runtime, data: EvalData) -> None:
    """Build a 10,000-chunk index, then time vector search alone and embed + search."""
    section(f"3. retrieval latency over {LATENCY_CHUNKS:,} chunks")
    topic = create_topic(rt, "bench-10k", settings={"top_k_results": TOP_K})
    index = rt.chunk_index(topic.id)
    texts = latency_texts(data.corpus, LATENCY_CHUNKS)
    vectors, embed_s = embed_texts(rt, texts)
    figure("chunk texts", len(texts))
    figure("embed time", embed_s, "s")
    figure("embeddings/s (length-sorted batches)", len(texts) / embed_s)
    store_s = store_chunks(index, texts, vectors)
    figure("store time (replace_document x1,000)", store_s, "s")
    figure("chunks/s stored", len(texts) / store_s)
    _wait_for_indexing(rt, index)
    figure("chunks in index", index.count())

    questions = [q["question"] for q in data.questions] * LATENCY_ROUNDS
    qvecs = rt.gateway.embed([q["question"] for q in data.questions])
    index.search_vector(qvecs[0], TOP_K)  # warm-up, not timed
    search_s = []
    for i in range(len(questions)):
        vec = qvecs[i % len(data.questions)]
        t0 = time.perf_counter()
        index.search_vector(vec, TOP_K)
        search_s.append(time.perf_counter() - t0)
    figure("queries (search_vector, k=5)", len(search_s))
    figure("search p50", percentile_ms(search_s, 50), "ms")
    figure("search p95", percentile_ms(search_s, 95), "ms")
    figure("search p99", percentile_ms(search_s, 99), "ms")

    full_s = []
    for q in questions:
        t0 = time.perf_counter()
        index.search_vector(rt.gateway.embed([q])[0], TOP_K)
        full_s.append(time.perf_counter() - t0)
    figure("embed+search p50", percentile_ms(full_s, 50), "ms")
    figure("embed+search p95", percentile_ms(full_s, 95), "ms")
    figure("redis used_memory", redis_memory_mb(rt), "MB")


def _wait_for_indexing(rt: Runtime, index: ChunkIndex, timeout_s: float = 60.0) -> None:
    """Wait until RediSearch has finished indexing the hashes written (it indexes them as they arrive)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = index.index.info()
        if str(info.get("indexing", "0")) in ("0", "0.0"):
            return
        time.sleep(0.1)


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
    print(f"  {'type':<5} {'first file':>10} {'files/s':>8} {'MB/s':>7} {'chunks':>7} {'chunks/s':>9} {'MB':>6}  reader",
          flush=True)  # fmt: skip
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
        print(f"  {ext:<5} {first_s:>9.2f}s {TYPE_FILES / total_s:>8.2f} {megabytes / total_s:>7.3f} {chunks:>7,} "
              f"{chunks / total_s:>9.1f} {megabytes:>6.2f}  {reader[:60]}", flush=True)  # fmt: skip
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")


# ----------------------------------------------------------------------------- main


def main() -> int:
    """Run the sections on a throwaway Redis (9 and 10 start their own); always stop it at the end."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(logging.WARNING)
    folder = eval_dir()
    data = load_eval_data(folder)
    print_header(folder, data)
    started = time.perf_counter()
    with throwaway_runtime() as rt:
        topic, stored_name = bench_ingest(rt, data)
        bench_quality(rt, topic, data, stored_name)
        bench_latency(rt, data)
        bench_overhead(rt, topic, data.questions, figure, section)
        bench_bundled_model(rt, topic, data.questions, figure, section, free_port)
        bench_file_types(rt, data)
        bench_router(rt.gateway)
        section("8. GraphRAG (bench.graph)")
        bench_graph(rt, data, figure, section)
    section("9. entity deduplication (bench.dedup)")
    dedup_bench.main([])
    section("10. communities (bench.communities)")
    communities_bench.main([])
    section("overall")
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")
    figure("total run time", time.perf_counter() - started, "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
