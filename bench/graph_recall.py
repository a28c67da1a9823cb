"""Passage recall of a GraphRAG Topic's LOCAL search against a RAG Topic's SEARCH, on HotpotQA.

The 994 passages of ``shared/eval/hotpotqa`` (``RAGTOPICS_EVAL_DIR`` overrides it) are ingested
in-process (``receive_upload`` + ``ingest_document``) as ``<title>.txt`` files into one GraphRAG
Topic (NLP extraction) and one RAG Topic, on a throwaway embedded Redis. Then, for the 100
questions, retrieval only (no language model): **recall@5**, the mean share of a question's gold
titles among the first five distinct source files of the retrieved chunks, for

* RAG DENSE and RAG HYBRID (:class:`~ragtopics.rag.retriever.ChunkRetriever`, Top-K Results 10);
* LOCAL under Seed Strategy NODES, CHUNKS and FUSED (:class:`~ragtopics.graph.local.LocalRetriever`,
  Max Cited Chunks 10, other settings at their defaults);
* for LOCAL FUSED, the same candidate chunks ordered three ways (read from its ``rank_chunks``
  trace step): by personalized PageRank alone, by cosine alone, and by their fusion (what LOCAL keeps),
  to show which ranking matters.

It prints a table and asserts nothing. ``python -m bench.graph_recall [--data-dir DIR]``: with a
folder, the Redis data and the Topics stay there and a second run skips the ingest.
``--product --rag NAME --graph NAME`` measures two Topics already filled in the running product
(its configuration from the environment, as the CLI reads it), e.g. after ``ragtopics ingest``;
a file counts as a passage when its name, letters and digits only, is the passage title's.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from bench.run import eval_dir, load_eval_data, load_embedder, throwaway_runtime
from ragtopics.answer.context import Context, RetrievalQuery
from ragtopics.documents.uploads import clean_file_name, receive_upload
from ragtopics.errors import NotFoundError
from ragtopics.graph.local import LocalRetriever
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


def ingest(rt: Runtime, corpus: dict[str, list[str]]) -> tuple[Topic, Topic]:
    """The RAG and the GraphRAG Topic with every passage, ingesting only what a kept folder lacks."""
    topics = []
    for name, kind, settings in [(RAG_TOPIC, "rag", {}), (GRAPH_TOPIC, "graphrag", {"graph_extraction_method": "NLP"})]:
        try:
            topic = get_topic(rt, name)
            print(f"  {name}: kept from the data folder", flush=True)
        except NotFoundError:
            topic = create_topic(rt, name, kind=kind, settings=settings)
            t0 = time.perf_counter()
            for title, sentences in corpus.items():
                ingest_document(rt, receive_upload(rt, topic, f"{title}.txt", "".join(sentences).encode()).id)
            print(f"  {name}: {len(corpus)} passages ingested in {time.perf_counter() - t0:.1f} s", flush=True)
        topics.append(topic)
    return topics[0], topics[1]


def files_of(context: Context) -> list[str]:
    """The distinct source files of a context's chunk items, in rank order."""
    return list(dict.fromkeys(item.provenance[0].file_name for item in context.items if item.kind == "chunk"))


def recall(files: list[str], gold: list[str]) -> float:
    """Share of ``gold`` file names among the first :data:`TOP_FILES` files (the product's own metric,
    :func:`~ragtopics.quality.evaluate.retrieval_metrics`, names matched on letters and digits)."""
    return retrieval_metrics(files, gold)[f"recall@{TOP_FILES}"]


def ranking_variants(trace: Trace) -> dict[str, list[str]]:
    """LOCAL's candidate chunks (the 20 its trace keeps) ordered by PageRank, by cosine and as kept; as file lists."""
    top = next((e.data.get("top", []) for e in trace.events if e.step == "rank_chunks"), [])
    by = {
        "ppr only": sorted(top, key=lambda r: -r["ppr"]),
        "cosine only": sorted(top, key=lambda r: -r["cosine"]),
        "ppr+cosine (kept)": top,
    }
    return {name: list(dict.fromkeys(r["file"] for r in rows)) for name, rows in by.items()}


