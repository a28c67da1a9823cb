"""Router benchmark: accuracy, confusion matrix and latency of the routers on the router eval set.

The 30 questions of ``shared/eval/router/questions.json`` (five per GraphRAG way; beside
the repository, ``RAGTOPICS_ROUTER_EVAL`` overrides the file) are routed as a GraphRAG
Topic would route them, and as a RAG Topic would (PATH, LOCAL, GLOBAL and HYBRID
expected as SEARCH), with the default thresholds of the specifications:

* the embedding router (the bundled embedding model and the exemplars) always;
* the LLM router only when the Router role has an endpoint that is not the bundled
  model (``ROUTER_BASE_URL`` or ``LLM_BASE_URL``); otherwise the section says why it was skipped.

"chosen" is the way taken after the fallbacks (threshold, DIRECT threshold, ATTACHMENT
without a file); "best" is the router's own top way before them. Latency is the time of
:func:`choose_route`, without the first call (which loads the model and embeds the exemplars).

``python -m bench.router`` runs it alone; ``make bench`` runs it after the other sections.
``python -m bench.router --calibrate`` refits the embedding router's confidence calibration
on our own development questions (never the eval set) and prints the constants.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragtopics.answer.router_exemplars import DEV_QUESTIONS
from ragtopics.answer.routing import EmbeddingRouter, Route, choose_route, collapse, routes_for
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import ROUTER
from ragtopics.settings.env import Settings
from ragtopics.tracing.trace import Trace

#: The specs' default thresholds: GraphRAG Confidence Threshold and DIRECT Confidence Threshold, RAG Router Confidence Threshold.
THRESHOLDS: dict[str, tuple[float, float | None]] = {"graphrag": (0.6, 0.9), "rag": (0.9, None)}


@dataclass(frozen=True, slots=True)
class Routed:
    """One routed eval question.

    Attributes:
        expected: the expected way for the Topic kind.
        chosen: the way taken after the fallbacks.
        best: the router's own top way before the fallbacks.
        confidence: the router's confidence (None when unusable).
        latency_ms: time of the ``choose_route`` call in milliseconds.
    """

    expected: str
    chosen: str
    best: str
    confidence: float | None
    latency_ms: float


def router_eval_path() -> Path:
    """``RAGTOPICS_ROUTER_EVAL``, else ``shared/eval/router/questions.json`` beside the repository."""
    override = os.environ.get("RAGTOPICS_ROUTER_EVAL")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "shared" / "eval" / "router" / "questions.json"


def route_all(gateway: ModelGateway, questions: list[dict], *, kind: str, method: str) -> list[Routed]:
    """Route every question as a ``kind`` Topic with ``method`` and the default thresholds.

    Raises:
        ModelUnavailableError: when the embedding model cannot be loaded.
    """
    threshold, direct_threshold = THRESHOLDS[kind]
    out = []
    for q in questions:
        trace = Trace("chat", q["question"])
        t0 = time.perf_counter()
        choice = choose_route(
            gateway,
            kind=kind,
            method=method,
            template=ROUTER,
            history=q["history"],
            question=q["question"],
            has_attachment=q["attachment"] is not None,
            threshold=threshold,
            direct_threshold=direct_threshold,
            trace=trace,
        )
        elapsed_ms = (time.perf_counter() - t0) * 1000
        event = next(e for e in trace.events if e.step == "route")
        best = event.data.get("decision", {}).get("route", choice.route.value)
        out.append(
            Routed(
                collapse(Route(q["expected_way"]), kind).value,
                choice.route.value,
                collapse(Route(best), kind).value,
                choice.confidence,
                elapsed_ms,
            )
        )
    return out


def print_results(title: str, routed: list[Routed], kind: str, out: Callable[[str], None] = print) -> None:
    """Accuracy per way, overall accuracy (chosen and best), confusion matrix and latency."""
    ways = [r.value for r in routes_for(kind)]
    out(f"\n== {title}")
    for way in ways:
        items = [r for r in routed if r.expected == way]
        if items:
            out(f"  {way:<12} {sum(r.chosen == way for r in items)}/{len(items)}")
    n = len(routed)
    chosen_ok, best_ok = sum(r.chosen == r.expected for r in routed), sum(r.best == r.expected for r in routed)
    out(f"  {'accuracy (chosen, after fallbacks)':<38} {chosen_ok}/{n} = {chosen_ok / n:.2f}")
    out(f"  {'accuracy (best way, before fallbacks)':<38} {best_ok}/{n} = {best_ok / n:.2f}")
    out("  confusion matrix (rows = expected, columns = chosen):")
    out("  " + " " * 12 + "".join(f"{w[:6]:>8}" for w in ways))
    for w in ways:
        out(f"  {w:<12}" + "".join(f"{sum(r.expected == w and r.chosen == c for r in routed):>8}" for c in ways))
    timed = [r.latency_ms for r in routed[1:]]
    if timed:
        p50, p95 = np.percentile(timed, 50), np.percentile(timed, 95)
        out(f"  {'routing latency p50 / p95 (first excluded)':<38} {p50:.1f} / {p95:.1f} ms")


def llm_router_skip_reason(settings: Settings) -> str:
    """Why the LLM router cannot be benchmarked here, or "" when it can."""
    endpoint = settings.endpoint("router")
    if endpoint.is_local:
        return (
            f"the Router role is the bundled model ({endpoint.model} at {endpoint.base_url}); "
            "set ROUTER_BASE_URL/ROUTER_MODEL or LLM_BASE_URL/LLM_MODEL to a real model to measure it"
        )
    return ""


def bench_router(gateway: ModelGateway, out: Callable[[str], None] = print) -> None:
    """Route the eval questions with the embedding router, and the LLM router when one is configured."""
    path = router_eval_path()
    if not path.is_file():
        out(f"\n== router: skipped, the router eval set is missing ({path}; RAGTOPICS_ROUTER_EVAL overrides it)")
        return
    questions = json.loads(path.read_text())
    for kind in ("graphrag", "rag"):
        routed = route_all(gateway, questions, kind=kind, method="EMBEDDING")
        title = f"router: embedding ({gateway.embedder.model}), {kind} Topic, {len(questions)} questions"
        print_results(title, routed, kind, out)
    reason = llm_router_skip_reason(gateway.settings)
    if reason:
        out(f"\n== router: LLM router skipped: {reason}")
        return
    model = gateway.settings.endpoint("router").model
    for kind in ("graphrag", "rag"):
        routed = route_all(gateway, questions, kind=kind, method="LLM")
        print_results(f"router: LLM ({model}), {kind} Topic, {len(questions)} questions", routed, kind, out)


def calibrate(gateway: ModelGateway) -> tuple[float, float]:
    """Fit ``confidence = sigmoid(A + B * margin)`` on DEV_QUESTIONS (GraphRAG ways, before fallbacks).

    Logistic regression of "the best way is the expected one" on the margin, by Newton's
    method with a small ridge on B (the dev set is small and may be separable).

    Returns:
        ``(A, B)``.
    """
    router = EmbeddingRouter()
    margins, correct = [], []
    for way, question, attachment in DEV_QUESTIONS:
        scores, _ = router.score(gateway, question, has_attachment=attachment is not None, history=[])
        ranked = sorted(scores, key=scores.get, reverse=True)
        margins.append(scores[ranked[0]] - scores[ranked[1]])
        correct.append(float(ranked[0] == way))
    x = np.column_stack([np.ones(len(margins)), margins])
    y = np.asarray(correct)
    w = np.zeros(2)
    ridge = np.diag([0.0, 1e-3])
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ w))
        grad = x.T @ (y - p) - ridge @ w
        hess = x.T @ (x * (p * (1 - p))[:, None]) + ridge
        w = w + np.linalg.solve(hess, grad)
    print(f"dev questions {len(y)}, best way right {int(y.sum())}; CALIBRATION_A = {w[0]:.2f}, CALIBRATION_B = {w[1]:.2f}")
    return float(w[0]), float(w[1])


def build_gateway() -> ModelGateway:
    """A gateway on the environment's settings (no Redis needed), its embedding model loaded."""
    gateway = ModelGateway(Settings(_env_file=None))
    load = getattr(gateway.embedder, "load", None)
    if load:
        load()
    return gateway


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.router [--calibrate]``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    gateway = build_gateway()
    if "--calibrate" in argv:
        calibrate(gateway)
        return 0
    bench_router(gateway)
    return 0


if __name__ == "__main__":
    sys.exit(main())
