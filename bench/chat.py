"""Chat latency: what a turn costs apart from the model's generation, and time to first token.

Two parts, both through the product's own :func:`ragtopics.answer.turn.ask`:

1. **Overhead.** The ingested HotpotQA Topic is asked its questions with an instant
   scripted model (a loopback OpenAI-compatible server that answers at once), so the
   whole turn is what the product adds: history, prompt resolution, the question's
   embedding, the search, prompt building, attribution, links and saving. Printed: p50/p95
   of the whole turn, and of the turn without the model calls (``answer`` and
   ``source_check`` steps).
2. **The bundled model.** With SmolLM2-135M served by the bundled llama.cpp server: time
   to first token on a few questions, and "thanks, that is all" on a routed Topic, routed
   by the LLM router (the bundled model) versus the embedding router.
"""

from __future__ import annotations

import time

import numpy as np

from ragtopics.answer.turn import ask
from ragtopics.llm.gateway import ModelGateway
from ragtopics.runtime import Runtime
from ragtopics.settings.env import Settings
from ragtopics.topics.topics import Topic, update_settings
from tests.scripted_llm import ScriptedLLM

#: Questions asked for the overhead figures, and for time to first token with the bundled model.
OVERHEAD_QUESTIONS = 100
TTFT_QUESTIONS = 3
SMALL_TALK = "thanks, that is all"


def _final(updates):
    *_, last = updates
    return last


def _with_model(rt: Runtime, **env) -> Runtime:
    """The runtime pointed at another language model endpoint (same stores and embedder)."""
    settings = Settings(**{**rt.settings.model_dump(by_alias=True), **env}, _env_file=None)
    embedder = rt.gateway.embedder
    rt.settings = settings
    rt._gateway = ModelGateway(settings, embedder=embedder)
    return rt


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def bench_overhead(rt: Runtime, topic: Topic, questions: list[dict], figure, section) -> None:
    """Ask the Topic its questions with an instant scripted model; print the product's own cost per turn."""
    section(
        f"5. chat overhead ({min(OVERHEAD_QUESTIONS, len(questions))} questions, instant scripted model, Top-K "
        f"{topic.settings.top_k_results}, {topic.settings.retrieval_strategy})"
    )
    server = ScriptedLLM().start()
    saved = rt.settings
    try:
        _with_model(rt, LLM_BASE_URL=server.base_url, LLM_MODEL="scripted")
        server.replies.update({"answer": "The answer is in the first passage [S1].", "source_check": '{"used": true}'})
        _final(ask(rt, topic, "warm-up question", save=False))
        totals, overhead, steps = [], [], {}
        for item in questions[:OVERHEAD_QUESTIONS]:
            result = _final(ask(rt, topic, item["question"]))
            t = result.timings_ms
            totals.append(t["total"])
            overhead.append(t["total"] - t.get("answer", 0.0) - t.get("source_check", 0.0))
            for name in ("prepare", "embed_question", "search", "prompt", "answer", "source_check", "finish"):
                steps.setdefault(name, []).append(t.get(name, 0.0))
        figure("turn p50 / p95 (instant model)", f"{_pct(totals, 50):.1f} / {_pct(totals, 95):.1f}", "ms")
        figure("overhead without model calls p50 / p95", f"{_pct(overhead, 50):.1f} / {_pct(overhead, 95):.1f}", "ms")
        for name, values in steps.items():
            figure(f"  step {name} p50 / p95", f"{_pct(values, 50):.2f} / {_pct(values, 95):.2f}", "ms")
    finally:
        _with_model(rt, LLM_BASE_URL=saved.llm_base_url, LLM_MODEL=saved.llm_model)
        server.stop()


def bench_bundled_model(rt: Runtime, topic: Topic, questions: list[dict], figure, section, free_port) -> None:
    """Time to first token and the small-talk turn with the bundled model (skipped when it cannot start)."""
    from ragtopics.llm.local_server import LocalModelServer

    section("6. chat with the bundled model (SmolLM2-135M, llama.cpp, CPU)")
    port = free_port()
    saved = rt.settings
    _with_model(rt, LLM_BASE_URL=None, LOCAL_LLM_PORT=port, LOCAL_LLM_CONTEXT_TOKENS=4096)
    t0 = time.perf_counter()
    try:
        server = LocalModelServer(rt.settings).start()
    except Exception as exc:
        figure("skipped", f"the bundled model server did not start: {exc}")
        _with_model(rt, LLM_BASE_URL=saved.llm_base_url, LLM_MODEL=saved.llm_model)
        return
    try:
        figure("server start", time.perf_counter() - t0, "s")
        for mode in ("GENERATIVE", "EXTRACTIVE"):  # the bundled model writing, then the quoted answer AUTO gives
            moded = update_settings(rt, topic.name, {"answer_mode": mode})
            first_tokens, totals = [], []
            for item in questions[:TTFT_QUESTIONS]:
                result = _final(ask(rt, moded, item["question"], save=False))
                first_tokens.append(result.timings_ms.get("first_token", result.timings_ms["total"]))
                totals.append(result.timings_ms["total"])
            label = "" if mode == "GENERATIVE" else ", quoted (EXTRACTIVE)"
            figure(f"time to first token{label}, {TTFT_QUESTIONS} questions (median)", _pct(first_tokens, 50), "ms")
            figure(f"whole answer{label} (median)", _pct(totals, 50), "ms")
        for method in ("LLM", "EMBEDDING"):  # the same Topic, routed first by the bundled model, then by embeddings
            routed = update_settings(rt, topic.name, {"route_before_retrieval": True, "router_method": method})
            t0 = time.perf_counter()
            result = _final(ask(rt, routed, SMALL_TALK, save=False))
            took = time.perf_counter() - t0
            figure(
                f"'{SMALL_TALK}' with the {method.lower()} router",
                f"{took:.2f} s, route {result.route} (confidence {result.route_confidence}), "
                f"routing {result.timings_ms.get('route', 0):.1f} ms",
            )
    finally:
        update_settings(rt, topic.name, {"route_before_retrieval": False, "router_method": "AUTO", "answer_mode": "AUTO"})
        server.stop()
        _with_model(rt, LLM_BASE_URL=saved.llm_base_url, LLM_MODEL=saved.llm_model)
