"""The operator corrects a GraphRAG Topic's graph: merge, split, rename, retype, delete an entity.

Deduplication makes mistakes an operator can see ("All-America Football Conference" merged with
"American Football Conference"; "USA" kept apart from "United States"). Each correction

1. changes the stored graph at once (:mod:`ragtopics.graph.entity_edits`), under the Topic's graph
   write lock, and marks the communities due for a recompute;
2. is stored as a rule of the Topic (a ``graph_correction`` row: it outlives a graph that is
   dropped and rebuilt, and is deleted with the Topic);
3. is applied to every later upload, re-upload and graph import before deduplication
   (:meth:`RuleSet.rewrite`), so a re-upload does not undo it, and to deduplication itself
   (a split pair is never merged again, :func:`~ragtopics.graph.dedup.deduplicate`'s ``apart``).

An entity is named by ``(name, TYPE)``; a rule covers names by their :func:`normalize_name` key and
type. What each kind does now and at later uploads:

- ``merge`` A into B: A's mentions and relationships go to B (A's name becomes an alias of B);
  later, a mention named as A was (its name or an alias it had) is B's.
- ``split`` an alias S off entity E: the mentions of E that used the name S become a new entity S
  of E's type (with their share of E's relationships); later, S and E are never merged, and S is
  no longer recorded as E's alias.
- ``rename`` E to N: E becomes N (its old name an alias); later, a mention named as E was is N's.
- ``retype`` E to T: E becomes the entity (E's name, T); later, a mention named as E was, of E's
  old type, has type T.
- ``delete`` E: E goes with its mentions, relationships and vector; later, a mention named as E
  was, of E's type, is dropped from every upload (the same file or another), with the
  relationships it ends. A deleted entity stays deleted.

A later rule about a name replaces an earlier one (a merge after a delete brings the name back as
the merge says). Each applied rule is listed in the upload's trace (step ``corrections``, shown in
its DEV report); every rule about an entity shows in its history (``ragtopics graph T --entity X``
and the Graph tab).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlmodel import col, select

from ragtopics.errors import InvalidSettingError, NotFoundError
from ragtopics.graph.entity_edits import EditOutcome, delete_entity, mentions_of, move_mentions
from ragtopics.graph.lifecycle import mark_recompute_due
from ragtopics.graph.model import Entity, Relationship, entity_id_for, graph_settings, normalize_name
from ragtopics.graph.store import GraphStore
from ragtopics.runtime import Runtime
from ragtopics.storage.locks import LOCK_WAIT_S, graph_write_lock
from ragtopics.storage.metadata import GraphCorrectionRow
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: The kinds of correction, in the order the console lists them.
KINDS = ("merge", "split", "rename", "retype", "delete")
#: Longest entity name or type a correction accepts, in characters.
MAX_NAME_CHARS = 300

#: A name's identity in rules: ``(normalize_name(name), TYPE)``.
Identity = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Correction:
    """One stored correction (a rule of the Topic).

    Attributes:
        id: its number (increasing: later rules win).
        kind: one of :data:`KINDS`.
        name, type: the entity it was made on.
        names: the names it covers (the entity's name and the aliases it had; a split's alias alone).
        target_name, target_type: where the names go (merge, rename, retype), or the entity a split
            alias is kept apart from; empty for a delete.
        outcome: what it changed in the graph when made (:class:`~ragtopics.graph.entity_edits.EditOutcome`).
        created_by: the console user who made it ("" from the CLI).
        created_at: when (UTC).
    """

    id: int
    kind: str
    name: str
    type: str
    names: tuple[str, ...]
    target_name: str = ""
    target_type: str = ""
    outcome: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""
    created_at: datetime | None = None

    def summary(self) -> str:
        """One line: ``merged "USA" (PLACE) into "United States" (PLACE)``."""
        what = f'"{self.name}" ({self.type})'
        return {
            "merge": f'merged {what} into "{self.target_name}" ({self.target_type})',
            "split": f'split "{self.names[0] if self.names else "?"}" off "{self.target_name}" ({self.target_type})',
            "rename": f'renamed {what} to "{self.target_name}"',
            "retype": f'changed the type of "{self.name}" from {self.type} to {self.target_type}',
            "delete": f"deleted {what}",
        }.get(self.kind, self.kind)

    def as_dict(self) -> dict[str, Any]:
        """The correction as JSON-ready values (the CLI, the console, the history)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "summary": self.summary(),
            "name": self.name,
            "type": self.type,
            "names": list(self.names),
            "target_name": self.target_name,
            "target_type": self.target_type,
            "outcome": self.outcome,
            "by": self.created_by,
            "at": self.created_at.isoformat(timespec="seconds") if self.created_at else "",
        }

    def identities(self) -> set[Identity]:
        """The ``(key, TYPE)`` identities the rule covers or points at."""
        found = {(normalize_name(n), self.type) for n in self.names}
        if self.target_name:
            found.add((normalize_name(self.target_name), self.target_type))
        return found


