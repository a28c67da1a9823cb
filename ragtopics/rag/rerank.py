"""LLM reranking: one model call orders the retrieved candidates by how well they answer.

Reranking needs judgement. The bundled language model (135M parameters) has none, and the
bundled embedding model adds nothing to its own first-stage order: scoring each candidate by
its sentence closest to the question lost recall on HotpotQA (recall@5 0.785 → 0.760 over the
dense top 30; half cosine, half best sentence: 0.785, unchanged). So while the Language Model
role is the bundled model, the retrieval order is kept and the answer says so; a configured
endpoint makes the model call.
"""

from __future__ import annotations

from pydantic import BaseModel

from ragtopics.errors import ModelUnavailableError
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.storage.chunk_index import ChunkHit
from ragtopics.tracing.trace import Trace

#: Characters of each candidate shown to the reranker.
PASSAGE_PREVIEW_CHARS = 600
#: How the answer describes each outcome of a rerank.
RERANKED = "reranked by the Language Model"
KEPT_BUNDLED = "retrieval order kept: the bundled model cannot rerank (set LLM_BASE_URL for one that can)"
KEPT_FAILED = "retrieval order kept: the reranker's reply was unusable"


class RerankOrder(BaseModel):
    """The reranker's typed reply: 1-based passage numbers, best first."""

    order: list[int]


def rerank(
    gateway: ModelGateway, template: PromptTemplate, question: str, hits: list[ChunkHit], *, top_k: int, trace: Trace
) -> tuple[list[ChunkHit], str]:
    """Reorder ``hits`` by the model's judgement and keep ``top_k``.

    Numbers the model leaves out follow in retrieval order; unknown or repeated numbers
    are ignored. A reply that cannot be parsed falls back to the retrieval order, and
    the trace says so. While the Language Model role is the bundled model no call is made
    (see the module docstring).

    Returns:
        ``(hits, how)``: at most ``top_k`` hits, best first, and how they were ordered in words
        (:data:`RERANKED`, :data:`KEPT_BUNDLED` or :data:`KEPT_FAILED`; "" for one hit or none: no call).
    """
    if gateway.endpoint("language_model", trace).is_local:  # the Topic's LLM override counts
        trace.add("rerank", candidates=[h.chunk_id for h in hits], skipped=KEPT_BUNDLED)
        return hits[:top_k], KEPT_BUNDLED
    if len(hits) <= 1:
        return hits[:top_k], ""  # nothing to order, no call made
    passages = "\n\n".join(f"[{i}] {h.text[:PASSAGE_PREVIEW_CHARS]}" for i, h in enumerate(hits, start=1))
    messages = [{"role": "user", "content": template.render(question=question, passages=passages)}]
    with trace.step("rerank", candidates=[h.chunk_id for h in hits]) as ev:
        try:
            reply = gateway.structured("language_model", messages, RerankOrder, prompt_name="rerank", trace=trace)
        except ModelUnavailableError as exc:
            ev.data.update(fallback=f"reranker reply unusable, retrieval order kept: {exc}")
            return hits[:top_k], KEPT_FAILED
        picked: list[int] = []
        for n in reply.order:
            if 1 <= n <= len(hits) and n - 1 not in picked:
                picked.append(n - 1)
        picked += [i for i in range(len(hits)) if i not in picked]
        ordered = [hits[i] for i in picked]
        ev.data.update(model_order=reply.order, order=[h.chunk_id for h in ordered[:top_k]])
        return ordered[:top_k], RERANKED
