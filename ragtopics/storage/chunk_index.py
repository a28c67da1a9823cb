"""The per-Topic chunk index in RediSearch, declared once and used through redisvl.

Each chunk is a Redis hash under ``rt:{topic_id}:chunk:{chunk_id}`` holding its
text, keywords, document id, file name, offsets, the ids of its pictures (stored,
not indexed) and a float32 embedding. The index
serves vector KNN (cosine) and BM25 full-text search over text and keywords.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import redis
from redis.commands.search.query import Query
from redisvl.index import SearchIndex
from redisvl.query import FilterQuery, VectorQuery
from redisvl.query.filter import Tag

log = logging.getLogger(__name__)

_PAGE = 1000


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A chunk as it is written to the index.

    Attributes:
        chunk_id: content-hash id, ``chunk-<hex>``.
        document_id: the document the chunk belongs to.
        file_name: the document's file name, shown as the source.
        position: 0-based order of the chunk within its document.
        text: the chunk text (what the model reads).
        embedding: shape ``(dim,)`` float32, L2-normalised.
        start, end: character offsets in the document's text.
        keywords: space-separated keywords for BM25 ("" when none were written).
        context: a context line stored with the chunk ("" when none).
        pictures: space-separated ids of the pictures linked to the chunk ("" when none).
    """

    chunk_id: str
    document_id: str
    file_name: str
    position: int
    text: str
    embedding: np.ndarray = field(repr=False)
    start: int = 0
    end: int = 0
    keywords: str = ""
    context: str = ""
    pictures: str = ""


@dataclass(frozen=True, slots=True)
class ChunkHit:
    """A chunk returned by a search.

    Attributes:
        chunk_id, document_id, file_name, position, text, context, pictures: as stored.
        score: cosine similarity in [-1, 1] for vector search; BM25 score for keyword search.
    """

    chunk_id: str
    document_id: str
    file_name: str
    position: int
    text: str
    score: float
    context: str = ""
    pictures: str = ""


_RETURN_FIELDS = ["chunk_id", "document_id", "file_name", "position", "text", "context", "pictures"]


