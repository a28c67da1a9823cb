"""Phase B search and filter: DENSE (vector KNN) or HYBRID (vector + BM25 fused by reciprocal rank fusion).

What the score means:

* DENSE: cosine similarity of chunk and question, in [-1, 1]; Min. Similarity Score
  drops chunks below it.
* HYBRID: Min. Similarity Score filters the *dense* list before fusion (it is a
  similarity threshold; BM25 scores have no fixed scale), while a keyword hit
  qualifies by matching a keyword of the question. Hits are *ordered* by reciprocal
  rank fusion, but each hit's ``score`` is still its cosine similarity to the
  question (computed from the stored embedding for keyword-only hits), so a score
  means the same under both strategies. The fused RRF scores are kept in
  :attr:`Retrieval.fused_ranks` for the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ragtopics.answer.fusion import DEFAULT_RRF_K, reciprocal_rank_fusion
from ragtopics.rag.mentions import Link, follow_mentions_guarded
from ragtopics.storage.chunk_index import ChunkHit, ChunkIndex
from ragtopics.text.keywords import is_searchable, query_keywords

#: Hits taken from each list before fusion under HYBRID (at least; 3 × kept when more).
FUSION_DEPTH = 30


@dataclass(frozen=True, slots=True)
class Retrieval:
    """The outcome of a search, kept whole for the trace.

    Attributes:
        hits: the kept chunks, best first (``score`` as described in the module docstring).
        dense: the vector hits before filtering (cosine similarity).
        keyword: the BM25 hits (empty under DENSE).
        fused_ranks: chunk id → ``{"dense": rank or None, "keyword": rank or None, "rrf": score}``.
        links: the second hops taken through file names (:mod:`ragtopics.rag.mentions`).
    """

    hits: list[ChunkHit]
    dense: list[ChunkHit]
    keyword: list[ChunkHit]
    fused_ranks: dict[str, dict]
    links: list[Link] = field(default_factory=list)


def filter_hits(hits: list[ChunkHit], *, min_score: float, top_k: int) -> list[ChunkHit]:
    """Drop hits scoring below ``min_score``, then keep the ``top_k`` best (order kept)."""
    return [h for h in hits if h.score >= min_score][:top_k]


def fuse_rrf(ranked_lists: dict[str, list[ChunkHit]], *, k: int = DEFAULT_RRF_K) -> tuple[list[ChunkHit], dict[str, dict]]:
    """Merge ranked lists of chunk hits by :func:`reciprocal_rank_fusion`.

    Args:
        ranked_lists: list name → hits, best first.
        k: the fusion constant (>= 1).

    Returns:
        ``(hits, ranks)``: hits ordered by fused score, each ``score`` normalised to
        (0, 1] by the best possible score ``n / (k + 1)``, n = number of non-empty lists; and per chunk
        id its rank in each list and the raw RRF score. Ties keep first-seen order.
    """
    best = max(1, sum(1 for hits in ranked_lists.values() if hits)) / (k + 1)
    ranks = reciprocal_rank_fusion({name: [h.chunk_id for h in hits] for name, hits in ranked_lists.items()}, k=k)
    first: dict[str, ChunkHit] = {}
    for hits in ranked_lists.values():
        for hit in hits:
            first.setdefault(hit.chunk_id, hit)
    return [replace(first[cid], score=round(entry["rrf"] / best, 6)) for cid, entry in ranks.items()], ranks


def retrieve(
    index: ChunkIndex,
    question: str,
    query_vector: np.ndarray,
    *,
    strategy: str,
    top_k: int,
    min_score: float,
    candidates: int,
    rrf_k: int = DEFAULT_RRF_K,
    mentions: bool = False,
) -> Retrieval:
    """Search a Topic's chunks and keep the best ``candidates``.

    Args:
        index: the Topic's chunk index.
        question: the question text (for keyword search).
        query_vector: shape ``(dims,)``, unit norm.
        strategy: ``"DENSE"`` or ``"HYBRID"``.
        top_k: Top-K Results.
        min_score: Min. Similarity Score (cosine).
        candidates: how many hits to keep (Top-K, or 3 × Top-K before a rerank).
        rrf_k: reciprocal rank fusion constant.
        mentions: follow file names named by the first hits (Follow File Mentions,
            :func:`~ragtopics.rag.mentions.follow_mentions`).

    Returns:
        The retrieval; no hits at all for a question without a letter or digit
        (see ``ragtopics.text.keywords.is_searchable``), so the no-answer path answers.
    """
    if not is_searchable(question):
        return Retrieval([], [], [], {})
    # Fusion needs each list deeper than what is kept, or a chunk ranked well by one
    # search but just outside the other's cut-off loses its second vote.
    depth = max(candidates, top_k) if strategy != "HYBRID" else max(FUSION_DEPTH, 3 * candidates)
    dense = index.search_vector(query_vector, depth)
    passed = [h for h in dense if h.score >= min_score]
    if strategy != "HYBRID":
        kept, links = follow_mentions_guarded(index, passed, query_vector) if mentions else (passed, [])
        return Retrieval(kept[:candidates], dense, [], {}, links)
    keyword = index.search_keywords(query_keywords(question), depth)
    fused, ranks = fuse_rrf({"dense": passed, "keyword": keyword}, k=rrf_k)
    normalised = {h.chunk_id: h.score for h in fused}
    for cid, entry in ranks.items():
        entry["rrf_normalised"] = normalised.get(cid)
    pool = fused[: max(candidates, depth)] if mentions else fused[:candidates]
    cosine = {h.chunk_id: h.score for h in dense}
    missing = [h.chunk_id for h in pool if h.chunk_id not in cosine]
    for cid, vector in index.embeddings(missing).items():
        cosine[cid] = float(np.dot(vector, query_vector))
    # A hit's score is its cosine similarity under both strategies (see the module docstring).
    pool = [replace(h, score=round(cosine.get(h.chunk_id, 0.0), 6)) for h in pool]
    kept, links = follow_mentions_guarded(index, pool, query_vector) if mentions else (pool, [])
    return Retrieval(kept[:candidates], dense, keyword, ranks, links)
