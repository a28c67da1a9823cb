"""The community summaries of a GraphRAG Topic in RediSearch, declared once and used through redisvl.

Each community report is a Redis hash under ``rt:{topic_id}:community:{community_id}``
holding its title, summary, member entity ids, content hash, how it was written
(``model`` or ``graph``), the key entities and relationships and, for a report built from the
graph, the chunk each summary sentence is cited to (stored, not indexed) and a
float32 embedding of title and summary. The index serves vector KNN (cosine) and BM25
full-text search over title and summary; GLOBAL search reads it.

Community membership lives here (the ``entity_ids`` tag field), not in the graph: the
graph store has no Community nodes yet. A tag query ``@entity_ids:{ent-…}`` finds the
communities of an entity.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field

import numpy as np
import redis
from redis.commands.search.query import Query
from redisvl.index import SearchIndex
from redisvl.query import VectorQuery

from ragtopics.errors import EmbeddingMismatchError
from ragtopics.storage.chunk_index import union_terms

log = logging.getLogger(__name__)

_SCAN_COUNT = 1000
_RETURN_FIELDS = [
    "community_id",
    "title",
    "summary",
    "entity_ids",
    "content_hash",
    "method",
    "key_entities",
    "key_relationships",
    "sources",
]
#: RediSearch's scorer for :meth:`CommunityIndex.search_text`: Okapi BM25 as Robertson & Zaragoza write it.
TEXT_SCORER = "BM25STD"


@dataclass(frozen=True, slots=True)
class CommunityRecord:
    """A community report as it is written to the index.

    Attributes:
        community_id: ``community-<hex>`` (a hash of the sorted member ids).
        title: short name of the community.
        summary: what connects its members (what GLOBAL search reads).
        entity_ids: ids of every member entity (membership), sorted.
        content_hash: hash of the members' and internal relationships' content when it was written.
        embedding: shape ``(dims,)`` float32, L2-normalised, of title and summary.
        key_entities: names of the most connected members, strongest first.
        key_relationships: ``"A - B: description"`` of the strongest internal relationships.
        method: ``"model"`` (the Community Report model wrote title and summary) or ``"graph"``.
        sources: ``(sentence, chunk id)`` of each summary sentence taken from the documents, in order (stored,
            not indexed); empty for a model's summary.
    """

    community_id: str
    title: str
    summary: str
    entity_ids: tuple[str, ...]
    content_hash: str
    embedding: np.ndarray = field(repr=False)
    key_entities: tuple[str, ...] = ()
    key_relationships: tuple[str, ...] = ()
    method: str = "graph"
    sources: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CommunityHit:
    """A community report returned by a search.

    Attributes:
        community_id, title, summary, entity_ids, content_hash, key_entities, key_relationships, method: as stored.
        score: cosine similarity in [-1, 1] for vector search; BM25 score (> 0) for text search.
        sources: summary sentence → the chunk id it is cited to, in the summary's order (empty when none stored).
    """

    community_id: str
    title: str
    summary: str
    entity_ids: tuple[str, ...]
    content_hash: str
    key_entities: tuple[str, ...]
    key_relationships: tuple[str, ...]
    method: str
    score: float
    sources: dict[str, str] = field(default_factory=dict)


class CommunityIndex:
    """The RediSearch index of one Topic's community reports.

    Like the chunk index it records the embedding model and dimension it was built with
    (a hash at ``rt:{topic_id}:index:communities``, outside the indexed prefix). Reports are
    derived data, so :meth:`ensure` rebuilds an index made for another embedder (the next
    rebuild writes every report again) instead of refusing, and :meth:`search_vector`
    refuses a vector from another embedder.

    Args:
        client: a redis-py client (any ``decode_responses``).
        topic_id: the Topic's id; it names the index and the key prefix.
        dims: embedding dimension of the configured embedder.
        embedding_model: name of the configured embedding model ("" when unknown: not checked).
    """

    def __init__(self, client: redis.Redis, topic_id: str, dims: int, embedding_model: str = ""):
        self.client = client
        self.topic_id = topic_id
        self.dims = dims
        self.embedding_model = embedding_model
        self.prefix = f"rt:{topic_id}:community"
        self.record_key = f"rt:{topic_id}:index:communities"
        self.index = SearchIndex.from_dict(self.schema(topic_id, dims), redis_client=client)

    @staticmethod
    def schema(topic_id: str, dims: int) -> dict:
        """The redisvl schema of a Topic's community index (one place, used for create and query)."""
        return {
            "index": {"name": f"rt-{topic_id}-communities", "prefix": f"rt:{topic_id}:community:", "storage_type": "hash"},
            "fields": [
                {"name": "community_id", "type": "tag"},
                {"name": "title", "type": "text", "attrs": {"weight": 2.0}},
                {"name": "summary", "type": "text"},
                {"name": "entity_ids", "type": "tag", "attrs": {"separator": ","}},
                {"name": "content_hash", "type": "tag"},
                {"name": "method", "type": "tag"},
                {
                    "name": "embedding",
                    "type": "vector",
                    "attrs": {"dims": dims, "distance_metric": "cosine", "algorithm": "hnsw", "datatype": "float32"},
                },
            ],
        }

    def key(self, community_id: str) -> str:
        """Redis key of a community report."""
        return f"{self.prefix}:{community_id}"

    def ensure(self) -> None:
        """Create the index unless it exists (idempotent), recording the embedder it is built for.

        An index built for another embedding model or dimension is dropped with its
        reports first (they are rewritten by the next rebuild).
        """
        if self.index.exists():
            if self._built_for_this_embedder():
                return
            log.warning("community index %s was built for another embedder; dropping its reports", self.index.name)
            self.drop()
        self.index.create(overwrite=False)
        self.client.hset(self.record_key, mapping={"embedding_model": self.embedding_model, "dims": self.dims})
        log.info("created community index %s (%s, %d dims)", self.index.name, self.embedding_model or "model unknown", self.dims)

    def _built_for_this_embedder(self) -> bool:
        record = {_decode(k): _decode(v) for k, v in self.client.hgetall(self.record_key).items()}
        model, dims = record.get("embedding_model", ""), int(record.get("dims", 0) or 0)
        return dims == self.dims and (not self.embedding_model or model in ("", self.embedding_model))

    def put(self, records: list[CommunityRecord], *, delete_ids: list[str] | tuple[str, ...] = ()) -> None:
        """Write reports and delete others in one transaction (a reader sees all of it or none of it).

        Args:
            records: reports to write; one with a stored id replaces it.
            delete_ids: community ids whose reports are removed (unknown ids are ignored).

        Raises:
            ValueError: when an embedding does not have ``dims`` float32 values.
        """
        mappings = [self._mapping(r) for r in records]  # checked before anything is sent
        self.ensure()
        pipe = self.client.pipeline(transaction=True)
        for record, mapping in zip(records, mappings):
            pipe.delete(self.key(record.community_id))  # no stale field survives a rewrite
            pipe.hset(self.key(record.community_id), mapping=mapping)  # type: ignore[arg-type]  # redis-py's Mapping key is invariant
        if delete_ids:
            pipe.delete(*(self.key(cid) for cid in delete_ids))
        pipe.execute()

    def delete(self, community_ids: list[str] | tuple[str, ...]) -> int:
        """Remove reports by community id; returns how many existed."""
        if not community_ids:
            return 0
        return int(self.client.delete(*(self.key(cid) for cid in community_ids)))

    def _mapping(self, record: CommunityRecord) -> dict[str, str | bytes]:
        vector = np.asarray(record.embedding, dtype=np.float32)
        if vector.shape != (self.dims,):
            raise ValueError(f"embedding of {record.community_id} has shape {vector.shape}, index expects ({self.dims},)")
        return {
            "community_id": record.community_id,
            "title": record.title,
            "summary": record.summary,
            "entity_ids": ",".join(record.entity_ids),
            "content_hash": record.content_hash,
            "method": record.method,
            "key_entities": json.dumps(list(record.key_entities)),
            "key_relationships": json.dumps(list(record.key_relationships)),
            "sources": json.dumps([list(pair) for pair in record.sources]),
            "embedding": vector.tobytes(),
        }

    def get_hashes(self) -> dict[str, tuple[str, str]]:
        """What every stored report was written from: community id → ``(content_hash, method)``.

        Read by SCAN over the key prefix (not the index), so it also works while no index exists.
        """
        keys = list(self.client.scan_iter(match=f"{self.prefix}:*", count=_SCAN_COUNT))
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, ["community_id", "content_hash", "method"])
        found: dict[str, tuple[str, str]] = {}
        for cid, content_hash, method in pipe.execute() if keys else []:
            if cid is not None:
                found[_decode(cid)] = (_decode(content_hash or b""), _decode(method or b""))
        return found

    def get(self, community_ids: list[str]) -> list[CommunityHit]:
        """The stored reports with these ids, in the order asked (unknown ids left out; score 0)."""
        pipe = self.client.pipeline(transaction=False)
        for cid in community_ids:
            pipe.hmget(self.key(cid), _RETURN_FIELDS)
        rows = pipe.execute() if community_ids else []
        return [_hit(dict(zip(_RETURN_FIELDS, (_decode(v) for v in row))), 0.0) for row in rows if row[0] is not None]

    def memberships(self) -> dict[str, tuple[str, ...]]:
        """Every stored report's members: community id → member entity ids, largest community first (ties by id).

        Reads every report's member list (SCAN over the key prefix and one pipelined read: a few thousand reports
        for a graph of 10,000 entities), not the reports themselves.
        """
        keys = list(self.client.scan_iter(match=f"{self.prefix}:*", count=_SCAN_COUNT))
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, ["community_id", "entity_ids"])
        found = {
            _decode(cid): tuple(e for e in _decode(ids or b"").split(",") if e)
            for cid, ids in (pipe.execute() if keys else [])
            if cid is not None
        }
        return dict(sorted(found.items(), key=lambda item: (-len(item[1]), item[0])))

    def largest(self, k: int) -> list[CommunityHit]:
        """The ``k`` reports of the communities with the most entities, largest first (ties by id); score 0.

        Reads every report's member list (:meth:`memberships`), then the ``k`` reports.
        """
        return self.get(list(self.memberships())[: max(k, 0)])

    def search_vector(self, vector: np.ndarray, k: int) -> list[CommunityHit]:
        """The ``k`` reports nearest to ``vector`` by cosine similarity, best first.

        Args:
            vector: shape ``(dims,)``.
            k: number of neighbours (>= 1).

        Raises:
            EmbeddingMismatchError: when the index was built for another embedder.
        """
        if not self.index.exists():
            return []
        if not self._built_for_this_embedder():
            raise EmbeddingMismatchError(
                f"the community summaries of Topic {self.topic_id} were embedded by another embedding model than "
                f"{self.embedding_model} ({self.dims} dims): run Recompute Communities Now"
            )
        query = VectorQuery(
            vector=np.asarray(vector, dtype=np.float32).tobytes(),
            vector_field_name="embedding",
            return_fields=_RETURN_FIELDS,
            num_results=k,
        )
        # RediSearch's COSINE metric returns a distance: 1 - cosine similarity.
        return [_hit(row, 1.0 - float(row["vector_distance"])) for row in self.index.query(query)]

    def search_text(self, terms: list[str], k: int) -> list[CommunityHit]:
        """BM25 search over title (weight 2) and summary: reports holding any of ``terms``, best first.

        Terms are cut into words as RediSearch cuts text (``E-4711`` is ``e`` and ``4711``);
        RediSearch stems them and drops its English stop words, so a query of stop words
        alone finds nothing.

        Args:
            terms: words or codes (empty gives ``[]``).
            k: how many hits to return.

        Returns:
            Up to ``k`` hits; ``score`` is RediSearch's :data:`TEXT_SCORER` score.
        """
        words = union_terms(w for t in terms for w in re.findall(r"\w+", t))  # as RediSearch tokenises
        escaped = [_escape_term(w) for w in words]
        if not escaped or not self.index.exists():
            return []
        query = (
            Query(f"@title|summary:({'|'.join(escaped)})")
            .scorer(TEXT_SCORER)
            .with_scores()
            .paging(0, k)
            .return_fields(*_RETURN_FIELDS)
            .dialect(2)
        )
        docs = self.client.ft(self.index.name).search(query).docs
        return [_hit({f: _decode(getattr(doc, f, "")) for f in _RETURN_FIELDS}, float(doc.score)) for doc in docs]

    def communities_of(self, entity_id: str, k: int = 20) -> list[CommunityHit]:
        """The reports whose community holds ``entity_id`` (a tag query on ``entity_ids``); score 0.

        Returns ``[]`` before the first rebuild (no index yet).
        """
        if not self.index.exists():
            return []
        query = Query(f"@entity_ids:{{{_escape_tag(entity_id)}}}").paging(0, k).return_fields(*_RETURN_FIELDS).dialect(2)
        docs = self.client.ft(self.index.name).search(query).docs
        return [_hit({f: _decode(getattr(doc, f, "")) for f in _RETURN_FIELDS}, 0.0) for doc in docs]

    def count(self) -> int:
        """Number of stored reports (0 when the index does not exist)."""
        if not self.index.exists():
            return 0
        return int(self.index.info()["num_docs"])

    def drop(self) -> None:
        """Delete the index, every report of the Topic and the record of the embedder it was built with."""
        if self.index.exists():
            self.index.delete(drop=True)
        leftovers = list(self.client.scan_iter(match=f"{self.prefix}:*", count=_SCAN_COUNT))
        if leftovers:
            self.client.delete(*leftovers)
        self.client.delete(self.record_key)


def _hit(row: dict, score: float) -> CommunityHit:
    return CommunityHit(
        community_id=row["community_id"],
        title=row.get("title", "") or "",
        summary=row.get("summary", "") or "",
        entity_ids=tuple(i for i in (row.get("entity_ids", "") or "").split(",") if i),
        content_hash=row.get("content_hash", "") or "",
        key_entities=tuple(json.loads(row.get("key_entities") or "[]")),
        key_relationships=tuple(json.loads(row.get("key_relationships") or "[]")),
        method=row.get("method", "") or "",
        score=score,
        sources={str(pair[0]): str(pair[1]) for pair in json.loads(row.get("sources") or "[]")},
    )


def _decode(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _escape_term(term: str) -> str:
    """Escape a term for a RediSearch query (every non-alphanumeric character)."""
    return "".join(ch if ch.isalnum() else f"\\{ch}" for ch in term)


def _escape_tag(value: str) -> str:
    """A tag value with RediSearch's punctuation escaped (``ent-1a`` → ``ent\\-1a``)."""
    return re.sub(r"([^\w])", r"\\\1", value)