def _correction(row: GraphCorrectionRow) -> Correction:
    return Correction(
        row.id or 0,
        row.kind,
        row.name,
        row.type,
        tuple(row.names or ()),
        row.target_name,
        row.target_type,
        dict(row.outcome or {}),
        row.created_by,
        row.created_at,
    )


def list_corrections(rt: Runtime, topic_id: str) -> list[Correction]:
    """A Topic's corrections, oldest first."""
    with rt.metadata.session() as s:
        rows = s.exec(
            select(GraphCorrectionRow).where(GraphCorrectionRow.topic_id == topic_id).order_by(col(GraphCorrectionRow.id))
        ).all()
    return [_correction(r) for r in rows]


# ---------------------------------------------------------------------------- rules at upload


@dataclass(frozen=True, slots=True)
class RuleSet:
    """A Topic's corrections compiled into what deduplication applies (:func:`compile_rules`).

    Attributes:
        redirect: identity → ``(name, TYPE, rule id)`` the names of that identity become.
        deleted: identity → the rule id that deleted it.
        apart: pairs of identities never merged (splits), each → its rule id.
        kinds: rule id → its kind.
    """

    redirect: dict[Identity, tuple[str, str, int]] = field(default_factory=dict)
    deleted: dict[Identity, int] = field(default_factory=dict)
    apart: dict[frozenset[Identity], int] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.redirect or self.deleted or self.apart)

    def rewrite(self, entities: list[Entity]) -> tuple[list[Entity], dict[str, str | None], Counter]:
        """Apply the rules to extracted entities, before deduplication.

        Args:
            entities: the upload's entities as extracted (one per chunk mention).

        Returns:
            ``(entities, ids, applied)``: the entities kept, renamed or retyped (their ids follow their
            new name and type; a former name stays as an alias; an alias split off the entity is
            dropped); each extracted id → its new id, or None when a delete rule dropped it; and
            how many mentions each rule id changed.
        """
        out: list[Entity] = []
        ids: dict[str, str | None] = {}
        applied: Counter = Counter()
        for entity in entities:
            key = (normalize_name(entity.name), entity.type.upper())
            if key in self.deleted:
                ids[entity.id] = None
                applied[self.deleted[key]] += 1
                continue
            name, type_, rule = self.redirect.get(key, (entity.name, entity.type, 0))
            if (name, type_) != (entity.name, entity.type):
                applied[rule] += 1
            own = (normalize_name(name), type_)
            aliases = []
            for alias in dict.fromkeys((entity.name, *entity.aliases)):
                split = self.apart.get(frozenset({(normalize_name(alias), type_), own}))
                if split is not None:
                    applied[split] += 1
                elif alias != name:
                    aliases.append(alias)
            new = (
                entity
                if (name, type_) == (entity.name, entity.type) and len(aliases) == len(entity.aliases)
                else replace(entity, id=entity_id_for(name, type_), name=name, type=type_, aliases=tuple(aliases))
            )
            ids[entity.id] = new.id
            out.append(new)
        return out, ids, applied

    def apply(
        self, entities: list[Entity], relationships: list[Relationship], trace: Trace | None = None
    ) -> tuple[list[Entity], list[Relationship]]:
        """:meth:`rewrite` the entities and move the relationships' ends with them (one whose end was
        deleted, or whose ends became one entity, is dropped); traced as step ``corrections``.

        Returns:
            ``(entities, relationships)`` to deduplicate.
        """
        if not self:
            return entities, relationships
        kept, ids, applied = self.rewrite(entities)
        moved = []
        for r in relationships:
            source, target = ids.get(r.source_id, r.source_id), ids.get(r.target_id, r.target_id)
            if source and target and source != target:
                moved.append(
                    r if (source, target) == (r.source_id, r.target_id) else replace(r, source_id=source, target_id=target)
                )
        if trace is not None:
            self.record(
                trace, applied, dropped_mentions=len(entities) - len(kept), dropped_relationships=len(relationships) - len(moved)
            )
        return kept, moved

    def record(self, trace: Trace, applied: Counter, **counts: int) -> None:
        """Add the ``corrections`` step to an upload's trace (its DEV report): each rule applied, with how many
        mentions it changed, and ``counts`` (what was dropped)."""
        with trace.step("corrections", rules=len(self.kinds)) as ev:
            ev.data.update(
                applied=[{"rule": rid, "kind": self.kinds.get(rid, ""), "mentions": n} for rid, n in sorted(applied.items())],
                **counts,
            )

    def apart_pairs(self) -> list[frozenset[Identity]]:
        """The split pairs, for :func:`~ragtopics.graph.dedup.deduplicate`'s ``apart``."""
        return list(self.apart)


