"""Phase B search and filter: dense retrieval, Min. Similarity Score, Top-K."""

from __future__ import annotations

import numpy as np

from storage.chunk_index import ChunkHit, ChunkIndex


def retrieve_dense(index: ChunkIndex, query_vector: np.ndarray, *, k: int) -> list[ChunkHit]:
    """Vector KNN over a Topic's chunks.

    Args:
        index: the Topic's chunk index.
        query_vector: shape ``(dims,)``, unit norm.
        k: how many neighbours to fetch.

    Returns:
        Up to ``k`` hits, best first; ``score`` is cosine similarity.
    """
    return index.search_vector(query_vector, k)


def filter_hits(hits: list[ChunkHit], *, min_score: float, top_k: int) -> list[ChunkHit]:
    """Drop hits scoring below ``min_score``, then keep the ``top_k`` best (order kept).

    Under DENSE the score is cosine similarity in [-1, 1].
    """
    return [h for h in hits if h.score >= min_score][:top_k]
