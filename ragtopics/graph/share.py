"""A document's share of a Topic graph, read before a version is written and written back when storing it fails.

Writing a version into the graph takes several queries (:func:`~ragtopics.graph.ingest.apply_graph`: the
dropped chunks out, the new ones in, entity vectors, images), and the chunk swap and the SQL row come after
them. When any of these fails, :func:`restore_share` puts back exactly what :func:`read_share` read: every
node and edge the write can touch, with all its properties (provenance lists, per-chunk sentences and
strengths, mention times, descriptions), and removes what the failed write added. What the write can touch
is bounded by the version, not the graph:

- the document's chunks, old and new (``Chunk`` nodes, ``PART_OF``, their ``Image`` nodes), and its ``Document``;
- the entities mentioned in those chunks or named by the new version, their ``MENTIONED_IN`` edges to those
  chunks, their vectors, and the ``SHOWS`` edges into them;
- the relationships of those entities that name one of those chunks, and those the new version names.

This is the compensation step of a multi-store write (the "state manager" of fast-graphrag, here for one
document): it costs two read queries per version, their work proportional to its share. It relies on the Topic's
graph write lock being held from the read to the restore, so no other upload changes those entities between
them; a document delete takes only the document's lock and may still interleave (then what it removed from
an entity this version shares can come back until the next change of that entity).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from ragtopics.graph.store import GraphStore, ties_by_ends

log = logging.getLogger(__name__)

_CHUNKS = """
UNWIND $ids AS cid
MATCH (c:Chunk {id: cid})
RETURN c.id, properties(c)
"""
_DOCUMENT = "MATCH (d:Document {id: $d}) RETURN properties(d)"
_MENTIONED = """
UNWIND $ids AS cid
MATCH (c:Chunk {id: cid})<-[:MENTIONED_IN]-(e:Entity)
RETURN DISTINCT e.id
"""
_ENTITIES = "UNWIND $ids AS i MATCH (e:Entity {id: i}) RETURN e.id, properties(e)"
_MENTIONS = """
UNWIND $ids AS cid
MATCH (c:Chunk {id: cid})<-[n:MENTIONED_IN]-(e:Entity)
RETURN e.id, c.id, properties(n)
"""
# A relationship's chunks are also its endpoints' chunks, so every relationship that names one of the chunks
# has an end among the entities mentioned there; both directions, as the entity may be either end.
_RELATED_OUT = """
UNWIND $entities AS i
MATCH (a:Entity {id: i})-[r:RELATED]->(b:Entity)
WHERE any(x IN r.chunk_ids WHERE x IN $ids)
RETURN a.id, b.id, properties(r)
"""
_RELATED_IN = """
UNWIND $entities AS i
MATCH (a:Entity)-[r:RELATED]->(b:Entity {id: i})
WHERE any(x IN r.chunk_ids WHERE x IN $ids)
RETURN a.id, b.id, properties(r)
"""
_RELATED_PAIRS = ties_by_ends("pairs") + "RETURN a.id, b.id, properties(r)\n"
_IMAGES = """
UNWIND $ids AS cid
MATCH (c:Chunk {id: cid})-[:HAS_PICTURE]->(i:Image)
RETURN c.id, properties(i)
"""
_SHOWS = """
UNWIND $entities AS eid
MATCH (i:Image)-[:SHOWS]->(e:Entity {id: eid})
RETURN i.id, e.id
"""
_VECTORS = "UNWIND $entities AS i MATCH (v:EntityVector {id: i}) RETURN v.id, v.embedding"

# What read_share reads, in two queries (one per scope) instead of one per kind of thing: a round trip each costs
# more than the reads themselves on a version's share, and every upload of a GraphRAG Topic reads its share.
_CHUNK_SCOPE = """
CALL { MATCH (d:Document {id: $d}) RETURN collect(properties(d)) AS document }
CALL { UNWIND $ids AS cid MATCH (c:Chunk {id: cid}) RETURN collect(properties(c)) AS chunks }
CALL {
  UNWIND $ids AS cid
  MATCH (c:Chunk {id: cid})<-[n:MENTIONED_IN]-(e:Entity)
  RETURN collect([e.id, c.id, properties(n)]) AS mentions
}
CALL {
  UNWIND $ids AS cid
  MATCH (c:Chunk {id: cid})-[:HAS_PICTURE]->(i:Image)
  RETURN collect([c.id, properties(i)]) AS images
}
RETURN document, chunks, mentions, images
"""
_ENTITY_SCOPE = (
    """