def compile_rules(corrections: list[Correction]) -> RuleSet:
    """The rules of corrections applied in order: a later rule about an identity replaces an earlier one.

    A merge, rename or retype points every identity it covers at its target, and every earlier rule
    that pointed at one of them (or split one off) follows it to the target; a split removes its
    alias from what earlier rules point elsewhere and keeps the pair apart; a delete drops the
    identities it covers and those earlier rules merged into them.
    """
    rules = RuleSet()
    for c in corrections:
        rules.kinds[c.id] = c.kind
        sources = {(normalize_name(n), c.type) for n in c.names if normalize_name(n)}
        target = (normalize_name(c.target_name), c.target_type)
        if c.kind in ("merge", "rename", "retype"):
            for key, (name, type_, _rid) in list(rules.redirect.items()):
                if (normalize_name(name), type_) in sources:
                    rules.redirect[key] = (c.target_name, c.target_type, c.id)
            for key in sources | {target}:
                rules.deleted.pop(key, None)
            for key in sources:
                rules.redirect[key] = (c.target_name, c.target_type, c.id)
            for pair, rid in list(rules.apart.items()):
                if pair & sources:
                    del rules.apart[pair]
                    moved = frozenset(target if p in sources else p for p in pair)
                    if len(moved) == 2:
                        rules.apart[moved] = rid
        elif c.kind == "split":
            for key in sources:
                rules.redirect.pop(key, None)
                rules.deleted.pop(key, None)
                rules.apart[frozenset({key, target})] = c.id
        elif c.kind == "delete":
            for key, (name, type_, _) in list(rules.redirect.items()):
                if (normalize_name(name), type_) in sources:
                    del rules.redirect[key]
                    rules.deleted[key] = c.id
            for key in sources:
                rules.redirect.pop(key, None)
                rules.deleted[key] = c.id
    return rules


def load_rules(rt: Runtime, topic_id: str) -> RuleSet:
    """The compiled rules of a Topic's corrections (an empty, false RuleSet when it has none)."""
    return compile_rules(list_corrections(rt, topic_id))


# ---------------------------------------------------------------------------- corrections


def _graph_store(rt: Runtime, topic) -> GraphStore:
    from ragtopics.graph.ingest import graph_store  # ingest imports this module for the rules

    graph_settings(topic, "only GraphRAG Topics have a graph to correct", InvalidSettingError)
    return graph_store(rt, topic)


def _find(store: GraphStore, topic, name: str) -> Entity:
    """The stored entity named ``name`` (or an alias of it; an ``ent-…`` id names one exactly)."""
    name = (name or "").strip()
    if not name:
        raise InvalidSettingError("name an entity (its name, an alias, or its id)")
    found = store.entities([name]) if name.startswith("ent-") else []
    entity = found[0] if found else store.entity_by_name(name) if store.exists() else None
    if entity is None:
        raise NotFoundError(
            f"Topic {topic.name!r} has no entity called {name!r} (names and aliases are compared "
            "ignoring case, spaces and punctuation)"
        )
    return entity


def _clean(text: str, what: str) -> str:
    text = " ".join((text or "").split())
    if not text or not normalize_name(text):
        raise InvalidSettingError(f"the {what} must have a letter or digit")
    if len(text) > MAX_NAME_CHARS:
        raise InvalidSettingError(f"the {what} is longer than {MAX_NAME_CHARS} characters")
    return text


@dataclass(frozen=True, slots=True)
class _Planned:
    """A correction checked against the graph, ready to run: the rule to store and the edit that makes it."""

    kind: str
    entity: Entity
    names: list[str]
    target: tuple[str, str]
    edit: Callable[[GraphStore], EditOutcome]


