"""A GraphRAG Topic's PATH way: the shortest chain of relationships between two named entities.

1. **Resolve two entities.** The names the router saw (``RetrievalQuery.entities``), then
   candidate names of the question: quoted text and runs of capitalised words (every
   contiguous part of a run, longest first), then runs of content words. Each is tried, in
   this order until two distinct entities are found: by name or alias
   (:meth:`GraphStore.entities_by_names`, every name in one query); by rapidfuzz against the names
   of the entities the question finds by full text and by vector; by the entity vector of the name itself.
2. **Chain**: :meth:`GraphStore.shortest_path`, at most Path Max Hops relationships, either direction.
3. **Evidence**: one ``path`` item ``A —[desc]— B —[desc]— C`` and the chunks behind the chain's
   relationships and entities (first the best chunk of each relationship, then those that
   support most of the chain, by cosine), at most Max Cited Chunks.

Fewer than two entities, or no chain that short: the LOCAL way's context, with route
``LOCAL`` and a note that says why. Scores: chunks carry their cosine to the question; the
path item the best cosine among the chunks it rests on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import redis
from rapidfuzz import fuzz, process

from ragtopics.answer.context import Context, Evidence, RetrievalQuery
from ragtopics.graph.dedup import name_form
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.local import (
    MAX_CANDIDATE_CHUNKS,
    LocalRetriever,
    fetch_chunks,
    graph_chunk_evidence,
    provenance_of,
    short_description,
    with_chunks,
)
from ragtopics.graph.model import Entity, Relationship
from ragtopics.graph.store import GraphPath, GraphStore, Subgraph
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.storage.chunk_index import ChunkHit
from ragtopics.text.keywords import STOP_WORDS, is_searchable, query_keywords
from ragtopics.tracing.trace import Trace

if TYPE_CHECKING:
    from ragtopics.topics.topics import Topic

log = logging.getLogger(__name__)

#: Least rapidfuzz WRatio (0-100) for a name of the question to stand for an entity's name.
FUZZY_MIN_SCORE = 90
#: Least cosine between a name of the question and an entity's vector ("name: description").
NAME_VECTOR_MIN_SCORE = 0.6
#: Entities found by full text and by vector whose names the fuzzy match compares against.
FUZZY_POOL = 20
#: Longest run of words tried as a name.
MAX_NAME_WORDS = 8
#: Words that start a question (capitalised there) or ask for a connection: never a name of their own.
QUESTION_WORDS = frozenset(
    [
        "how",
        "what",
        "who",
        "whom",
        "whose",
        "which",
        "where",
        "when",
        "why",
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "in",
        "on",
        "of",
        "the",
        "a",
        "an",
        "and",
        "or",
        "between",
        "compare",
        "tell",
        "explain",
        "name",
        "related",
        "relate",
        "relates",
        "relation",
        "relationship",
        "connected",
        "connect",
        "connects",
        "connection",
        "link",
        "linked",
        "links",
        "tie",
        "tied",
    ]
)
_JOINERS = frozenset(["of", "the", "de", "del", "der", "des", "di", "du", "la", "le", "van", "von", "da", "y", "&", "and"])
_TOKEN = re.compile(r"[^\W_][\w'’.&-]*[\w]|[^\W_]", re.UNICODE)
_QUOTED = re.compile(r"[\"“”‘’']([^\"“”‘’']{2,80})[\"“”‘’']")


@dataclass(frozen=True, slots=True)
class Resolved:
    """An entity found for a name of the question.

    Attributes:
        entity: the graph entity.
        name: the text it was found for.
        how: ``name`` (name or alias), ``fuzzy`` or ``vector``.
        score: 1.0 for ``name``; WRatio / 100 for ``fuzzy``; cosine for ``vector``.
    """

    entity: Entity
    name: str
    how: str
    score: float


@dataclass(slots=True)
class PathRetriever:
    """PATH search of a GraphRAG Topic (see the module docstring).

    Args:
        rt: the runtime (embedder, chunk index, graph database).
        topic: the GraphRAG Topic searched.
        settings: the settings to search with (Path Max Hops, Max Cited Chunks; LOCAL's for the fallback).
        route: the route name put on the context.
    """

    rt: Runtime
    topic: Topic
    settings: GraphRagTopicSettings
    route: str = "PATH"

    def retrieve(self, query: RetrievalQuery, trace: Trace) -> Context:
        """Resolve two entities, find the chain, return it with its chunks; else LOCAL (see the module docstring)."""
        cfg = self.settings
        if not is_searchable(query.question):
            trace.add("path", query=query.question, skipped="the question holds no letter or digit")
            return Context((), self.route, "the question has nothing that can be searched")
        store = graph_store(self.rt, self.topic)
        chain: GraphPath | None = None
        with trace.step("path", max_hops=cfg.path_max_hops) as ev:
            vector = self.rt.gateway.embed([query.question], trace=trace, purpose="question")[0]
            found = resolve_entities(store, self.rt, query, vector, trace)
            ev.data["entities"] = [
                {"entity": r.entity.name, "name": r.name, "how": r.how, "score": round(r.score, 4)} for r in found
            ]
            if len(found) < 2:
                why = f"PATH found one entity ({found[0].entity.name})" if found else "PATH found no entity in the question"
                ev.data["fallback"] = why
            else:
                a, b = found[0].entity, found[1].entity
                chain = shortest_chain(store, a, b, cfg.path_max_hops, ev.data)
                if chain is not None:
                    chain = replace(chain, entities=with_chunks(store, Subgraph(chain.entities, ())).entities)
                if chain is None:
                    why = f"no chain of at most {cfg.path_max_hops} hops between {a.name} and {b.name}"
                    ev.data["fallback"] = why
                else:
                    why = ""
                    ev.data["chain"] = [e.name for e in chain.entities]
        if why or chain is None:  # no reason given means a chain was found
            return self.fallback(query, trace, f"{why}; LOCAL instead")
        with trace.step("path_chunks", hops=chain.hops) as ev:
            chunks = fetch_chunks(self.rt.chunk_index(self.topic.id), chain_chunk_ids(chain), vector)
            kept = keep_chain_chunks(chain, chunks, cfg.max_cited_chunks)
            ev.data.update(candidates=len(chunks), kept=kept)
        return Context((path_evidence(chain, chunks, kept), *(graph_chunk_evidence(chunks[c]) for c in kept)), self.route)

    def fallback(self, query: RetrievalQuery, trace: Trace, why: str) -> Context:
        """The LOCAL way's context with route ``LOCAL``, its note starting with ``why``."""
        local = LocalRetriever(self.rt, self.topic, self.settings, route="LOCAL").retrieve(query, trace)
        return Context(local.items, "LOCAL", "; ".join(n for n in (why, local.note) if n))


def candidate_names(question: str) -> list[str]:
    """Names a question may hold, best candidates first (see the module docstring).

    Returns:
        Quoted text; every contiguous part of each run of capitalised words (joined by small words
        such as "of"), longest first; then the runs of content words, longest parts first. No repeats.
    """
    tokens = [(m.start(), m.group(0)) for m in _TOKEN.finditer(question)]
    capital_runs: list[list[str]] = []
    word_runs: list[list[str]] = []
    run: list[str] = []
    words: list[str] = []
    for _, tok in [*tokens, (len(question), "")]:
        is_capital = bool(tok) and (tok[0].isupper() or tok[0].isdigit())
        if is_capital or (run and tok.lower() in _JOINERS):
            run.append(tok)
        else:
            capital_runs.append(run)
            run = []
        if tok and tok.lower() not in STOP_WORDS and tok.lower() not in QUESTION_WORDS:
            words.append(tok)
        else:
            word_runs.append(words)
            words = []
    names = [m.group(1).strip() for m in _QUOTED.finditer(question)]
    for groups in (capital_runs, word_runs):
        names += [" ".join(part) for r in groups for part in _parts(_trim(r))]
    return list(dict.fromkeys(n for n in names if n and n.lower() not in QUESTION_WORDS))


#: Most entities :func:`named_entities` reports for one question.
MAX_NAMED = 5
#: Most candidate names of a question looked up in the graph by :func:`named_entities`.
MAX_NAME_LOOKUPS = 40


def named_entities(store: GraphStore, question: str, router_names: Iterable[str] = ()) -> tuple[str, ...]:
    """The entities of a Topic's graph that a question names, by name or alias (no model call).

    The router's names are tried first, then :func:`candidate_names`; a name inside one already
    found is skipped ("Marie Curie" found, "Curie" is not tried). Used for a GraphRAG Topic's
    routed turn, so that the entities handed to the search are ones the graph holds.

    Returns:
        Entity names as stored, at most :data:`MAX_NAMED`: the router's first, then in candidate order;
        ``()`` when the graph does not exist.
    """
    if not store.exists():
        return ()
    found: dict[str, str] = {}
    tried: list[str] = []
    names = list(dict.fromkeys([*router_names, *candidate_names(question)]))[:MAX_NAME_LOOKUPS]
    by_name = store.entities_by_names(names)  # one round trip for every name
    for name in names:
        if len(found) >= MAX_NAMED or _inside(name, tried):
            continue
        entity = by_name.get(name)
        if entity is not None:
            found.setdefault(entity.id, entity.name)
            tried.append(name)
    return tuple(found.values())


def _trim(run: list[str]) -> list[str]:
    """A run without joiners at its ends, cut to :data:`MAX_NAME_WORDS` words."""
    while run and run[-1].lower() in _JOINERS:
        run = run[:-1]
    return run[:MAX_NAME_WORDS]


def _parts(run: list[str]) -> list[list[str]]:
    """Every contiguous part of a run, longest first (left to right among equal lengths), not ending on a joiner."""
    return [
        run[i : i + n]
        for n in range(len(run), 0, -1)
        for i in range(len(run) - n + 1)
        if run[i + n - 1].lower() not in _JOINERS and run[i].lower() not in _JOINERS
    ]


def resolve_entities(store: GraphStore, rt: Runtime, query: RetrievalQuery, vector: np.ndarray, trace: Trace) -> list[Resolved]:
    """Up to two distinct entities named by the query (see the module docstring), in the order they were named.

    Args:
        store: the Topic's graph.
        rt: the runtime (embeds names for the vector step).
        query: the question and the names the router saw.
        vector: the question's embedding, shape ``(dims,)``.

    Returns:
        Zero, one or two resolved entities; a later name inside an earlier resolved one is skipped.
    """
    names = list(dict.fromkeys([*query.entities, *candidate_names(query.question)]))
    found: dict[str, Resolved] = {}
    taken: list[str] = []

    def add(name: str, entity: Entity | None, how: str, score: float) -> None:
        if entity is not None and entity.id not in found and len(found) < 2 and not _inside(name, taken):
            found[entity.id] = Resolved(entity, name, how, score)
            taken.append(name)

    with trace.step("resolve_entities", names=names[:40]) as ev:
        by_name = store.entities_by_names(names)
        for name in names:
            add(name, by_name.get(name), "name", 1.0)
        unresolved = [n for n in names if not _inside(n, taken)]
        if len(found) < 2 and unresolved:
            for name, (entity, score) in fuzzy_matches(store, query.question, vector, unresolved).items():
                add(name, entity, "fuzzy", score)
        unresolved = [n for n in unresolved if not _inside(n, taken)][:MAX_NAME_WORDS]
        if len(found) < 2 and unresolved:
            vectors = rt.gateway.embed(unresolved, trace=trace, purpose="entity names")
            for name, v in zip(unresolved, vectors):
                hits = store.search_entities(v, 1, NAME_VECTOR_MIN_SCORE)
                if hits:
                    add(name, hits[0][0], "vector", hits[0][1])
        ev.data["resolved"] = [{"name": r.name, "entity": r.entity.name, "how": r.how} for r in found.values()]
    return sorted(found.values(), key=lambda r: _position(query, r.name))


def fuzzy_matches(store: GraphStore, question: str, vector: np.ndarray, names: list[str]) -> dict[str, tuple[Entity, float]]:
    """Names matched by rapidfuzz (WRatio >= :data:`FUZZY_MIN_SCORE`) to the names and aliases of the entities
    the question finds by full text and by vector.

    Returns:
        name → (entity, WRatio / 100), for the names that matched.
    """
    pool = {e.id: e for e, _ in store.search_entities_text(query_keywords(question), FUZZY_POOL)}
    pool |= {e.id: e for e, _ in store.search_entities(vector, FUZZY_POOL)}
    choices = {(eid, alias): name_form(alias) for eid, e in pool.items() for alias in (e.name, *e.aliases)}
    out: dict[str, tuple[Entity, float]] = {}
    for name in names:
        best = process.extractOne(name_form(name), choices, scorer=fuzz.WRatio, score_cutoff=FUZZY_MIN_SCORE)
        if best is not None:
            out[name] = (pool[best[2][0]], best[1] / 100.0)
    return out


def _inside(name: str, taken: Iterable[str]) -> bool:
    """Whether ``name`` is part of (or equal to) a name already resolved."""
    return any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", t) for t in taken)


def _position(query: RetrievalQuery, name: str) -> tuple[int, int]:
    """Where a name was named: the router's names first, then by place in the question."""
    if name in query.entities:
        return (0, query.entities.index(name))
    at = query.question.find(name)
    return (1, at if at >= 0 else len(query.question))


def shortest_chain(store: GraphStore, a: Entity, b: Entity, max_hops: int, note: dict) -> GraphPath | None:
    """:meth:`GraphStore.shortest_path` between two entities; a search that times out counts as no chain (noted)."""
    try:
        return store.shortest_path(a.id, b.id, max_hops)
    except redis.ResponseError as exc:
        note["error"] = f"path search failed: {exc}"
        log.warning("path search between %s and %s failed: %s", a.id, b.id, exc)
        return None


def chain_chunk_ids(chain: GraphPath) -> list[str]:
    """The chunks behind a chain: its relationships' first, then its entities', at most :data:`MAX_CANDIDATE_CHUNKS`."""
    ids = [cid for r in chain.relationships for cid in sorted(r.chunk_ids)]
    ids += [cid for e in chain.entities for cid in sorted(e.chunk_ids)]
    return list(dict.fromkeys(ids))[:MAX_CANDIDATE_CHUNKS]


def keep_chain_chunks(chain: GraphPath, chunks: dict[str, ChunkHit], limit: int) -> list[str]:
    """The chunks to cite: first the best chunk of each relationship, then by support, then by cosine.

    A chunk's support is how many entities and relationships of the chain it carries.

    Returns:
        At most ``limit`` chunk ids in that order.
    """
    items: tuple[Entity | Relationship, ...] = (*chain.entities, *chain.relationships)
    support = {cid: sum(cid in item.chunk_ids for item in items) for cid in chunks}
    ranked = sorted(chunks, key=lambda cid: (-support[cid], -chunks[cid].score, cid))
    first = [next((cid for cid in ranked if cid in r.chunk_ids), None) for r in chain.relationships]
    return list(dict.fromkeys([c for c in first if c] + ranked))[:limit]


def path_evidence(chain: GraphPath, chunks: dict[str, ChunkHit], kept: list[str]) -> Evidence:
    """The chain as one ``path`` item ``A —[desc]— B —[desc]— C``, resting on the kept chunks of its relationships."""
    text = chain.entities[0].name
    for r, nxt in zip(chain.relationships, chain.entities[1:]):
        text += f" —[{short_description(r)}]— {nxt.name}"
    behind = [cid for cid in kept if any(cid in r.chunk_ids for r in chain.relationships)] or kept
    prov = provenance_of(behind, chunks)
    score = max((chunks[c].score for c in behind if c in chunks), default=0.0)
    ids = "-".join(e.id.removeprefix("ent-")[:8] for e in chain.entities)
    return Evidence(kind="path", id=f"path-{ids}", text=text, score=score, provenance=prov)
