"""A RAG Topic's SEARCH way: dense or hybrid retrieval, the Min. Similarity Score / Top-K
filter and an optional LLM rerank, returned as :class:`~ragtopics.answer.context.Context`."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from ragtopics.answer.context import Context, RetrievalQuery, chunk_evidence
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.rag.rerank import rerank
from ragtopics.rag.retrieval import retrieve
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import RagTopicSettings
from ragtopics.storage.chunk_index import ChunkHit
from ragtopics.text.keywords import is_searchable
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: Candidates collected per kept chunk before an LLM rerank (the spec: "about three times as many").
RERANK_POOL_FACTOR = 3


@dataclass(slots=True)
class ChunkRetriever:
    """SEARCH over a Topic's chunk index (DENSE or HYBRID, per the Topic's settings).

    A follow-up that names nothing searchable ("and how long must I wait?") finds no
    chunk alone; only then is it searched again together with the previous question.
    Scores are cosine similarities under both strategies (see :mod:`ragtopics.rag.retrieval`).

    Args:
        rt: the runtime (embedder and chunk index).
        topic_id: the Topic searched.
        settings: the Topic's settings (strategy, Top-K, Min. Similarity Score, rerank, rrf_k).
        rerank_prompt: the reranker's prompt (used with Reranking Strategy LLM).
    """

    rt: Runtime
    topic_id: str
    settings: RagTopicSettings
    rerank_prompt: PromptTemplate
    route: str = "SEARCH"

    def retrieve(self, query: RetrievalQuery, trace: Trace) -> Context:
        """Search, filter and (optionally) rerank; see :class:`~ragtopics.answer.context.Retriever`."""
        cfg = self.settings
        if not is_searchable(query.question):  # "?!" names nothing; searching it with the previous question would invent a match
            trace.add("retrieve", query=query.question, skipped="the question holds no letter or digit")
            return Context((), self.route, "the question has nothing that can be searched")
        rerank_llm = cfg.reranking_strategy == "LLM"
        candidates = cfg.top_k_results * (RERANK_POOL_FACTOR if rerank_llm else 1)
        queries = [query.question] + ([f"{query.previous_question}\n{query.question}"] if query.previous_question else [])
        hits: list[ChunkHit] = []
        for text in queries:
            hits = self._search(text, candidates, trace)
            if hits:
                break
        how = ""
        if rerank_llm and hits:
            hits, how = rerank(self.rt.gateway, self.rerank_prompt, query.question, hits, top_k=cfg.top_k_results, trace=trace)
        hits = hits[: cfg.top_k_results]
        note = "" if hits else "no chunk passed Min. Similarity Score"
        return Context(tuple(chunk_evidence(h) for h in hits), self.route, note, rerank=how)

    def _search(self, text: str, candidates: int, trace: Trace) -> list[ChunkHit]:
        cfg = self.settings
        with trace.step(
            "retrieve",
            query=text,
            strategy=cfg.retrieval_strategy,
            top_k=cfg.top_k_results,
            min_score=cfg.min_similarity_score,
            candidates=candidates,
        ) as ev:
            with trace.step("embed_question"):
                vector = self.rt.gateway.embed([text], trace=trace, purpose="question")[0]
            with trace.step("search"):
                found = retrieve(
                    self.rt.chunk_index(self.topic_id),
                    text,
                    vector,
                    strategy=cfg.retrieval_strategy,
                    top_k=cfg.top_k_results,
                    min_score=cfg.min_similarity_score,
                    candidates=candidates,
                    rrf_k=cfg.rrf_k,
                    mentions=cfg.follow_file_mentions,
                )
            ev.data.update(
                dense=[_hit_summary(h) for h in found.dense],
                keyword=[_hit_summary(h) for h in found.keyword],
                fused_ranks=found.fused_ranks,
                kept=[_hit_summary(h) for h in found.hits],
                links=[asdict(link) for link in found.links],
            )
        return found.hits


def _hit_summary(h: ChunkHit) -> dict:
    return {"chunk_id": h.chunk_id, "file": h.file_name, "score": round(h.score, 4), "text": h.text[:300], "pages": list(h.pages)}
