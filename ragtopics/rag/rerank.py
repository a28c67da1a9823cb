"""LLM reranking: one model call orders the retrieved candidates by how well they answer."""

from __future__ import annotations

from pydantic import BaseModel

from ragtopics.errors import ModelUnavailableError
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.tracing.trace import Trace
from ragtopics.storage.chunk_index import ChunkHit

#: Characters of each candidate shown to the reranker.
PASSAGE_PREVIEW_CHARS = 600


class RerankOrder(BaseModel):
    """The reranker's typed reply: 1-based passage numbers, best first."""

    order: list[int]


def rerank(gateway: ModelGateway, template: PromptTemplate, question: str, hits: list[ChunkHit], *, top_k: int,
           trace: Trace) -> list[ChunkHit]:  # fmt: skip
    """Reorder ``hits`` by the model's judgement and keep ``top_k``.

    Numbers the model leaves out follow in retrieval order; unknown or repeated numbers
    are ignored. A reply that cannot be parsed falls back to the retrieval order, and
    the trace says so.
    """
    if len(hits) <= 1:
        return hits[:top_k]
    passages = "\n\n".join(f"[{i}] {h.text[:PASSAGE_PREVIEW_CHARS]}" for i, h in enumerate(hits, start=1))
    messages = [{"role": "user", "content": template.render(question=question, passages=passages)}]
    with trace.step("rerank", candidates=[h.chunk_id for h in hits]) as ev:
        try:
            reply = gateway.structured("language_model", messages, RerankOrder, prompt_name="rerank", trace=trace)
        except ModelUnavailableError as exc:
            ev.data.update(fallback=f"reranker reply unusable, retrieval order kept: {exc}")
            return hits[:top_k]
        picked: list[int] = []
        for n in reply.order:
            if 1 <= n <= len(hits) and n - 1 not in picked:
                picked.append(n - 1)
        picked += [i for i in range(len(hits)) if i not in picked]
        ordered = [hits[i] for i in picked]
        ev.data.update(model_order=reply.order, order=[h.chunk_id for h in ordered[:top_k]])
        return ordered[:top_k]
