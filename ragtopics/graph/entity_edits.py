"""An operator's edits of stored entities: move what chunks say about one entity onto another, or delete one.

Every correction of :mod:`ragtopics.graph.corrections` is one of two edits of the stored graph:

- :func:`move_mentions`: the mentions (``MENTIONED_IN`` edges with what each chunk said) of an
  entity, all of them or those of some chunks, go to a target entity (created when new), and each
  relationship's share of those chunks goes with them (merged into the target's relationship with
  the same other end; one between the two entities themselves is dropped). An entity left with no
  mention is deleted with its vector. A merge, rename or retype moves every mention; a split moves
  the mentions that used the split-off name.
- :func:`delete_entity`: the entity, its mentions, relationships, picture links and vector go.

Both compute the new state in Python from what they read and write it in one query (FalkorDB runs
a query atomically); the descriptions and aliases of the entities touched are then rebuilt from
their mentions (:meth:`~ragtopics.graph.store.GraphStore.rebuild_entities`), as after an upsert.
The caller holds the Topic's graph write lock, so nothing changes between the read and the write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from ragtopics.graph.dedup import block_keys
from ragtopics.graph.model import Entity, entity_id_for, normalize_name
from ragtopics.graph.store import ENTITY_ABOUT_SAMPLE, ENTITY_CHUNK_SAMPLE, GraphStore, merged_sentences

log = logging.getLogger(__name__)

_MENTIONS_OF = """
UNWIND $ids AS eid
MATCH (e:Entity {id: eid})-[n]->(c:Chunk)
RETURN e.id, c.id, n.sentences, n.names, n.keys, coalesce(n.at, 0), coalesce(n.subject, false)
"""
_OUT = """
UNWIND $ids AS eid
MATCH (a:Entity {id: eid})-[r:RELATED]->(b:Entity)
RETURN a.id, b.id, r.description, r.strength, r.chunk_ids, r.chunk_strengths, r.chunk_sentences
"""
_IN = """
UNWIND $ids AS eid
MATCH (a:Entity)-[r:RELATED]->(b:Entity {id: eid})
RETURN a.id, b.id, r.description, r.strength, r.chunk_ids, r.chunk_strengths, r.chunk_sentences
"""
_SHOWN_IN = "MATCH (i:Image)-[:SHOWS]->(e:Entity {id: $id}) RETURN i.id"

# Deletions first, then the new state; each stage ends in an aggregation, so an empty list stops nothing.
_WRITE = """
UNWIND $gone_mentions AS g
MATCH (:Entity {id: g.entity})-[n:MENTIONED_IN]->(:Chunk {id: g.chunk})
DELETE n
WITH count(*) AS _mentions_gone
UNWIND $gone_relationships AS g
MATCH (:Entity {id: g.source})-[r:RELATED]->(:Entity {id: g.target})
DELETE r
WITH count(*) AS _relationships_gone
UNWIND $gone_entities AS gid
MATCH (e:Entity {id: gid})
DETACH DELETE e
WITH count(*) AS _entities_gone
UNWIND $entities AS x
MERGE (e:Entity {id: x.id})
ON CREATE SET e.name = x.name, e.type = x.type, e.name_key = x.key, e.description = '', e.aliases = [],
              e.alias_keys = [], e.block_keys = x.block_keys, e.tracked = true
SET e.chunk_ids = x.chunk_ids, e.chunk_count = x.chunk_count, e.name = x.name, e.about = x.about
WITH count(*) AS _entities
UNWIND $mentions AS m
MATCH (e:Entity {id: m.entity}), (c:Chunk {id: m.chunk})
MERGE (e)-[n:MENTIONED_IN]->(c)
SET n.sentences = m.sentences, n.names = m.names, n.keys = m.keys, n.at = m.at, n.subject = m.subject
WITH count(*) AS _mentions
UNWIND $relationships AS x
MATCH (a:Entity {id: x.source}), (b:Entity {id: x.target})
MERGE (a)-[r:RELATED]->(b)
SET r.description = x.description, r.strength = x.strength, r.chunk_ids = x.chunk_ids,
    r.chunk_strengths = x.strengths, r.chunk_sentences = x.sentences
