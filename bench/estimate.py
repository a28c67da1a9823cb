"""Cost preview benchmark: the estimate before an upload against what the upload then took.

HotpotQA passages (``shared/eval/hotpotqa``), one ``<title>.txt`` file each, go to three Topics on
a throwaway embedded Redis, with every model role on the scripted loopback server
(``tests/scripted_llm.py``, which answers at once and counts every request):

- a RAG Topic with SEMANTIC chunking and LLM keywords (a context line and a keyword call per chunk);
- a GraphRAG Topic with the NLP extraction method (no extraction calls; deduplication and community
  reports on the scripted server);
- a GraphRAG Topic with the LLM extraction method.

For each, two rounds of :data:`PASSAGES` passages (different ones): the first is estimated from the
stated defaults (the measured figures and observations are cleared before it), the second from the figures the first
round recorded. Each
round: :func:`~ragtopics.ingest.cost.estimate_upload`, then the real in-process ingest
(``receive_upload`` + ``ingest_documents``; a GraphRAG Topic's files one at a time), then for GraphRAG
a community rebuild (``run_rebuild``). Printed per round: estimated and actual chunks and model calls
by kind (actual = requests the scripted server got), and the error in percent; the goal is within
±25 % for chunks and calls. Nothing is asserted.

``python -m bench.estimate`` runs this section alone (``--passages N`` per round); ``python -m bench.run``
runs it as section 14.
"""

from __future__ import annotations

import logging
import sys
import time

from bench.graph import scripted_model
from ragtopics.documents.uploads import receive_upload
from ragtopics.graph.refresh import run_rebuild
from ragtopics.ingest.cost import KINDS, clear_figures, error_percent, estimate_upload
from ragtopics.ingest.pipeline import ingest_document, ingest_documents
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import create_topic

#: Passages per round (each Topic has two rounds).
PASSAGES = 50
#: The Topics compared: name → (kind, settings).
TOPICS = {
    "RAG (SEMANTIC, LLM keywords)": (
        "rag",
        {"chunking_strategy": "SEMANTIC", "retrieval_strategy": "HYBRID", "keyword_enrichment": "LLM"},
    ),
    "GraphRAG NLP": ("graphrag", {"graph_extraction_method": "NLP"}),
    "GraphRAG LLM": ("graphrag", {"graph_extraction_method": "LLM"}),
}
#: The scripted server's replies for the RAG Topic's calls (the graph's come from ``bench.graph.scripted_model``).
RAG_REPLIES = {"context_line": "Where this passage sits in the collection.", "keywords": "passage, title, subject"}


def _files(data, start: int, count: int) -> list[tuple[str, bytes]]:
    passages = list(data.corpus.items())[start : start + count]
    return [(f"{title.replace('/', ' ')}.txt", "".join(sentences).encode()) for title, sentences in passages]


def _error(estimated: float, actual: float) -> str:
    err = error_percent(estimated, actual)
    return "—" if err is None else "∞" if err == float("inf") else f"{err:+.1f} %"


def run_round(rt: Runtime, topic, files: list[tuple[str, bytes]], llm, figure, label: str) -> dict[str, tuple[float, int]]:
    """Estimate, ingest and (GraphRAG) rebuild one round; print and return ``{what: (estimated, actual)}``."""
    estimate = estimate_upload(rt, topic, files)
    llm.requests.clear()
    t0 = time.perf_counter()
    rows = [receive_upload(rt, topic, name, data) for name, data in files]
    rebuild_s = 0.0
    if topic.kind == "graphrag":
        chunks = sum(ingest_document(rt, row.id).chunk_count for row in rows)
        took = time.perf_counter() - t0
        run_rebuild(rt, topic.id, reason="bench")
        rebuild_s = time.perf_counter() - t0 - took
    else:
        chunks = sum(
            r.chunk_count
            for r in ingest_documents(rt, topic.id, [(row.id, row.job_id, row.pending_blob_path) for row in rows]).values()
        )
        took = time.perf_counter() - t0
    out = {"chunks": (estimate.chunks, chunks)}
    for kind, call in estimate.calls.items():
        out[kind] = (call.calls, len(llm.prompts(kind)))
    for kind in KINDS:  # a call the estimate did not expect counts too
        if kind not in out and llm.prompts(kind):
            out[kind] = (0.0, len(llm.prompts(kind)))
    for what, (est, act) in out.items():
        name = KINDS[what].label if what in KINDS else what
        figure(f"{label}: {name}", f"{est:,.0f} est. / {act:,} actual ({_error(est, act)})")
    measured = sum(1 for c in estimate.calls.values() if c.measured)
    figure(f"{label}: kinds with measured figures", f"{measured} of {len(estimate.calls)}")
    figure(f"{label}: estimated / actual upload seconds", f"{estimate.seconds:,.1f} / {took:,.1f} (instant model)")
    if rebuild_s:
        figure(f"{label}: community rebuild seconds", rebuild_s)
    return out


def bench_estimate(rt: Runtime, data, figure, section, *, passages: int = PASSAGES) -> dict[str, dict]:
    """Section 14: the estimate's error for chunks and calls by kind, per Topic and round (see the module)."""
    section(f"14. cost preview: estimate against the real upload ({passages} passages a round, scripted model)")
    results: dict[str, dict] = {}
    with scripted_model(rt) as llm:
        llm.replies.update(RAG_REPLIES)
        for n, (name, (kind, settings)) in enumerate(TOPICS.items()):
            topic = create_topic(rt, f"bench-estimate-{n}", kind=kind, settings=settings)
            clear_figures(rt)  # each Topic's first round starts from the stated defaults
            for round_no, label in ((0, "defaults"), (1, "measured")):
                start = (2 * n + round_no) * passages
                results[f"{name}, {label}"] = run_round(rt, topic, _files(data, start, passages), llm, figure, f"{name}, {label}")
    worst = max((abs(error_percent(e, a) or 0.0) for r in results.values() for e, a in r.values() if a), default=0.0)
    figure("largest error (actual > 0)", f"{worst:.1f} %")
    return results


def main(argv: list[str]) -> int:
    """Run section 14 alone, on a throwaway Redis as ``bench.run`` does (``--passages N`` per round)."""
    from bench.run import eval_dir, figure, load_eval_data, section, throwaway_runtime

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    passages = int(argv[argv.index("--passages") + 1]) if "--passages" in argv else PASSAGES
    data = load_eval_data(eval_dir())
    with throwaway_runtime(prefix="ragtopics-estimate-") as rt:
        bench_estimate(rt, data, figure, section, passages=passages)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
