"""Entity embeddings of a GraphRAG Topic, kept on the Entity nodes and searched with FalkorDB's vector index.

Why FalkorDB's index and not a redisvl (RediSearch) index like the chunk index: both
were measured on the embedded server (FalkorDB 4.16.3, RediSearch 2.10, HNSW, M 16,
efConstruction 200, KNN-10, 100 queries, recall against exact brute force):

=================================================  =========  ==========  ============  ======
data                                               ef runtime  FalkorDB    redisvl       recall
=================================================  =========  ==========  ============  ======
10,000 random 384-dim unit vectors                 10          0.74 ms     0.41 ms       0.12 / 0.12
same                                               100         1.11 ms     0.82 ms       0.57 / 0.55
same                                               400         1.53 ms     1.24 ms       0.93 / 0.94
5,131 MiniLM embeddings of HotpotQA titles and     10          0.80 ms     0.44 ms       0.94 / 0.93
sentences, queried by the 100 HotpotQA questions   100         0.89 ms     1.41 ms       0.999 / 0.999
=================================================  =========  ==========  ============  ======

(median latency per query over one client round trip; loading 10k vectors took 8-12 s
into FalkorDB, whose parameters travel as text, and 5-7 s into redisvl.)

Latency and recall are the same within the noise of a shared machine; random vectors are
the worst case for HNSW (every point nearly equidistant), real embeddings reach 0.999 at
ef runtime 100. The difference that decides is consistency: with the vector a property of
the Entity node, the query that deletes an entity no longer supported by any chunk also
removes its vector (no second store to keep in step, no orphan vectors after a document
delete), and a search returns the entity's current properties in the same query. So the
graph holds the vectors, with ``efRuntime`` 100.

FalkorDB's vector ``score`` is a cosine *distance* (``1 - cos``), converted here to a
cosine similarity. A vector of another dimension than the index's is stored but silently
not indexed by FalkorDB, so dimensions are checked before writing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
from falkordb import Graph
from redis.exceptions import ResponseError

from ragtopics.errors import EmbeddingMismatchError

log = logging.getLogger(__name__)

#: HNSW search breadth: recall 0.999 on real MiniLM embeddings at ~1 ms (see the module docstring).
EF_RUNTIME = 100
_WRITE_BATCH = 500

# Vectors live on EntityVector nodes ({id, embedding}) that are created and deleted, never updated: FalkorDB (graph
# module 4.16.3) drops a node from its vector index when any property of the node is set, and the node does not come
# back when its vector is removed and set again (measured: of five indexed Entity nodes, each one whose description
# was set was no longer found, before and after its vector was set anew). Entities are updated by every upload that
# mentions them; their vectors, made of their names, never change.
_DELETE = "UNWIND $ids AS i MATCH (v:EntityVector {id: i}) DELETE v RETURN count(v)"
_CREATE = """
UNWIND $rows AS row
MATCH (e:Entity {id: row.id})
CREATE (:EntityVector {id: row.id, embedding: vecf32(row.vector)})
RETURN count(e)
"""
_INDEXES = "CALL db.indexes() YIELD label, types, options RETURN label, types, options"
_HAVE_VECTOR = "UNWIND $ids AS i MATCH (v:EntityVector {id: i}) RETURN v.id"
_ANY_VECTOR = "MATCH (v:EntityVector) RETURN v.id LIMIT 1"
_CLEAR = "MATCH (v:EntityVector) WITH v LIMIT 10000 DELETE v RETURN count(v)"
#: Vectors kept on Entity nodes by earlier versions (see :meth:`EntityVectorIndex.drop_legacy`).
_LEGACY = "MATCH (e:Entity) WHERE e.embedding IS NOT NULL WITH e LIMIT 10000 REMOVE e.embedding RETURN count(e)"

_SEARCH = """
CALL db.idx.vector.queryNodes('EntityVector', 'embedding', $k, vecf32($vector)) YIELD node, score
RETURN node.id, score
"""


class EntityVectorIndex:
    """The vector index of one Topic graph's entities: ``EntityVector {id, embedding}`` nodes (cosine, HNSW).

    An entity's vector sits on a node of its own with the entity's id (see ``_DELETE`` above for why);
    :meth:`delete` removes the vectors of deleted entities, and a search returns only ids (the caller
    reads the entities, so a vector left by an entity deleted elsewhere matches nothing).

    Args:
        graph: the Topic's FalkorDB graph.
        topic_id: the Topic's id (named in errors).
    """

    def __init__(self, graph: Graph, topic_id: str):
        self.graph = graph
        self.topic_id = topic_id

    def dims(self, indexes: list[list] | None = None) -> int | None:
        """The dimension the index was created with; ``None`` when there is no index (or no graph).

        Read from the server each time (one round trip), so a graph dropped elsewhere is noticed.

        Args:
            indexes: rows ``(label, properties, types, options)`` of ``db.indexes()`` just read by the caller
                (:meth:`~ragtopics.graph.store.GraphStore.ensure`): no round trip.
        """
        rows = self._index_rows(indexes)
        if rows is None:
            return None
        for label, types, options in rows:
            if label == "EntityVector" and "VECTOR" in types.get("embedding", []):
                return int(options["embedding"]["dimension"])
        return None

    def _index_rows(self, indexes: list[list] | None) -> list | None:
        """``(label, types, options)`` of each index: from ``indexes`` when given, else read; None without a graph."""
        if indexes is not None:
            return [(label, types, options) for label, _, types, options in indexes]
        try:
            return list(self.graph.ro_query(_INDEXES).result_set)
        except ResponseError as exc:
            if "empty key" in str(exc):
                return None
            raise

    def ensure(self, dims: int, indexes: list[list] | None = None) -> None:
        """Create the index for ``dims``-dimensional vectors unless it exists (idempotent).

        An index of another dimension that no entity has a vector for any more is rebuilt.

        Args:
            indexes: as for :meth:`dims`.

        Raises:
            EmbeddingMismatchError: when the index exists with another dimension and holds vectors.
        """
        existing = self.dims(indexes)
        if existing not in (None, dims) and not self.graph.ro_query(_ANY_VECTOR).result_set:
            self.graph.drop_node_vector_index("EntityVector", "embedding")
            existing = None
        if existing is None:
            for statement in (
                "CREATE INDEX FOR (v:EntityVector) ON (v.id)",
                (
                    "CREATE VECTOR INDEX FOR (v:EntityVector) ON (v.embedding) "
                    f"OPTIONS {{dimension: {int(dims)}, similarityFunction: 'cosine', efRuntime: {EF_RUNTIME}}}"
                ),
            ):
                try:
                    self.graph.query(statement)
                except ResponseError as exc:
                    if "already indexed" not in str(exc):
                        raise
            existing = self.dims()
            log.info("created the entity vector index of graph %s (%d dims)", self.graph.name, dims)
        if existing != dims:
            raise EmbeddingMismatchError(
                f"the entity vectors of Topic {self.topic_id} have {existing} dims, but the configured embedding "
                f"model gives {dims}: re-embed the Topic's documents or configure the model they were embedded with"
            )

    def missing(self, entity_ids: Iterable[str]) -> set[str]:
        """The ids among ``entity_ids`` that have no stored vector: new entities, or unknown ids (one query)."""
        wanted = list(dict.fromkeys(entity_ids))
        if not wanted:
            return set()
        try:
            rows = self.graph.ro_query(_HAVE_VECTOR, {"ids": wanted}).result_set
        except ResponseError as exc:
            if "empty key" in str(exc):
                return set(wanted)
            raise
        return set(wanted) - {row[0] for row in rows}

    def delete(self, entity_ids: Iterable[str]) -> int:
        """Delete the vectors of these entity ids (those of deleted entities); returns how many there were."""
        wanted = list(dict.fromkeys(entity_ids))
        if not wanted:
            return 0
        try:
            return int(self.graph.query(_DELETE, {"ids": wanted}).result_set[0][0])
        except ResponseError as exc:
            if "empty key" in str(exc):
                return 0
            raise

    def clear(self) -> int:
        """Delete every entity vector and the vector index (a re-embed with another model makes them again).

        Returns:
            How many vectors were deleted.
        """
        removed = 0
        try:
            while n := int(self.graph.query(_CLEAR).result_set[0][0]):
                removed += n
            if self.dims() is not None:
                self.graph.drop_node_vector_index("EntityVector", "embedding")
        except ResponseError as exc:
            if "empty key" not in str(exc):
                raise
        return removed

    def drop_legacy(self, indexes: list[list] | None = None) -> int:
        """Remove the vectors earlier versions kept on the Entity nodes themselves, and their index.

        Args:
            indexes: as for :meth:`dims`.

        Returns:
            How many entities lost such a vector (they count as :meth:`missing` and are embedded again).
        """
        rows = self._index_rows(indexes)
        if rows is None:
            return 0
        if not any(label == "Entity" and "VECTOR" in types.get("embedding", []) for label, types, _ in rows):
            return 0
        self.graph.drop_node_vector_index("Entity", "embedding")
        removed = 0
        while n := int(self.graph.query(_LEGACY).result_set[0][0]):
            removed += n
        log.info("graph %s: %d entity vectors of an earlier version removed (embedded again by name)", self.graph.name, removed)
        return removed

    def set(self, entity_ids: list[str], vectors: np.ndarray, *, new: bool = False, indexes: list[list] | None = None) -> int:
        """Store one vector per entity (replacing any earlier one), creating the index on first use.

        Args:
            entity_ids: ids of stored entities; ids not in the graph are skipped.
            vectors: shape ``(len(entity_ids), dims)``, any float dtype, no zero rows.
            new: the caller knows that none of them has a vector (checked under the graph write lock): no
                earlier vector is looked for and deleted.
            indexes: as for :meth:`dims`.

        Returns:
            How many entities got a vector.

        Raises:
            ValueError: when the shapes disagree, or a vector is zero or not finite.
            EmbeddingMismatchError: when the index exists with another dimension.
        """
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(entity_ids):
            raise ValueError(f"expected {len(entity_ids)} vectors as a 2-d array, got shape {matrix.shape}")
        if not entity_ids:
            return 0
        if not np.isfinite(matrix).all() or not np.linalg.norm(matrix, axis=1).all():
            raise ValueError("entity vectors must be finite and non-zero (cosine is undefined otherwise)")
        self.ensure(matrix.shape[1], indexes)
        written = 0
        for start in range(0, len(entity_ids), _WRITE_BATCH):
            rows = [
                {"id": eid, "vector": _VectorLiteral(vec)}
                for eid, vec in zip(entity_ids[start : start + _WRITE_BATCH], matrix[start : start + _WRITE_BATCH])
            ]
            if not new:
                self.graph.query(_DELETE, {"ids": [row["id"] for row in rows]})  # replaced, never updated (see _DELETE)
            written += int(self.graph.query(_CREATE, {"rows": rows}).result_set[0][0])
        return written

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` entities nearest to ``vector`` by cosine.

        Args:
            vector: shape ``(dims,)``.
            k: how many to return (< 1 gives ``[]``).

        Returns:
            ``(entity_id, cosine_similarity)`` pairs, most similar first; similarity is in
            ``[-1, 1]`` (``1 - distance``, FalkorDB's score being the cosine distance).
            ``[]`` when no entity has a vector yet.

        Raises:
            EmbeddingMismatchError: when ``vector`` has another dimension than the index.
        """
        query = np.asarray(vector, dtype=np.float32).ravel()
        dims = self.dims()
        if k < 1 or dims is None:
            return []
        if query.shape[0] != dims:
            raise EmbeddingMismatchError(
                f"the entity vectors of Topic {self.topic_id} have {dims} dims, the query vector has {query.shape[0]}"
            )
        rows = self.graph.ro_query(_SEARCH, {"k": int(k), "vector": query.tolist()}).result_set
        return sorted(((eid, 1.0 - float(distance)) for eid, distance in rows), key=lambda pair: -pair[1])


class _VectorLiteral:
    """A float32 vector as a query parameter in its shortest exact text: nine significant digits per component.

    FalkorDB's client writes parameters as Cypher text, and a Python float of a float32 value prints with up
    to 17 digits; nine give back the same float32 (IEEE 754 single precision), so the stored vector is
    unchanged while the text the client builds and the server parses is about a third shorter.
    """

    __slots__ = ("row",)

    def __init__(self, row: np.ndarray):
        self.row = row

    def __str__(self) -> str:
        return "[" + ",".join(f"{x:.9g}" for x in self.row.tolist()) + "]"