def _run(rt: Runtime, topic, by: str, plan: Callable[[GraphStore], _Planned], wait_s: float) -> Correction:
    """Under the Topic's graph write lock: find and check the entities (``plan``), edit the graph, store the rule.

    The rule's row is committed only once the graph changed (a refused or failed edit stores no rule);
    a new entity gets the vector of its name; the communities are marked due for a recompute.
    """
    from ragtopics.graph.ingest import embed_entities  # ingest imports this module for the rules

    store = _graph_store(rt, topic)
    with graph_write_lock(rt.redis, topic.id, wait_s=wait_s) as fence, rt.metadata.session() as s:
        fenced = store.fence_writes(fence)
        planned = plan(fenced)
        outcome = planned.edit(fenced)
        if outcome.target_id:
            embed_entities(rt, fenced, [outcome.target_id])
        row = GraphCorrectionRow(
            topic_id=topic.id,
            kind=planned.kind,
            name=planned.entity.name,
            type=planned.entity.type,
            names=list(dict.fromkeys(planned.names)),
            target_name=planned.target[0],
            target_type=planned.target[1],
            outcome=outcome.as_dict(),
            created_by=by,
        )
        s.add(row)
        s.flush()
        correction = _correction(row)
    mark_recompute_due(rt, topic.id, f"the graph was corrected ({correction.summary()})")
    log.info("Topic %s: correction %d: %s", topic.name, correction.id, correction.summary())
    return correction


def merge_entities(rt: Runtime, topic, name: str, into: str, *, by: str = "", wait_s: float = LOCK_WAIT_S) -> Correction:
    """Merge the entity ``name`` into the entity ``into`` (see the module docstring).

    Args:
        by: the console user who asks ("" from the CLI); likewise for every correction.
        wait_s: how long to wait for the Topic's graph write lock (an upload holds it while it writes); likewise.

    Raises:
        NotFoundError: when either entity is unknown.
        InvalidSettingError: for a RAG Topic, or when both names are one entity.
    """

    def plan(store: GraphStore) -> _Planned:
        source, target = _find(store, topic, name), _find(store, topic, into)
        if source.id == target.id:
            raise InvalidSettingError(f"{name!r} and {into!r} are already one entity ({target.name!r})")
        return _Planned(
            "merge",
            source,
            [source.name, *source.aliases],
            (target.name, target.type),
            lambda s: move_mentions(s, source, target.name, target.type),
        )

    return _run(rt, topic, by, plan, wait_s)


def split_alias(rt: Runtime, topic, alias: str, entity_name: str, *, by: str = "", wait_s: float = LOCK_WAIT_S) -> Correction:
    """Split the alias ``alias`` off the entity ``entity_name`` into an entity of its own (see the module docstring).

    Raises:
        NotFoundError: when the entity is unknown.
        InvalidSettingError: when ``alias`` is not one of its aliases, differs from its name only in case,
            spaces or punctuation, or is used by none of its chunks (or by all of them: rename it instead).
    """
    alias = _clean(alias, "alias")
    key = normalize_name(alias)

    def plan(store: GraphStore) -> _Planned:
        entity = _find(store, topic, entity_name)
        if key == normalize_name(entity.name):
            raise InvalidSettingError(
                f"{alias!r} is {entity.name!r} itself (names are compared ignoring case, spaces "
                "and punctuation): nothing to split; rename the entity to change how it is written"
            )
        spelled = next((a for a in entity.aliases if normalize_name(a) == key), None)
        if spelled is None:
            raise InvalidSettingError(
                f"{alias!r} is not an alias of {entity.name!r} (its aliases: {', '.join(entity.aliases) or 'none'})"
            )
        said = mentions_of(store, [entity.id])[entity.id]
        chunks = {cid for cid, m in said.items() if key in {normalize_name(n) for n in m.names}}
        if not chunks:
            raise InvalidSettingError(f"no chunk names {entity.name!r} as {spelled!r}: nothing to split off")
        if chunks == set(said):
            raise InvalidSettingError(f"every chunk of {entity.name!r} names it {spelled!r}: rename it instead")
        return _Planned(
            "split",
            entity,
            [spelled],
            (entity.name, entity.type),
            lambda s: move_mentions(s, entity, spelled, entity.type, chunks=chunks, drop_names=[entity.name]),
        )

    return _run(rt, topic, by, plan, wait_s)