WITH count(*) AS _relationships
UNWIND $shows AS s
MATCH (i:Image {id: s.image}), (e:Entity {id: s.entity})
MERGE (i)-[:SHOWS]->(e)
RETURN count(*)
"""


@dataclass(slots=True)
class _Mention:
    """What one chunk said about an entity (a stored ``MENTIONED_IN`` edge)."""

    chunk: str
    sentences: list[str]
    names: list[str]
    keys: list[str]
    at: int
    subject: bool

    def row(self, entity_id: str) -> dict:
        return {
            "entity": entity_id,
            "chunk": self.chunk,
            "sentences": self.sentences,
            "names": self.names,
            "keys": self.keys,
            "at": self.at,
            "subject": self.subject,
        }

    def joined(self, other: _Mention) -> _Mention:
        """Both mentions of one chunk as one: sentences, names and keys in order, each once; the earlier time."""
        return _Mention(
            self.chunk,
            _union(self.sentences, other.sentences),
            _union(self.names, other.names),
            _union(self.keys, other.keys),
            min(self.at, other.at),
            self.subject or other.subject,
        )


@dataclass(slots=True)
class _Relationship:
    """A stored relationship as per-chunk parts: chunk id → (strength, sentences); ``legacy`` without per-chunk sentences."""

    source: str
    target: str
    description: str
    parts: dict[str, tuple[float, list[str]]] = field(default_factory=dict)
    legacy: bool = False

    def row(self) -> dict:
        ids = list(self.parts)
        sentences = [self.parts[c][1] for c in ids]
        description = self.description if self.legacy else merged_sentences(s for part in sentences for s in part)
        return {
            "source": self.source,
            "target": self.target,
            "chunk_ids": ids,
            "strengths": [self.parts[c][0] for c in ids],
            "sentences": None if self.legacy else sentences,
            "description": description,
            "strength": sum(self.parts[c][0] for c in ids),
        }


def _about(chunk_ids: list[str], mentions: dict[str, _Mention]) -> list[str]:
    """An entity's ``about`` list (:data:`~ragtopics.graph.store.ENTITY_ABOUT_SAMPLE` at most): the chunks of
    ``chunk_ids`` whose mention is a ``subject`` one, in that order."""
    return [cid for cid in chunk_ids if cid in mentions and mentions[cid].subject][:ENTITY_ABOUT_SAMPLE]


def _union(first: Iterable, second: Iterable) -> list:
    return list(dict.fromkeys([*first, *second]))


@dataclass(frozen=True, slots=True)
class EditOutcome:
    """What an edit changed in the graph.

    Attributes:
        target_id: the entity the mentions went to ("" for a delete).
        created: whether that entity is new.
        removed: ids of the entities deleted (left without mentions, or deleted).
        mentions_moved: how many chunk mentions changed entity.
        relationships_moved: how many relationships had chunk shares moved (or were deleted, for a delete).
    """

    target_id: str = ""
    created: bool = False
    removed: tuple[str, ...] = ()
    mentions_moved: int = 0
    relationships_moved: int = 0

    def as_dict(self) -> dict:
        """The outcome as JSON-ready values (stored with the correction)."""
        return {
            "target_id": self.target_id,
            "created": self.created,
            "removed": list(self.removed),
            "mentions_moved": self.mentions_moved,
            "relationships_moved": self.relationships_moved,
        }


def mentions_of(store: GraphStore, ids: list[str]) -> dict[str, dict[str, _Mention]]:
    """What each chunk says about each of these entities: entity id → chunk id → its mention (names, sentences)."""
    found: dict[str, dict[str, _Mention]] = {i: {} for i in ids}
    for eid, cid, sentences, names, keys, at, subject in store.read(_MENTIONS_OF, {"ids": ids}):
        found[eid][cid] = _Mention(cid, list(sentences or []), list(names or []), list(keys or []), int(at or 0), bool(subject))
    return found


def _relationships(store: GraphStore, ids: list[str]) -> dict[tuple[str, str], _Relationship]:
    found: dict[tuple[str, str], _Relationship] = {}
    for query in (_OUT, _IN):
        for source, target, description, strength, chunk_ids, strengths, sentences in store.read(query, {"ids": ids}):
            chunk_ids = list(chunk_ids or [])
            shares = list(strengths or []) or [float(strength or 0.0) / max(len(chunk_ids), 1)] * len(chunk_ids)
            per_chunk = list(sentences) if sentences is not None else [[] for _ in chunk_ids]
            found[(source, target)] = _Relationship(
                source,
                target,
                description or "",
                legacy=sentences is None,
                parts={c: (float(s), list(p or [])) for c, s, p in zip(chunk_ids, shares, per_chunk, strict=False)},
            )
    return found


def move_mentions(
    store: GraphStore,
    source: Entity,
    target_name: str,
    target_type: str,
    *,
    chunks: Iterable[str] | None = None,
    drop_names: Iterable[str] = (),
) -> EditOutcome:
    """Move an entity's mentions (all, or those of ``chunks``) and their relationship shares to the entity
    ``(target_name, target_type)``, creating it when new; see the module docstring.

    Args:
        store: the Topic's graph (fenced by the caller's graph write lock).
        source: the stored entity the mentions leave.
        target_name, target_type: the entity they go to (its id is :func:`entity_id_for` of both); when
            that is the source's own id, only the stored name changes (a rename in case or punctuation).
        chunks: the chunk ids whose mentions move; None: every one (the source is then deleted).
        drop_names: names taken out of the moved mentions' names (a split's former canonical name).

    Returns:
        What changed.

    Raises:
        ValueError: when the target is the source itself but its name would not change.
    """
    target_id = entity_id_for(target_name, target_type)
    if target_id == source.id:
        if target_name == source.name:
            raise ValueError(f"{source.name!r} ({source.type}) is already that entity")
        store.graph.query("MATCH (e:Entity {id: $id}) SET e.name = $name", {"id": source.id, "name": target_name})
        store.rebuild_entities([source.id])
        return EditOutcome(target_id, False)
    stored = {e.id: e for e in store.entities([source.id, target_id])}
    mentions = mentions_of(store, [source.id, target_id])
    relationships = _relationships(store, [source.id])
    moving = set(mentions[source.id]) if chunks is None else set(chunks) & set(mentions[source.id])
    dropped = {normalize_name(n) for n in drop_names}
    moved: dict[str, _Mention] = {}
    for cid in moving:
        m = mentions[source.id][cid]
        names = [n for n in m.names if normalize_name(n) not in dropped]
        keys = [k for k in m.keys if k not in dropped]
        mine = _Mention(cid, m.sentences, [target_name, *[n for n in names if n != target_name]], keys, m.at, m.subject)
        moved[cid] = mentions[target_id][cid].joined(mine) if cid in mentions[target_id] else mine
    left = {cid for cid in mentions[source.id] if cid not in moving}
    target_relationships = _relationships(store, [target_id]) if target_id in stored else {}
    new_rels, gone_rels, touched = _moved_relationships(relationships, target_relationships, source.id, target_id, moving)
    target_chunks = sorted(set(mentions[target_id]) | moving)
    entities = [
        {
            "id": target_id,
            "name": stored[target_id].name if target_id in stored else target_name,
            "type": target_type,
            "key": normalize_name(target_name),
            "block_keys": block_keys([target_name])[0],
            "chunk_ids": target_chunks[:ENTITY_CHUNK_SAMPLE],
            "chunk_count": len(target_chunks),
            "about": _about(target_chunks, {**mentions[target_id], **moved}),
        }
    ]
    gone_entities = [] if left else [source.id]
    if left:
        entities.append(
            {
                "id": source.id,
                "name": source.name,
                "type": source.type,
                "key": normalize_name(source.name),
                "block_keys": block_keys([source.name])[0],
                "chunk_ids": sorted(left)[:ENTITY_CHUNK_SAMPLE],
                "chunk_count": len(left),
                "about": _about(sorted(left), mentions[source.id]),
            }
        )
    shows = [] if left else [{"image": i, "entity": target_id} for (i,) in store.read(_SHOWN_IN, {"id": source.id})]
    store.graph.query(
        _WRITE,
        {
            "gone_mentions": [{"entity": source.id, "chunk": cid} for cid in sorted(moving)] if left else [],
            "gone_relationships": [{"source": s, "target": t} for s, t in sorted(gone_rels)],
            "gone_entities": gone_entities,
            "entities": entities,
            "mentions": [m.row(target_id) for m in moved.values()],
            "relationships": [r.row() for r in new_rels],
            "shows": shows,
        },
    )
    if gone_entities:
        store.vectors.delete(gone_entities)
    store.rebuild_entities([target_id, *([source.id] if left else [])])
    log.info("graph %s: %d mentions of %r moved to %r (%s)", store.name, len(moved), source.name, target_name, target_type)
    return EditOutcome(target_id, target_id not in stored, tuple(gone_entities), len(moved), touched)


def _moved_relationships(
    relationships: dict[tuple[str, str], _Relationship],
    target_relationships: dict[tuple[str, str], _Relationship],
    source_id: str,
    target_id: str,
    moving: set[str],
) -> tuple[list[_Relationship], set[tuple[str, str]], int]:
    """The source's relationships with the shares of ``moving`` chunks moved to the target.

    Returns:
        ``(relationships to write, (source, target) of those to delete, how many source relationships had shares moved)``.
    """
    out: dict[tuple[str, str], _Relationship] = {}
    gone: set[tuple[str, str]] = set()
    touched = 0
    for (a, b), rel in relationships.items():
        taken = {c: p for c, p in rel.parts.items() if c in moving}
        if not taken:
            continue
        touched += 1
        kept = {c: p for c, p in rel.parts.items() if c not in moving}
        if kept:
            out[(a, b)] = _Relationship(a, b, rel.description, kept, rel.legacy)
        else:
            gone.add((a, b))
        ends = (target_id if a == source_id else a, target_id if b == source_id else b)
        if ends[0] == ends[1]:
            continue  # a relationship between the two entities merged: none with itself
        into = out.get(ends) or target_relationships.get(ends)
        if into is None:
            into = out[ends] = _Relationship(*ends, rel.description, {}, rel.legacy)
        else:
            into = out[ends] = _Relationship(*ends, into.description, dict(into.parts), into.legacy)
        for cid, (strength, sentences) in taken.items():
            old = into.parts.get(cid)
            into.parts[cid] = (old[0] + strength, _union(old[1], sentences)) if old else (strength, sentences)
        if rel.legacy or into.legacy:
            into.legacy = True
            into.description = merged_sentences([into.description, rel.description])
    gone -= set(out)
    return list(out.values()), gone, touched


def delete_entity(store: GraphStore, entity: Entity) -> EditOutcome:
    """Delete a stored entity with its mentions, relationships, picture links and vector (one query).

    The other ends of its relationships stay as they are (their chunks still mention them).

    Returns:
        What changed (``relationships_moved``: how many relationships were deleted with it).
    """
    rows = store.graph.query(
        "MATCH (e:Entity {id: $id}) OPTIONAL MATCH (e)-[r:RELATED]-() WITH e, count(r) AS rels DETACH DELETE e RETURN rels",
        {"id": entity.id},
    ).result_set
    store.vectors.delete([entity.id])
    log.info("graph %s: entity %r (%s) deleted", store.name, entity.name, entity.type)
    return EditOutcome("", False, (entity.id,), entity.mentions, int(rows[0][0]) if rows else 0)
