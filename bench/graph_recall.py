"""``make eval``: passage retrieval of every way on three sets, RAG and GraphRAG, through the product's retrievers.

For each set (``shared/eval/hotpotqa``, ``hotpotqa-opaque`` and ``musique-dev``; ``--sets`` chooses,
``RAGTOPICS_EVAL_DIR`` names one folder instead), every passage is ingested in-process
(``receive_upload`` + ``ingest_document``, one file per call) as ``<key>.txt`` (the title on
``hotpotqa``, ``doc NNNN`` on the opaque sets) into one GraphRAG Topic (NLP extraction) and one RAG
Topic, on a throwaway embedded Redis; both ingests are timed, and the GraphRAG one's time is split by
step. Then, for the set's questions, retrieval only (no answer is generated), the product's own
metrics (:func:`~ragtopics.quality.evaluate.retrieval_metrics`): **recall@k** (k = 1, 5, 10), the mean
share of a question's gold passages among the first k distinct source files of the retrieved chunks
(as in HippoRAG's tables), **any-gold@5** (at least one gold file in the first five) and **MRR**, for

* RAG DENSE, RAG HYBRID and, when a language model endpoint is configured (``LLM_BASE_URL``), RAG
  HYBRID with the LLM rerank (:class:`~ragtopics.rag.retriever.ChunkRetriever`, Top-K Results 10,
  Min. Similarity Score off);
* GraphRAG LOCAL under Seed Strategy NODES, CHUNKS and FUSED (:class:`~ragtopics.graph.local.LocalRetriever`)
  and PATH (:class:`~ragtopics.graph.path.PathRetriever`, LOCAL when it finds no chain), Max Cited Chunks 10;
* for LOCAL FUSED, the same candidate chunks ordered by personalized PageRank alone, by cosine alone,
  by LOCAL's fusion, and what LOCAL keeps after its second hops (read from its ``rank_chunks`` trace
  step), to show which ranking matters.

GLOBAL and the GraphRAG HYBRID way answer from community summaries, so passage recall does not
measure them; the router bench (``make bench``, section 7) measures which way a question takes.

It prints a table per set and a summary, and asserts nothing. ``python -m bench.graph_recall
[--data-dir DIR] [--sets a,b] [--rag-only]`` (``--rag-only``: the RAG Topic and its ways alone): with a folder, each set's Redis data and Topics stay in a subfolder
and a second run skips the ingest.
``--product --rag NAME --graph NAME`` measures two Topics already filled in the running product
(its configuration from the environment, as the CLI reads it), e.g. after ``ragtopics ingest``;
a file counts as a passage when its name, letters and digits only, is the passage title's.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from bench.run import eval_dir, load_embedder, load_eval_data, shown_path, throwaway_runtime
from ragtopics.answer.context import Context, RetrievalQuery
from ragtopics.documents.uploads import clean_file_name, receive_upload
from ragtopics.errors import NotFoundError
from ragtopics.graph.local import LocalRetriever
from ragtopics.graph.path import PathRetriever
from ragtopics.ingest.pipeline import ingest_document
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.quality.evaluate import retrieval_metrics
from ragtopics.rag.retriever import ChunkRetriever
from ragtopics.runtime import Runtime, get_runtime
from ragtopics.topics.topics import Topic, create_topic, get_topic
from ragtopics.tracing.trace import Trace

#: Distinct files counted, and chunks each way returns (enough for five distinct files).
TOP_FILES = 5
CHUNKS_RETURNED = 10
RAG_TOPIC, GRAPH_TOPIC = "recall-rag", "recall-graph"


#: Top-level trace steps of an upload shown first in the GraphRAG ingest's breakdown, and their labels; the other
#: top-level steps follow under their own names (``graph_lock``, ``graph_scope``, ``provenance``, ``document_lock``,
#: ``after_store`` ...), so the lines add up to the ingest's time (with "no step": mostly each job's start, its row
#: marked processing and its Topic and prompts read before the trace begins).
INGEST_STEPS = [
    ("embed", "chunk embedding"),
    ("extract_graph", "extraction"),
    ("find_partners", "dedup partners"),
    ("deduplicate", "deduplication"),
    ("wait_entity_names", "waiting for entity names"),
    ("store", "store (chunks + graph)"),
]


def breakdown(step_ms: dict[str, float], overlapped_ms: dict[str, float], upload_s: float, total_s: float) -> list[str]:
    """The lines of an ingest's time by step: every top-level step, the uploads' reception, what no step holds.

    Args:
        step_ms: top-level step → milliseconds over every upload (steps run beside the upload left out).
        overlapped_ms: step run in a thread beside the upload → milliseconds (shown, not added).
        upload_s: seconds in ``receive_upload`` (outside the job's trace).
        total_s: the ingest's seconds.

    Returns:
        Printable lines; the added lines sum to ``total_s``.
    """
    labels = dict(INGEST_STEPS)
    order = [s for s, _ in INGEST_STEPS] + sorted((s for s in step_ms if s not in labels), key=lambda s: -step_ms[s])
    lines = [f"    time in {labels.get(s, s):<28} {step_ms.get(s, 0.0) / 1000:>8.1f} s" for s in order]
    lines.append(f"    time in {'receiving the uploads':<28} {upload_s:>8.1f} s")
    named = sum(step_ms.values()) / 1000 + upload_s
    lines.append(f"    time in {'no step':<28} {total_s - named:>8.1f} s  (sum of the lines {total_s:.1f} s)")
    for s, ms in {"embed_entities": 0.0, **overlapped_ms}.items():
        label = "entity embedding" if s == "embed_entities" else labels.get(s, s)
        lines.append(f"    time in {label:<28} {ms / 1000:>8.1f} s  (in a thread beside the steps above: not in the sum)")
    return lines


def ingest(rt: Runtime, corpus: dict[str, list[str]], *, rag_only: bool = False) -> tuple[Topic, Topic | None, dict[str, float]]:
    """The RAG and the GraphRAG Topic with every passage, ingesting only what a kept folder lacks.

    Each passage is one file, ``<key>.txt`` (the key is the title on ``hotpotqa``, ``doc NNNN`` on the
    opaque sets), ingested in-process one file per call, the same way for both kinds.

    Args:
        rag_only: the RAG Topic only (the GraphRAG one is ``None``).

    Returns:
        The two Topics and the ingest seconds of each kind ({} for a Topic kept from the data folder).
    """
    topics, seconds = [], {}
    kinds = [(RAG_TOPIC, "rag", {}), (GRAPH_TOPIC, "graphrag", {"graph_extraction_method": "NLP"})]
    for name, kind, settings in kinds[:1] if rag_only else kinds:
        try:
            topic = get_topic(rt, name)
            print(f"  {name}: kept from the data folder", flush=True)
        except NotFoundError:
            topic = create_topic(rt, name, kind=kind, settings=settings)
            step_ms: dict[str, float] = {}
            overlapped_ms: dict[str, float] = {}
            upload_s = 0.0
            t0 = time.perf_counter()
            for title, sentences in corpus.items():
                t1 = time.perf_counter()
                row = receive_upload(rt, topic, f"{title}.txt", "".join(sentences).encode())
                upload_s += time.perf_counter() - t1
                result = ingest_document(rt, row.id)
                for event in result.trace:
                    if event.get("parent") is None and event["step"] != "model_call":
                        into = overlapped_ms if event.get("data", {}).get("overlapped") else step_ms
                        into[event["step"]] = into.get(event["step"], 0.0) + event.get("duration_ms", 0.0)
            seconds[kind] = time.perf_counter() - t0
            print(f"  {name}: {len(corpus)} passages ingested in {seconds[kind]:.1f} s", flush=True)
            if kind == "graphrag":
                for line in breakdown(step_ms, overlapped_ms, upload_s, seconds[kind]):
                    print(line, flush=True)
        topics.append(topic)
    if seconds:  # a kept folder then loads from one snapshot instead of replaying every upload's queries
        rt.redis.bgrewriteaof()
    if len(seconds) == 2:
        print(f"  GraphRAG (NLP) ingest / RAG ingest: {seconds['graphrag'] / seconds['rag']:.2f}x (goal <= 3x)", flush=True)
    return topics[0], topics[1] if len(topics) > 1 else None, seconds


def files_of(context: Context) -> list[str]:
    """The distinct source files of a context's chunk items, in rank order."""
    return list(dict.fromkeys(item.provenance[0].file_name for item in context.items if item.kind == "chunk"))


def metrics(files: list[str], gold: list[str]) -> dict[str, float]:
    """recall@1/5/10, any_gold@k and MRR of ranked files against gold file names (the product's own metric,
    :func:`~ragtopics.quality.evaluate.retrieval_metrics`, names matched on letters and digits)."""
    return retrieval_metrics(files, gold)


def ranking_variants(trace: Trace) -> dict[str, list[str]]:
    """LOCAL's candidate chunks (the 20 best before the second hops, as its trace keeps them) ordered by PageRank,
    by cosine and by LOCAL's fusion, and the chunks kept after file mentions and entity bridging; as file lists."""
    ranked = next((e.data for e in trace.events if e.step == "rank_chunks"), {})
    top = ranked.get("top", [])
    by = {
        "ppr only": sorted(top, key=lambda r: -r["ppr"]),
        "cosine only": sorted(top, key=lambda r: -r["cosine"]),
        "fused (ppr, cosine, named, keyword)": top,
        "fused, then second hops (kept)": ranked.get("kept", []),
    }
    return {name: list(dict.fromkeys(r["file"] for r in rows)) for name, rows in by.items()}


#: Columns of the table: the metric keys of :func:`~ragtopics.quality.evaluate.retrieval_metrics`.
COLUMNS = ("recall@1", "recall@5", "recall@10", "any_gold@5", "mrr")


def ways_for(rt: Runtime, rag: Topic, graph: Topic | None) -> tuple[dict[str, object], list[str]]:
    """The retrievers measured, by name, and a line for each way left out (with why); no GraphRAG way without ``graph``."""
    prompts = resolve_prompts(rt, rag.id)
    skipped = []
    ways: dict[str, object] = {}
    for name, update in [
        ("RAG DENSE", {"retrieval_strategy": "DENSE"}),
        ("RAG HYBRID", {"retrieval_strategy": "HYBRID"}),
        ("RAG HYBRID without Follow File Mentions", {"retrieval_strategy": "HYBRID", "follow_file_mentions": False}),
        ("RAG HYBRID + LLM rerank", {"retrieval_strategy": "HYBRID", "reranking_strategy": "LLM"}),
    ]:
        if "reranking_strategy" in update and not rt.settings.llm_base_url:
            skipped.append(
                f"{name}: skipped, no language model endpoint configured (LLM_BASE_URL); the bundled "
                "135M model cannot judge relevance, so its order would measure nothing"
            )
            continue
        cfg = rag.settings.model_copy(update={**update, "top_k_results": CHUNKS_RETURNED, "min_similarity_score": 0.0})
        ways[name] = ChunkRetriever(rt, rag.id, cfg, prompts["rerank"])
    if graph is None:
        return ways, [*skipped, "GraphRAG: not measured (--rag-only)"]
    for strategy in ("NODES", "CHUNKS", "FUSED"):
        cfg = graph.settings.model_copy(update={"seed_strategy": strategy, "max_cited_chunks": CHUNKS_RETURNED})
        ways[f"GraphRAG LOCAL {strategy}"] = LocalRetriever(rt, graph, cfg)
    cfg = graph.settings.model_copy(update={"max_cited_chunks": CHUNKS_RETURNED})
    ways["GraphRAG PATH (LOCAL when no chain)"] = PathRetriever(rt, graph, cfg)
    skipped.append("GraphRAG GLOBAL and HYBRID: not measured here, they answer from community summaries, not passages")
    return ways, skipped


def evaluate(rt: Runtime, rag: Topic, graph: Topic | None, questions: list[dict]) -> dict[str, dict[str, float]]:
    """Run every way over the questions and print recall@1/5/10, any-gold@5, MRR and ms per question.

    Returns:
        ``{way: {metric: mean over the questions, "ms": mean milliseconds per question}}``.
    """
    ways, skipped = ways_for(rt, rag, graph)
    scores: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    times: dict[str, float] = dict.fromkeys(ways, 0.0)
    variants: dict[str, list[float]] = {}
    for q in questions:
        gold = list(dict.fromkeys(clean_file_name(f"{title}.txt") for title, _ in q["supporting_facts"]))
        for name, way in ways.items():
            trace = Trace("chat", q["question"])
            t0 = time.perf_counter()
            context = way.retrieve(RetrievalQuery(q["question"]), trace)
            times[name] += time.perf_counter() - t0
            scores[name].append(metrics(files_of(context), gold))
            if name == "GraphRAG LOCAL FUSED":
                for variant, files in ranking_variants(trace).items():
                    variants.setdefault(variant, []).append(metrics(files, gold)[f"recall@{TOP_FILES}"])
    n = len(questions)
    table = {
        name: {c: sum(s.get(c, 0.0) for s in scores[name]) / n for c in COLUMNS} | {"ms": times[name] / n * 1000} for name in ways
    }
    print(f"\n  {'way':<36}" + "".join(f"{c:>11}" for c in COLUMNS) + f"{'ms/question':>13}", flush=True)
    for name, row in table.items():
        print(f"  {name:<36}" + "".join(f"{row[c]:>11.3f}" for c in COLUMNS) + f"{row['ms']:>13.1f}", flush=True)
    for line in skipped:
        print(f"  ({line})", flush=True)
    print(f"\n  GraphRAG LOCAL FUSED candidates ordered by (recall@{TOP_FILES}):", flush=True)
    for variant, values in variants.items():
        print(f"  {variant:<36} {sum(values) / n:>10.3f}", flush=True)
    return table


#: The evaluation sets measured by default, folders beside ``hotpotqa`` (see each one's SOURCE.md).
SETS = ("hotpotqa", "hotpotqa-opaque", "musique-dev")


def set_folders(names: list[str]) -> list[Path]:
    """The folders of the named sets: beside the default eval folder (``RAGTOPICS_EVAL_DIR`` alone: that folder)."""
    if os.environ.get("RAGTOPICS_EVAL_DIR"):
        return [eval_dir()]
    return [eval_dir().parent / name for name in names]


def run_set(folder: Path, data_dir: Path | None, limit: int, *, rag_only: bool = False) -> dict:
    """Ingest one set into a RAG and a GraphRAG Topic (or reuse them from ``data_dir``) and evaluate every way."""
    data = load_eval_data(folder)
    questions = data.questions[:limit] if limit else data.questions
    print(f"\n#### {shown_path(folder)}: {len(data.corpus)} passages, {len(questions)} questions", flush=True)
    with throwaway_runtime(data_dir / folder.name if data_dir else None, prefix="ragtopics-recall-") as rt:
        print("\n== ingest", flush=True)
        rag, graph, seconds = ingest(rt, data.corpus, rag_only=rag_only)
        print(
            f"\n== retrieval only (recall@{TOP_FILES}: mean share of gold passages in the first {TOP_FILES} distinct files)",
            flush=True,
        )
        return {"table": evaluate(rt, rag, graph, questions), "ingest_s": seconds}


def main(argv: list[str] | None = None) -> int:
    """Per set: start Redis (in ``--data-dir``/<set> or a temporary folder), ingest, evaluate, stop Redis."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="keep each set's Redis data and Topics here (a second run reuses them)")
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated sets beside hotpotqa (default {','.join(SETS)})")
    parser.add_argument("--questions", type=int, default=0, help="evaluate only the first N questions (0: all)")
    parser.add_argument("--rag-only", action="store_true", help="ingest and measure the RAG Topic only (its ways)")
    parser.add_argument("--product", action="store_true", help="measure Topics of the running product (--rag, --graph)")
    parser.add_argument("--rag", default=RAG_TOPIC, help="the RAG Topic to measure with --product")
    parser.add_argument("--graph", default=GRAPH_TOPIC, help="the GraphRAG Topic to measure with --product")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    if args.product:
        data = load_eval_data(eval_dir())
        questions = data.questions[: args.questions] if args.questions else data.questions
        rt = get_runtime()
        load_embedder(rt)
        rag, graph = get_topic(rt, args.rag), get_topic(rt, args.graph)
        print(f"\n== retrieval only on the product's Topics {rag.name!r} and {graph.name!r}", flush=True)
        evaluate(rt, rag, graph, questions)
        print(f"\n  total run time {time.perf_counter() - started:.1f} s", flush=True)
        return 0
    results = {}
    for folder in set_folders([n.strip() for n in args.sets.split(",") if n.strip()]):
        results[folder.name] = run_set(folder, args.data_dir, args.questions, rag_only=args.rag_only)
    print("\n#### summary (recall@5)", flush=True)
    for name, result in results.items():
        table, seconds = result["table"], result["ingest_s"]
        line = "  ".join(
            f"{way} {row['recall@5']:.3f}"
            for way, row in table.items()
            if way in ("RAG DENSE", "RAG HYBRID", "GraphRAG LOCAL FUSED", "GraphRAG PATH (LOCAL when no chain)")
        )
        times = (
            (
                f"; ingest RAG {seconds['rag']:.0f} s, GraphRAG {seconds['graphrag']:.0f} s "
                f"({seconds['graphrag'] / seconds['rag']:.2f}x)"
            )
            if len(seconds) == 2
            else ""
        )
        print(f"  {name:<16} {line}{times}", flush=True)
    print(f"\n  total run time {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