def evaluate(rt: Runtime, rag: Topic, graph: Topic, questions: list[dict]) -> None:
    """Run every way over the questions and print recall@5 (and mean ms per question) as a table."""
    prompts = resolve_prompts(rt, rag.id)
    ways = {
        "RAG DENSE": ChunkRetriever(rt, rag.id, rag.settings.model_copy(update={"retrieval_strategy": "DENSE",
                                    "top_k_results": CHUNKS_RETURNED}), prompts["rerank"]),
        "RAG HYBRID": ChunkRetriever(rt, rag.id, rag.settings.model_copy(update={"retrieval_strategy": "HYBRID",
                                     "top_k_results": CHUNKS_RETURNED}), prompts["rerank"]),
    }  # fmt: skip
    for strategy in ("NODES", "CHUNKS", "FUSED"):
        cfg = graph.settings.model_copy(update={"seed_strategy": strategy, "max_cited_chunks": CHUNKS_RETURNED})
        ways[f"LOCAL {strategy}"] = LocalRetriever(rt, graph, cfg)
    scores: dict[str, list[float]] = {name: [] for name in ways}
    times: dict[str, float] = {name: 0.0 for name in ways}
    variants: dict[str, list[float]] = {}
    for q in questions:
        gold = list(dict.fromkeys(clean_file_name(f"{title}.txt") for title, _ in q["supporting_facts"]))
        for name, way in ways.items():
            trace = Trace("chat", q["question"])
            t0 = time.perf_counter()
            context = way.retrieve(RetrievalQuery(q["question"]), trace)
            times[name] += time.perf_counter() - t0
            scores[name].append(recall(files_of(context), gold))
            if name == "LOCAL FUSED":
                for variant, files in ranking_variants(trace).items():
                    variants.setdefault(variant, []).append(recall(files, gold))
    n = len(questions)
    print(f"\n  {'way':<28} {'recall@5':>9} {'ms/question':>12}", flush=True)
    for name in ways:
        print(f"  {name:<28} {sum(scores[name]) / n:>9.3f} {times[name] / n * 1000:>12.1f}", flush=True)
    print("\n  LOCAL FUSED candidates ordered by:", flush=True)
    for variant, values in variants.items():
        print(f"  {variant:<28} {sum(values) / n:>9.3f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Start Redis (in ``--data-dir`` or a temporary folder), ingest, evaluate, stop Redis."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="keep the Redis data and Topics here (a second run reuses them)")
    parser.add_argument("--questions", type=int, default=0, help="evaluate only the first N questions (0: all)")
    parser.add_argument("--product", action="store_true", help="measure Topics of the running product (--rag, --graph)")
    parser.add_argument("--rag", default=RAG_TOPIC, help="the RAG Topic to measure with --product")
    parser.add_argument("--graph", default=GRAPH_TOPIC, help="the GraphRAG Topic to measure with --product")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    data = load_eval_data(eval_dir())
    questions = data.questions[: args.questions] if args.questions else data.questions
    print(f"GraphRAG LOCAL recall: {len(data.corpus)} passages, {len(questions)} questions", flush=True)
    started = time.perf_counter()
    if args.product:
        rt = get_runtime()
        load_embedder(rt)
        rag, graph = get_topic(rt, args.rag), get_topic(rt, args.graph)
        print(f"\n== retrieval only on the product's Topics {rag.name!r} and {graph.name!r}", flush=True)
        evaluate(rt, rag, graph, questions)
        print(f"\n  total run time {time.perf_counter() - started:.1f} s", flush=True)
        return 0
    with throwaway_runtime(args.data_dir, prefix="ragtopics-recall-") as rt:
        print("\n== ingest", flush=True)
        rag, graph = ingest(rt, data.corpus)
        print(f"\n== retrieval only (recall@{TOP_FILES}: mean share of gold titles in the first "
              f"{TOP_FILES} distinct files)", flush=True)  # fmt: skip
        evaluate(rt, rag, graph, questions)
    print(f"\n  total run time {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