class ChunkIndex:
    """The RediSearch chunk index of one Topic.

    Args:
        client: a redis-py client (``decode_responses=False``).
        topic_id: the Topic's id; it names the index and the key prefix.
        dims: embedding dimension.
    """

    def __init__(self, client: redis.Redis, topic_id: str, dims: int):
        self.client = client
        self.topic_id = topic_id
        self.dims = dims
        self.prefix = f"rt:{topic_id}:chunk"
        self.index = SearchIndex.from_dict(self.schema(topic_id, dims), redis_client=client)

    @staticmethod
    def schema(topic_id: str, dims: int) -> dict:
        """The redisvl schema of a Topic's chunk index (one place, used for create and query)."""
        return {
            "index": {"name": f"rt-{topic_id}-chunks", "prefix": f"rt:{topic_id}:chunk", "storage_type": "hash"},
            "fields": [
                {"name": "chunk_id", "type": "tag"},
                {"name": "document_id", "type": "tag"},
                {"name": "text", "type": "text"},
                {"name": "keywords", "type": "text"},
                {"name": "position", "type": "numeric", "attrs": {"sortable": True}},
                {
                    "name": "embedding",
                    "type": "vector",
                    "attrs": {"dims": dims, "distance_metric": "cosine", "algorithm": "hnsw", "datatype": "float32"},
                },
            ],
        }

    def ensure(self) -> None:
        """Create the index if it does not exist yet (idempotent)."""
        if not self.index.exists():
            self.index.create(overwrite=False)
            log.info("created chunk index %s (%d dims)", self.index.name, self.dims)

    def key(self, chunk_id: str) -> str:
        """Redis key of a chunk."""
        return f"{self.prefix}:{chunk_id}"

    def document_chunk_ids(self, document_id: str) -> list[str]:
        """Ids of every chunk stored for ``document_id``, in document order."""
        if not self.index.exists():
            return []
        ids: list[str] = []
        offset = 0
        while True:
            query = FilterQuery(
                filter_expression=Tag("document_id") == document_id,
                return_fields=["chunk_id", "position"],
                num_results=_PAGE,
                sort_by="position",
            )
            query.paging(offset, _PAGE)
            page = self.index.query(query)
            ids.extend(row["chunk_id"] for row in page)
            if len(page) < _PAGE:
                return ids
            offset += _PAGE

    def replace_document(self, document_id: str, chunks: list[ChunkRecord]) -> int:
        """Swap a document's chunks for ``chunks`` in one transaction.

        The new chunks and the removal of the old ones are sent in a single
        MULTI/EXEC, so a reader sees the old version or the new one, never a mix.

        Returns:
            The number of old chunks removed.

        Raises:
            ValueError: when an embedding does not have ``dims`` float32 values.
        """
        self.ensure()
        old = set(self.document_chunk_ids(document_id))
        new_ids = {c.chunk_id for c in chunks}
        pipe = self.client.pipeline(transaction=True)
        for chunk in chunks:
            pipe.hset(self.key(chunk.chunk_id), mapping=self._mapping(chunk))
        stale = [self.key(cid) for cid in old - new_ids]
        if stale:
            pipe.delete(*stale)
        pipe.execute()
        return len(stale)

    def delete_document(self, document_id: str) -> int:
        """Remove every chunk of a document; returns how many were removed."""
        return self.replace_document(document_id, [])

    def _mapping(self, chunk: ChunkRecord) -> dict[str, str | bytes | int]:
        vector = np.asarray(chunk.embedding, dtype=np.float32)
        if vector.shape != (self.dims,):
            raise ValueError(f"embedding of {chunk.chunk_id} has shape {vector.shape}, index expects ({self.dims},)")
        return {
            "chunk_id": chunk.chunk_id,
            "document_id": chunk.document_id,
            "file_name": chunk.file_name,
            "position": chunk.position,
            "text": chunk.text,
            "context": chunk.context,
            "keywords": chunk.keywords,
            "pictures": chunk.pictures,
            "start": chunk.start,
            "end": chunk.end,
            "embedding": vector.tobytes(),
        }

    def search_vector(self, vector: np.ndarray, k: int) -> list[ChunkHit]:
        """Return the ``k`` chunks nearest to ``vector`` by cosine similarity, best first.

        Args:
            vector: shape ``(dims,)``.
            k: number of neighbours (>= 1).
        """
        if not self.index.exists():
            return []
        query = VectorQuery(
            vector=np.asarray(vector, dtype=np.float32).tobytes(),
            vector_field_name="embedding",
            return_fields=_RETURN_FIELDS,
            num_results=k,
        )
        rows = self.index.query(query)
        # RediSearch's COSINE metric returns a distance: 1 - cosine similarity.
        return [_hit(row, 1.0 - float(row["vector_distance"])) for row in rows]

    def search_keywords(self, terms: list[str], k: int) -> list[ChunkHit]:
        """BM25 search of the keyword index: chunks whose keywords match any of ``terms``.

        Only chunks written with keywords (uploaded under HYBRID) can match.

        Args:
            terms: normalised keywords (see ``ragtopics.ingest.keywords``); empty gives ``[]``.
            k: how many hits to return.

        Returns:
            Up to ``k`` hits, best first; ``score`` is the BM25 score (> 0).
        """
        terms = [t for t in terms if t]
        if not terms or not self.index.exists():
            return []
        query = (
            Query(f"@keywords:({'|'.join(_escape_term(t) for t in terms)})")
            .scorer("BM25")
            .with_scores()
            .paging(0, k)
            .return_fields(*_RETURN_FIELDS)
            .dialect(2)
        )
        result = self.client.ft(self.index.name).search(query)
        return [_hit({f: _decode(getattr(doc, f, "")) for f in _RETURN_FIELDS}, float(doc.score)) for doc in result.docs]

    def embeddings(self, chunk_ids: list[str]) -> dict[str, np.ndarray]:
        """Stored embeddings of the given chunks (missing ids are left out)."""
        pipe = self.client.pipeline(transaction=False)
        for cid in chunk_ids:
            pipe.hget(self.key(cid), "embedding")
        return {cid: np.frombuffer(raw, dtype=np.float32) for cid, raw in zip(chunk_ids, pipe.execute()) if raw}

    def count(self) -> int:
        """Number of chunks in the index (0 when it does not exist)."""
        if not self.index.exists():
            return 0
        return int(self.index.info()["num_docs"])

    def drop(self) -> None:
        """Delete the index and every chunk of the Topic."""
        if self.index.exists():
            self.index.delete(drop=True)


def _hit(row: dict, score: float) -> ChunkHit:
    return ChunkHit(
        chunk_id=row["chunk_id"],
        document_id=row["document_id"],
        file_name=row["file_name"],
        position=int(row["position"]),
        text=row["text"],
        context=row.get("context", ""),
        pictures=row.get("pictures", "") or "",
        score=score,
    )


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _escape_term(term: str) -> str:
    """Escape a keyword for a RediSearch query (every non-alphanumeric character)."""
    return "".join(ch if ch.isalnum() else f"\\{ch}" for ch in term)
