"""Reciprocal rank fusion of ranked lists of ids, shared by every search way that fuses lists.

A RAG Topic fuses its dense and keyword chunk lists (:mod:`ragtopics.rag.retrieval`); a GraphRAG Topic
fuses entity lists for its LOCAL seeds and community lists for GLOBAL (:mod:`ragtopics.graph`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: Reciprocal rank fusion constant (Cormack, Clarke & Büttcher, SIGIR 2009: k = 60).
DEFAULT_RRF_K = 60


def reciprocal_rank_fusion(ranked_ids: Mapping[str, Sequence[str]], *, k: int = DEFAULT_RRF_K) -> dict[str, dict]:
    """Merge ranked lists of ids: ``score(d) = Σ_lists 1 / (k + rank_d)``, ranks from 1.

    Source: Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet
    and individual Rank Learning Methods", SIGIR 2009 (k = 60 there). Works on any ids
    (chunks here, entities in a GraphRAG Topic's LOCAL seeds).

    Args:
        ranked_ids: list name → ids, best first; an id repeated within a list counts once, at its first rank.
        k: the fusion constant (>= 1); larger flattens the advantage of top ranks.

    Returns:
        id → ``{<list name>: 1-based rank or None, ..., "rrf": raw fused score}``, best first
        (ties keep first-seen order).
    """
    ranks: dict[str, dict] = {}
    for name, ids in ranked_ids.items():
        for rank, item in enumerate(ids, start=1):
            entry = ranks.setdefault(item, dict.fromkeys(ranked_ids) | {"rrf": 0.0})
            if entry[name] is None:
                entry[name] = rank
                entry["rrf"] += 1.0 / (k + rank)
    return {item: ranks[item] for item in sorted(ranks, key=lambda i: -ranks[i]["rrf"])}