def rename_entity(rt: Runtime, topic, name: str, new_name: str, *, by: str = "", wait_s: float = LOCK_WAIT_S) -> Correction:
    """Rename the entity ``name`` to ``new_name`` (into the entity of that name and type, when there is one).

    Raises:
        NotFoundError: when the entity is unknown.
        InvalidSettingError: when the new name is empty, too long or the same.
    """
    new_name = _clean(new_name, "new name")

    def plan(store: GraphStore) -> _Planned:
        entity = _find(store, topic, name)
        if new_name == entity.name:
            raise InvalidSettingError(f"{entity.name!r} is already called that")
        return _Planned(
            "rename",
            entity,
            [entity.name, *entity.aliases],
            (new_name, entity.type),
            lambda s: move_mentions(s, entity, new_name, entity.type),
        )

    return _run(rt, topic, by, plan, wait_s)


def retype_entity(rt: Runtime, topic, name: str, new_type: str, *, by: str = "", wait_s: float = LOCK_WAIT_S) -> Correction:
    """Change the type of the entity ``name`` to ``new_type`` (upper-case; into the entity of its name and that
    type, when there is one).

    Raises:
        NotFoundError: when the entity is unknown.
        InvalidSettingError: when the type is empty, too long or the same.
    """
    new_type = _clean(new_type, "type").upper()

    def plan(store: GraphStore) -> _Planned:
        entity = _find(store, topic, name)
        if new_type == entity.type:
            raise InvalidSettingError(f"{entity.name!r} is already of type {new_type}")
        return _Planned(
            "retype",
            entity,
            [entity.name, *entity.aliases],
            (entity.name, new_type),
            lambda s: move_mentions(s, entity, entity.name, new_type),
        )

    return _run(rt, topic, by, plan, wait_s)


def delete_entity_rule(rt: Runtime, topic, name: str, *, by: str = "", wait_s: float = LOCK_WAIT_S) -> Correction:
    """Delete the entity ``name`` now and at every later upload (see the module docstring).

    Raises:
        NotFoundError: when the entity is unknown.
    """

    def plan(store: GraphStore) -> _Planned:
        entity = _find(store, topic, name)
        return _Planned("delete", entity, [entity.name, *entity.aliases], ("", ""), lambda s: delete_entity(s, entity))

    return _run(rt, topic, by, plan, wait_s)


def correct(
    rt: Runtime, topic, kind: str, name: str, value: str = "", *, by: str = "", wait_s: float = LOCK_WAIT_S
) -> Correction:
    """One correction by kind, as the console and the CLI name it.

    Args:
        kind: ``merge`` (``value``: the entity to merge into), ``split`` (``name``: the alias,
            ``value``: the entity it is split off), ``rename`` (``value``: the new name), ``retype``
            (``value``: the new type) or ``delete``.

    Raises:
        InvalidSettingError: an unknown kind, or a missing value; as the kind's function otherwise.
        StoreUnavailableError: when the graph write lock is not free within ``wait_s`` seconds (nothing changes).
    """
    if kind not in KINDS:
        raise InvalidSettingError(f"no correction {kind!r}; corrections: {', '.join(KINDS)}")
    if kind != "delete" and not (value or "").strip():
        raise InvalidSettingError(
            {
                "merge": "name the entity to merge into",
                "split": "name the entity to split the alias off",
                "rename": "give the new name",
                "retype": "give the new type",
            }[kind]
        )
    if kind == "merge":
        return merge_entities(rt, topic, name, value, by=by, wait_s=wait_s)
    if kind == "split":
        return split_alias(rt, topic, name, value, by=by, wait_s=wait_s)
    if kind == "rename":
        return rename_entity(rt, topic, name, value, by=by, wait_s=wait_s)
    if kind == "retype":
        return retype_entity(rt, topic, name, value, by=by, wait_s=wait_s)
    return delete_entity_rule(rt, topic, name, by=by, wait_s=wait_s)


def history_of(rt: Runtime, topic_id: str, entity: Entity) -> list[dict[str, Any]]:
    """The corrections that concern an entity (by one of its names, or as their target), oldest first."""
    mine = {(normalize_name(n), entity.type) for n in (entity.name, *entity.aliases)}
    return [c.as_dict() for c in list_corrections(rt, topic_id) if c.identities() & mine]