CALL { UNWIND $entities AS i MATCH (e:Entity {id: i}) RETURN collect([e.id, properties(e)]) AS entities }
CALL {
  UNWIND $mentioned AS i
  MATCH (a:Entity {id: i})-[r:RELATED]->(b:Entity)
  WHERE any(x IN r.chunk_ids WHERE x IN $ids)
  RETURN collect([a.id, b.id, properties(r)]) AS outgoing
}
CALL {
  UNWIND $mentioned AS i
  MATCH (a:Entity)-[r:RELATED]->(b:Entity {id: i})
  WHERE any(x IN r.chunk_ids WHERE x IN $ids)
  RETURN collect([a.id, b.id, properties(r)]) AS incoming
}
CALL {
"""
    + ties_by_ends("pairs")
    + """  RETURN collect([a.id, b.id, properties(r)]) AS named
}
CALL { UNWIND $entities AS eid MATCH (i:Image)-[:SHOWS]->(e:Entity {id: eid}) RETURN collect([i.id, e.id]) AS shows }
CALL { UNWIND $entities AS i MATCH (v:EntityVector {id: i}) RETURN collect([v.id, v.embedding]) AS vectors }
RETURN entities, outgoing, incoming, named, shows, vectors
"""
)

# Restoring: each step one query; each is idempotent, so a restore can run again after one that stopped.
_DELETE_RELATED = ties_by_ends("pairs") + "DELETE r\n"
_DELETE_IMAGES = "UNWIND $ids AS cid MATCH (:Chunk {id: cid})-[:HAS_PICTURE]->(i:Image) DETACH DELETE i"
_DELETE_CHUNKS = "UNWIND $ids AS cid MATCH (c:Chunk {id: cid}) DETACH DELETE c"
_DELETE_ENTITIES = "UNWIND $ids AS i MATCH (e:Entity {id: i}) DETACH DELETE e"
_DELETE_VECTORS = "UNWIND $ids AS i MATCH (v:EntityVector {id: i}) DELETE v"
_DELETE_DOCUMENT = "MATCH (d:Document {id: $d}) DETACH DELETE d"
_PUT_DOCUMENT = "MERGE (d:Document {id: $d}) SET d = $props"
_PUT_ENTITIES = "UNWIND $rows AS x MERGE (e:Entity {id: x.id}) SET e = x.props"
_PUT_CHUNKS = """
UNWIND $rows AS x
MATCH (d:Document {id: $d})
CREATE (c:Chunk)
SET c = x.props
CREATE (c)-[:PART_OF]->(d)
"""
_PUT_MENTIONS = """
UNWIND $rows AS x
MATCH (e:Entity {id: x.entity}), (c:Chunk {id: x.chunk})
CREATE (e)-[n:MENTIONED_IN]->(c)
SET n = x.props
"""
_PUT_RELATED = """
UNWIND $rows AS x
MATCH (a:Entity {id: x.source}), (b:Entity {id: x.target})
CREATE (a)-[r:RELATED]->(b)
SET r = x.props
"""
_PUT_IMAGES = """
UNWIND $rows AS x
MATCH (c:Chunk {id: x.chunk})
CREATE (i:Image)
SET i = x.props
CREATE (c)-[:HAS_PICTURE]->(i)
"""
_PUT_SHOWS = """
UNWIND $rows AS x
MATCH (i:Image {id: x.image}), (e:Entity {id: x.entity})
MERGE (i)-[:SHOWS]->(e)
"""
_PUT_VECTORS = "UNWIND $rows AS x CREATE (:EntityVector {id: x.id, embedding: vecf32(x.vector)})"


@dataclass
class GraphShare:
    """What a document's version and the version about to replace it can touch in the graph, as stored before.

    Attributes:
        document_id: the document.
        chunk_ids: the chunk ids in scope: the stored version's and the new version's.
        planned_entities: the entity ids the new version names (its mentions and relationship ends).
        planned_pairs: ``(source id, target id)`` of the relationships the new version names.
        document: the ``Document`` node's properties (None when it was not stored).
        chunks: properties of each stored ``Chunk`` in scope.
        entities: entity id → properties, of every stored entity in scope.
        mentions: ``(entity id, chunk id, properties)`` of every ``MENTIONED_IN`` edge into a chunk in scope.
        relationships: ``(source id, target id)`` → properties, of every relationship in scope.
        images: ``(chunk id, properties)`` of the ``Image`` nodes of the chunks in scope.
        shows: ``(image id, entity id)`` of every ``SHOWS`` edge into an entity in scope.
        vectors: entity id → its vector (a list of floats), for the entities in scope that have one.
    """

    document_id: str
    chunk_ids: list[str]
    planned_entities: list[str]
    planned_pairs: list[tuple[str, str]]
    document: dict | None = None
    chunks: list[dict] = field(default_factory=list)
    entities: dict[str, dict] = field(default_factory=dict)
    mentions: list[tuple[str, str, dict]] = field(default_factory=list)
    relationships: dict[tuple[str, str], dict] = field(default_factory=dict)
    images: list[tuple[str, dict]] = field(default_factory=list)
    shows: list[tuple[str, str]] = field(default_factory=list)
    vectors: dict[str, list[float]] = field(default_factory=dict)


def read_share(
    store: GraphStore,
    document_id: str,
    chunk_ids: Iterable[str],
    entity_ids: Iterable[str] = (),
    pairs: Iterable[tuple[str, str]] = (),
) -> GraphShare:
    """Read what writing a new version of a document may change (read-only queries; nothing is written).

    Args:
        store: the Topic's graph.
        document_id: the document.
        chunk_ids: the ids of its stored chunks and of the new version's chunks.
        entity_ids: the entity ids the new version names (mentions and relationship ends).
        pairs: ``(source id, target id)`` of the relationships the new version names.

    Returns:
        The share as stored now (empty when the graph does not exist yet).
    """
    ids = sorted(set(chunk_ids))
    planned = sorted(set(entity_ids))
    share = GraphShare(document_id, ids, planned, sorted(set(pairs)))
    rows = store.read(_CHUNK_SCOPE, {"d": document_id, "ids": ids})
    if not rows:  # no graph yet
        return share
    document, chunks, mentions, images = rows[0]
    share.document = dict(document[0]) if document else None
    share.chunks = [dict(props) for props in chunks]
    share.mentions = [(eid, cid, dict(props)) for eid, cid, props in mentions]
    share.images = [(cid, dict(props)) for cid, props in images]
    mentioned = sorted({eid for eid, _, _ in share.mentions})
    in_scope = sorted(set(mentioned) | set(planned))  # the entities mentioned there (_touched)
    # A relationship's chunks are also its ends' chunks (see _RELATED_OUT): the relationships that name a stored chunk
    # of the document are among those of the entities mentioned there; the new version's chunks are not stored yet.
    # So a new document's planned entities (hubs among them) are not walked tie by tie.
    [(entities, outgoing, incoming, named, shows, vectors)] = store.read(
        _ENTITY_SCOPE,
        {"entities": in_scope, "mentioned": mentioned, "ids": ids, "pairs": [list(p) for p in share.planned_pairs]},
    )
    share.entities = {eid: dict(props) for eid, props in entities}
    share.relationships = {(a, b): dict(props) for a, b, props in [*outgoing, *incoming, *named]}
    share.shows = [(iid, eid) for iid, eid in shows]
    share.vectors = {eid: list(vector) for eid, vector in vectors}
    return share


def restore_share(store: GraphStore, share: GraphShare) -> None:
    """Put a document's share back as :func:`read_share` read it, whatever a failed write changed since.

    Removes every chunk, mention, image and relationship in scope and every entity in scope that was not
    stored before (with its vector), then writes back the stored ones with all their properties. Writes
    go through ``store`` (fenced when the caller fenced it). Idempotent: run again after a restore that
    stopped, it ends in the same graph.

    Raises:
        LockLostError: with a fenced store whose lock was lost (the new holder owns the graph).
        redis.RedisError: when the graph server fails; the share may then be half restored.
    """
    if not store.exists():
        return
    ids = share.chunk_ids
    now = _touched(store, ids) | set(share.planned_entities)
    scope = sorted(now | set(share.entities))
    pairs = set(share.relationships) | set(share.planned_pairs) | set(_relationships(store, scope, ids, []))
    query = store.graph.query
    query(_DELETE_RELATED, {"pairs": [list(p) for p in sorted(pairs)]})
    query(_DELETE_IMAGES, {"ids": ids})
    query(_DELETE_CHUNKS, {"ids": ids})
    added = sorted(now - set(share.entities))
    query(_DELETE_ENTITIES, {"ids": added})
    if share.document is None:
        query(_DELETE_DOCUMENT, {"d": share.document_id})
    else:
        query(_PUT_DOCUMENT, {"d": share.document_id, "props": share.document})
    query(_PUT_ENTITIES, {"rows": [{"id": eid, "props": props} for eid, props in share.entities.items()]})
    if share.chunks:
        query(_PUT_CHUNKS, {"d": share.document_id, "rows": [{"props": props} for props in share.chunks]})
    query(_PUT_MENTIONS, {"rows": [{"entity": e, "chunk": c, "props": props} for e, c, props in share.mentions]})
    query(_PUT_RELATED, {"rows": [{"source": a, "target": b, "props": props} for (a, b), props in share.relationships.items()]})
    query(_PUT_IMAGES, {"rows": [{"chunk": cid, "props": props} for cid, props in share.images]})
    query(_PUT_SHOWS, {"rows": [{"image": i, "entity": e} for i, e in share.shows]})
    _restore_vectors(store, share, scope)
    log.info(
        "graph %s: the share of %s was restored (%d chunks, %d entities, %d relationships)",
        store.name,
        share.document_id,
        len(share.chunks),
        len(share.entities),
        len(share.relationships),
    )


def _restore_vectors(store: GraphStore, share: GraphShare, scope: list[str]) -> None:
    """Give each entity in scope the vector it had (a failed write may have set one anew, or added one), by
    deleting and creating only the vectors that differ (vector nodes are never updated: see ``entity_index``)."""
    now = {eid: list(vector) for eid, vector in store.read(_VECTORS, {"entities": scope})}
    changed = sorted(eid for eid in set(now) | set(share.vectors) if now.get(eid) != share.vectors.get(eid))
    if not changed:
        return
    store.graph.query(_DELETE_VECTORS, {"ids": changed})
    rows = [{"id": eid, "vector": share.vectors[eid]} for eid in changed if eid in share.vectors]
    if rows:
        store.graph.query(_PUT_VECTORS, {"rows": rows})


def _touched(store: GraphStore, chunk_ids: list[str]) -> set[str]:
    """Ids of the entities mentioned in these chunks."""
    return {row[0] for row in store.read(_MENTIONED, {"ids": chunk_ids})}


def _relationships(
    store: GraphStore, entity_ids: list[str], chunk_ids: list[str], pairs: list[tuple[str, str]]
) -> dict[tuple[str, str], dict]:
    """``(source id, target id)`` → properties of the relationships of these entities that name one of these
    chunks, and of the relationships between these pairs."""
    found: dict[tuple[str, str], dict] = {}
    for query in (_RELATED_OUT, _RELATED_IN):
        for a, b, props in store.read(query, {"entities": entity_ids, "ids": chunk_ids}):
            found[(a, b)] = dict(props)
    for a, b, props in store.read(_RELATED_PAIRS, {"pairs": [list(p) for p in pairs]}):
        found[(a, b)] = dict(props)
    return found
