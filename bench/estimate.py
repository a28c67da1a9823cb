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
round recorded. A last GraphRAG NLP round of six times as many passages (HotpotQA from passage
:data:`LARGER_START`) starts from the defaults again: larger than the deduplication probe of the preview
(:func:`~ragtopics.graph.probe.probe_dedup`), which the rounds above fit inside. Each
round: :func:`~ragtopics.ingest.cost.estimate_upload`, then the real in-process ingest
(``receive_upload`` + ``ingest_documents``; a GraphRAG Topic's files one at a time), then for GraphRAG
a community rebuild (``run_rebuild``). Printed per round: estimated and actual chunks and model calls
by kind (actual = requests the scripted server got), and the error in percent; the goal is within
±25 % for chunks and calls. Nothing is asserted.

``python -m bench.estimate`` runs this section alone (``--passages N`` per round); ``python -m bench.run``
runs it as section 14. ``python -m bench.estimate --fit-defaults`` instead measures the NLP graph defaults
(:data:`~ragtopics.ingest.cost.GRAPH_DEFAULTS`) on :data:`FIT_SAMPLES`, passages the rounds above do not use.
"""

from __future__ import annotations

import logging
import sys
import time

from bench.graph import scripted_model
from ragtopics.documents.uploads import receive_upload
from ragtopics.graph.refresh import run_rebuild
from ragtopics.ingest.cost import KINDS, clear_figures, error_percent, estimate_upload, graph_outlook, load_figures, observations
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


#: First passage of the larger NLP round (after the fit samples below, which end at HotpotQA passage 649).
LARGER_START = 650

#: Samples the NLP graph defaults are fitted on (``--fit-defaults``): (eval folder, first passage), :data:`PASSAGES`
#: each, in ``corpus.json`` order. None overlaps the rounds above (HotpotQA passages 0 to ``6·PASSAGES - 1``).
FIT_SAMPLES = (
    ("hotpotqa", 300),
    ("hotpotqa", 400),
    ("hotpotqa", 500),
    ("hotpotqa", 600),
    ("musique-dev", 0),
    ("musique-dev", 400),
)


def _files(data, start: int, count: int) -> list[tuple[str, bytes]]:
    passages = list(data.corpus.items())[start : start + count]
    return [(f"{title.replace('/', ' ')}.txt", "".join(sentences).encode()) for title, sentences in passages]


def _error(estimated: float, actual: float) -> str:
    err = error_percent(estimated, actual)
    return "—" if err is None else "∞" if err == float("inf") else f"{err:+.1f} %"


def run_round(rt: Runtime, topic, files: list[tuple[str, bytes]], llm, figure, label: str) -> dict[str, tuple[float, int]]:
    """Estimate, ingest and (GraphRAG) rebuild one round; print and return ``{what: (estimated, actual)}``."""
    t0 = time.perf_counter()
    estimate = estimate_upload(rt, topic, files)
    preview_s = time.perf_counter() - t0
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
    figure(f"{label}: the preview itself, seconds", preview_s)
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
        # A larger upload from the defaults, six rounds' worth: the deduplication probe runs on its first files
        # only and the rest is extrapolated (every round above fits inside the probe).
        topic = create_topic(rt, "bench-estimate-larger", kind="graphrag", settings=TOPICS["GraphRAG NLP"][1])
        clear_figures(rt)
        label = f"GraphRAG NLP, defaults, {6 * passages} passages"
        results[label] = run_round(rt, topic, _files(data, LARGER_START, 6 * passages), llm, figure, label)
    worst = max((abs(error_percent(e, a) or 0.0) for r in results.values() for e, a in r.values() if a), default=0.0)
    figure("largest error (actual > 0)", f"{worst:.1f} %")
    return results


def _ratio_since(rows: dict, before: dict[str, tuple[float, float]], key: str) -> float:
    """count/units of a figure row added since ``before`` (its ``(count, units)`` then); 0 when none was added."""
    row, (count, units) = rows.get(key), before.get(key, (0.0, 0.0))
    if row is None or row.units - units <= 0:
        return 0.0
    return (row.count - count) / (row.units - units)


def fit_graph_defaults(rt: Runtime, samples: dict[str, object], figure, *, passages: int = PASSAGES) -> dict[str, float]:
    """Measure the NLP extraction's graph figures on several samples, as an installation measures them.

    Each sample (:data:`FIT_SAMPLES`) goes one passage a file into its own empty GraphRAG NLP Topic (resolution
    1.0), followed by a community rebuild, all against the scripted model server; the figures and observations
    the uploads and rebuilds record are pooled over the samples (nothing is cleared between them), and the
    :class:`~ragtopics.ingest.cost.GraphOutlook` an empty Topic then gets holds the fitted values. Printed per
    sample: its mentions and new entities per character, its uploads that asked the Deduplication model, its
    unclear pairs and its communities per entity; then the pooled figures.

    Args:
        samples: eval folder name → its loaded eval data (``corpus``).
        passages: passages per sample.

    Returns:
        The pooled figures: ``mentions_per_char``, ``new_per_char``, ``a``, ``b``, ``pairs_per_hazard``,
        ``reports_per_entity``.
    """
    work = "graphrag-nlp"
    clear_figures(rt)
    with scripted_model(rt):
        for n, (folder, start) in enumerate(FIT_SAMPLES):
            topic = create_topic(rt, f"fit-defaults-{n}", kind="graphrag", settings={"graph_extraction_method": "NLP"})
            before = {k: (r.count, r.units) for k, r in load_figures(rt).rows.items()}
            seen = len(observations(rt, f"dedup:{work}"))
            t0 = time.perf_counter()
            for name, data in _files(samples[folder], start, passages):
                ingest_document(rt, receive_upload(rt, topic, name, data).id)
            run_rebuild(rt, topic.id, reason="fit defaults")
            rows = load_figures(rt).rows
            delta = {
                key: _ratio_since(rows, before, key)
                for key in (f"graph:mentions:{work}", f"graph:new:{work}", f"communities:{work}:1")
            }
            obs = observations(rt, f"dedup:{work}")[seen:]
            figure(
                f"{folder} {start}-{start + passages - 1}",
                f"mentions/char {delta[f'graph:mentions:{work}']:.4f}, new/char {delta[f'graph:new:{work}']:.4f}, "
                f"asking uploads {sum(1 for o in obs if o[2] > 0)} of {len(obs)}, unclear pairs {sum(o[2] for o in obs):.0f}, "
                f"communities/entity {delta[f'communities:{work}:1']:.4f} ({time.perf_counter() - t0:.0f} s)",
            )
        empty = create_topic(rt, "fit-defaults-empty", kind="graphrag", settings={"graph_extraction_method": "NLP"})
        outlook = graph_outlook(rt, empty, work, load_figures(rt))
    fitted = {
        "mentions_per_char": outlook.mentions_per_char,
        "new_per_char": outlook.new_per_char,
        "a": outlook.hazard[0],
        "b": outlook.hazard[1],
        "pairs_per_hazard": outlook.pairs_per_hazard,
        "reports_per_entity": outlook.reports_per_entity,
    }
    figure("pooled NLP graph figures", ", ".join(f"{k} {v:.4g}" for k, v in fitted.items()))
    return fitted


def main(argv: list[str]) -> int:
    """Run section 14 alone, on a throwaway Redis as ``bench.run`` does (``--passages N`` per round);
    ``--fit-defaults``: :func:`fit_graph_defaults` instead."""
    from bench.run import eval_dir, figure, load_eval_data, section, throwaway_runtime

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    passages = int(argv[argv.index("--passages") + 1]) if "--passages" in argv else PASSAGES
    if "--fit-defaults" in argv:
        base = eval_dir().parent
        samples = {folder: load_eval_data(base / folder) for folder in {f for f, _ in FIT_SAMPLES}}
        with throwaway_runtime(prefix="ragtopics-estimate-") as rt:
            section(f"NLP graph defaults fitted on {len(FIT_SAMPLES)} samples of {passages} passages (scripted model)")
            fit_graph_defaults(rt, samples, figure, passages=passages)
        return 0
    data = load_eval_data(eval_dir())
    with throwaway_runtime(prefix="ragtopics-estimate-") as rt:
        bench_estimate(rt, data, figure, section, passages=passages)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
