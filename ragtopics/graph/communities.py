"""Phase B of a GraphRAG Topic: Leiden communities of the graph and a report per community.

:func:`rebuild` reads the whole graph, groups it with :func:`detect_communities` and
writes a report for every community of two or more entities whose content changed
since the last run; unchanged reports are kept and reports of communities that no
longer exist are deleted, all in one write at the end (:class:`CommunityIndex.put`).

Clustering: Leiden with the modularity objective and a resolution parameter
(Reichardt & Bornholdt's configuration null model, leidenalg's
``RBConfigurationVertexPartition``), not CPM. The spec's Resolution (1.0 standard,
0.5-2.0 useful, higher: more and smaller communities) is modularity's scale: at 1.0 it
is Newman-Girvan modularity, and the null model scales with each node's strength, so
the same value means the same thing for a graph of 50 or 100,000 entities and for
relationship strengths of 1 or 30. CPM's resolution is an absolute density threshold
in edge-weight units (a community must have internal weight density above it): 1.0
with unit weights keeps only cliques, and the useful value moves with the strength
scale, so one Topic setting could not mean one thing. It runs in igraph's own C
implementation (``Graph.community_leiden(objective_function="modularity")``), which
optimises the same quality function as leidenalg's RBConfigurationVertexPartition
(leidenalg's own quality function scores igraph's partitions as high or higher on planted
graphs) but ran about 19 times faster here: 100,000 nodes and 490,000 edges in 0.44 s
against 8.3 s for leidenalg 0.12, whose time alone would use most of the 10 s budget
(``python -m bench.communities``).

Determinism: entities are sorted by id and parallel relationships merged before the
graph is built, and igraph's random number generator is a ``random.Random(seed)`` for
the call, so an unchanged graph gives the same communities whatever order it was read in.
A community's id is a hash of its sorted member ids and its content hash covers the
members' names, types and descriptions and the internal relationships' descriptions.

Reports: with a real Community Report endpoint, one typed model call per changed
community writes title and summary; with the bundled model (too small to summarise)
or when the call fails the report is built from the graph alone (:func:`graph_report`: a
title from the community's distinctive names and kinds of things, a summary of the documents'
sentences that state its strongest relationships, each cited to a chunk). Either way the key
entities and relationships come from the graph (strongest first), so a report is
useful even when the model is small. Its ``method`` says which it was. A graph-built report's
stored hash also carries :data:`GRAPH_REPORT_FORMAT`, so a new offline format rewrites those
reports once and leaves the model's alone (:func:`stored_hash`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Literal

import igraph
import redis
from pydantic import BaseModel, Field

from ragtopics.answer.extractive import split_sentences as extractive_sentences
from ragtopics.errors import ModelUnavailableError, StructuredOutputError
from ragtopics.graph.community_index import CommunityIndex, CommunityRecord
from ragtopics.graph.model import Entity, Relationship
from ragtopics.graph.store import GraphStore
from ragtopics.llm.gateway import MAX_CONCURRENT_CALLS, ModelGateway
from ragtopics.prompts.templates import COMMUNITY_REPORT, PromptTemplate
from ragtopics.storage.chunk_index import ChunkIndex
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: The model role that writes community reports.
ROLE = "community_report"
#: Leiden passes over the graph; a converged run (-1) took 7-8 times as long at 100,000 nodes
#: for a modularity 0.01 % higher (bench/communities.py).
LEIDEN_ITERATIONS = 2
#: Weight of a relationship stored with strength 0: a tie the text names counts for something.
MIN_EDGE_WEIGHT = 0.1
#: Smallest community that gets a report (spec: a single entity gets no summary).
MIN_REPORT_ENTITIES = 2
#: Key entities and key relationships listed in a report.
KEY_ENTITIES = 5
KEY_RELATIONSHIPS = 5
#: Bounds of the report prompt: most entities and relationships listed, characters per
#: description, characters in all (about 2,500 tokens, inside a 4k context with the reply).
PROMPT_MAX_ENTITIES = 30
PROMPT_MAX_RELATIONSHIPS = 40
PROMPT_DESCRIPTION_CHARS = 300
PROMPT_MAX_CHARS = 10_000
#: Longest title and summary kept, and the length of a summary built from the graph alone.
MAX_TITLE_CHARS = 200
MAX_SUMMARY_CHARS = 4000
GRAPH_SUMMARY_CHARS = 1200
#: Tokens the model may write for a report (title and a few sentences of summary as JSON).
REPORT_MAX_TOKENS = 600
#: After this many report calls in a row fail to reach the model, the rest of the run is
#: built from the graph (a dead endpoint would otherwise cost every community its retries).
MAX_CONSECUTIVE_MODEL_FAILURES = 3
#: Part of every content hash: raising it rewrites every report at the next run.
REPORT_FORMAT_VERSION = "1"
#: Version of the report built from the graph alone (:func:`graph_report`). It is part of the hash stored with such
#: a report (:func:`stored_hash`), so raising it rewrites the graph-built reports once at the next run and leaves
#: the reports a model wrote (and their model calls) alone.
GRAPH_REPORT_FORMAT = "3"
#: Members whose ties and descriptions a graph-built summary states (the strongest, by weighted degree).
SUMMARY_TOP_ENTITIES = 8
#: Most summary sentences taken from one chunk before every other chunk has had its turn, so one passage does not
#: stand for the whole community (what is left of the summary's length is filled without the limit).
SUMMARY_SENTENCES_PER_CHUNK = 2
#: Two sentences whose content words overlap this much (Jaccard) say the same thing; the second is left out.
NEAR_DUPLICATE_JACCARD = 0.8
#: Chunks of a community read for its distinctive terms (its strongest members' first): bounds the cost per report.
TERM_CHUNKS_PER_COMMUNITY = 300
#: Description text read for a graph-built summary, in multiples of its length (the strongest ties' first): bounds
#: the sentence splitting of a community with thousands of relationships.
CANDIDATE_CHARS_FACTOR = 6
#: Candidate chunks read per summary sentence to find the one that holds it (:func:`cite_chunks`).
CITE_CANDIDATES = 20
#: Distinctive terms a graph-built title leads with, and member names it lists after them.
TITLE_TERMS = 2
TITLE_NAMES = 3
#: Entity types that say what a community is about rather than who is in it: noun phrases (CONCEPT), groups
#: and nationalities, languages, events and laws. A title leads with such terms when the community has any.
DESCRIPTIVE_TYPES = frozenset({"CONCEPT", "GROUP", "LANGUAGE", "EVENT", "LAW"})
#: Plural nouns for the member types a title names ("people and works"); other types are lower-cased with an "s".
TYPE_NOUNS = {
    "PERSON": "people",
    "PLACE": "places",
    "ORGANIZATION": "organizations",
    "WORK": "works",
    "PRODUCT": "products",
    "EVENT": "events",
    "GROUP": "groups",
    "LANGUAGE": "languages",
    "LAW": "laws",
    "CODE": "codes",
}
#: A member type is named in the title when at least this share of the named members has it.
TITLE_TYPE_SHARE = 0.25

#: ``progress(phase, done, total)``, as in the upload pipeline; phases ``detect``, ``reports``, ``write``.
ProgressFn = Callable[[str, int, int], None]

_IGRAPH_RNG_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Community:
    """A group of closely connected entities.

    Attributes:
        id: ``community-`` + 16 hex digits of SHA-1 over the sorted member ids (stable for the same membership).
        entity_ids: member ids, sorted.
        relationship_keys: ``(source_id, target_id)`` of every relationship with both ends inside, sorted.
        content_hash: SHA-1 (hex) over the members' ids, names, types and descriptions and the
            internal relationships' keys and descriptions.
    """

    id: str
    entity_ids: tuple[str, ...]
    relationship_keys: tuple[tuple[str, str], ...]
    content_hash: str

    @property
    def size(self) -> int:
        """Number of member entities."""
        return len(self.entity_ids)


class CommunityReport(BaseModel):
    """The report of one community: what GLOBAL search reads."""

    title: str = Field(description="A short name for the community.")
    summary: str = Field(description="What connects the members, in a few sentences.")
    key_entities: list[str] = Field(default_factory=list, description="Names of the most connected members, strongest first.")
    key_relationships: list[str] = Field(
        default_factory=list, description="The strongest internal relationships, 'A - B: description'."
    )
    method: Literal["model", "graph"] = Field(
        "graph", description="model: written by the Community Report model; graph: built from the graph alone."
    )
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="Each summary sentence taken from the documents, in the summary's order, with the id of a chunk "
        "that holds it (a chunk of the relationship or member it was read from); empty for a model's summary.",
    )
    candidates: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        exclude=True,
        description="Each summary sentence's candidate chunks (not stored; :func:`cite_chunks` picks among them).",
    )


class ReportDraft(BaseModel):
    """The Community Report model's typed reply: title and summary only (the lists come from the graph)."""

    title: str = Field(description="A short name for the group, at most ten words.")
    summary: str = Field(description="Three to six sentences on what the group is about and how its members are connected.")


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What one :func:`rebuild` did.

    Attributes:
        written: reports written (new or changed communities).
        kept: reports kept because their community did not change.
        deleted: stored reports removed because their community no longer exists.
        communities: communities found, singletons included.
        skipped_small: communities below :data:`MIN_REPORT_ENTITIES` (no report).
        seconds: wall time of the run.
        model_calls: report calls made to the Community Report model.
        model_failures: of those, calls that failed (their reports were built from the graph).
        method: ``"model"`` or ``"graph"``: how changed reports were to be written.
        resolution: the Resolution the run used.
        entities, relationships: size of the graph read.
        finished_at: wall-clock end, seconds since the epoch.
        half_entities, half_reportable, half_kept: the same detection on the graph of half the Topic's chunks
            (:func:`half_graph_growth`): its entities, its communities of two or more entities, and how many of
            those come out unchanged in the whole graph. The cost estimate reads how the reports grow and
            change with the graph from them (:mod:`ragtopics.ingest.cost`).
    """

    written: int
    kept: int
    deleted: int
    communities: int
    skipped_small: int
    seconds: float
    model_calls: int = 0
    model_failures: int = 0
    method: str = "graph"
    resolution: float = 1.0
    entities: int = 0
    relationships: int = 0
    finished_at: float = 0.0
    half_entities: int = 0
    half_reportable: int = 0
    half_kept: int = 0


# ----------------------------------------------------------------------------- detection


def detect_communities(
    entities: Iterable[Entity], relationships: Iterable[Relationship], *, resolution: float, seed: int = 42
) -> list[Community]:
    """Leiden communities of the graph (undirected, edge weight = strength), modularity with a resolution.

    Args:
        entities: every entity of the graph, in any order.
        relationships: its relationships in any order; both directions of a pair count as one
            edge (strengths summed); self-loops and ones naming an unknown entity are ignored.
        resolution: > 0; higher gives more and smaller communities (1.0: plain modularity).
        seed: seed of the random number generator; the same graph and seed give the same communities.

    Returns:
        Every community, singletons included: largest first, then by id.

    Raises:
        ValueError: when ``resolution`` is not positive.
    """
    if resolution <= 0:
        raise ValueError(f"resolution must be positive, got {resolution}")
    by_id = {e.id: e for e in entities}
    ids = sorted(by_id)
    index = {eid: i for i, eid in enumerate(ids)}
    rels = [r for r in relationships if r.source_id != r.target_id and r.source_id in index and r.target_id in index]
    weights: dict[tuple[int, int], float] = {}
    for rel in rels:
        a, b = sorted((index[rel.source_id], index[rel.target_id]))
        weights[(a, b)] = weights.get((a, b), 0.0) + max(float(rel.strength), MIN_EDGE_WEIGHT)
    edges = sorted(weights)
    membership = leiden_membership(len(ids), edges, [weights[e] for e in edges], resolution=resolution, seed=seed)
    groups: dict[int, list[str]] = {}
    for eid, label in zip(ids, membership):
        groups.setdefault(label, []).append(eid)
    label_of = dict(zip(ids, membership))
    inside: dict[int, list[Relationship]] = {}
    for rel in rels:
        if label_of[rel.source_id] == label_of[rel.target_id]:
            inside.setdefault(label_of[rel.source_id], []).append(rel)
    found = [_community([by_id[i] for i in members], inside.get(label, [])) for label, members in groups.items()]
    return sorted(found, key=lambda c: (-c.size, c.id))


def in_half(chunk_id: str) -> bool:
    """Whether a chunk is in the fixed half of a Topic's chunks that :func:`half_graph_growth` keeps (by a hash of its id)."""
    return hashlib.sha1(chunk_id.encode()).digest()[0] < 128


def half_graph_growth(
    entities: list[Entity], relationships: list[Relationship], communities: list[Community], *, resolution: float, seed: int = 42
) -> tuple[int, int, int]:
    """How the communities change when the graph grows: the graph as half of its chunks made it, against the whole.

    The half graph holds the entities and relationships that a fixed half of the chunks (:func:`in_half`)
    mention, as if only those had been uploaded; the other half plays the upload that came after. A community
    of the half graph is *kept* when the whole graph has the same community (same members) and the other
    half mentions none of its members and none of its internal relationships, so its content is unchanged
    too (:func:`content_hash_for` covers what those chunks add).

    Args:
        entities, relationships: the whole graph, with each item's ``chunk_ids``.
        communities: :func:`detect_communities` of the whole graph at ``resolution``.

    Returns:
        ``(entities of the half graph, its communities of two or more entities, of those kept in the whole)``.
    """
    half = [e for e in entities if any(in_half(c) for c in e.chunk_ids)]
    if not half:
        return 0, 0, 0
    ids = {e.id for e in half}
    rels = [r for r in relationships if r.source_id in ids and r.target_id in ids and any(in_half(c) for c in r.chunk_ids)]
    found = [c for c in detect_communities(half, rels, resolution=resolution, seed=seed) if c.size >= MIN_REPORT_ENTITIES]
    whole = {c.id for c in communities}
    touched = {e.id for e in half if not all(in_half(c) for c in e.chunk_ids)}
    touched |= {i for r in rels if not all(in_half(c) for c in r.chunk_ids) for i in (r.source_id, r.target_id)}
    kept = sum(1 for c in found if c.id in whole and not touched.intersection(c.entity_ids))
    return len(half), len(found), kept


def leiden_membership(n: int, edges: list[tuple[int, int]], weights: list[float], *, resolution: float, seed: int) -> list[int]:
    """Leiden community labels of ``n`` nodes (igraph, modularity objective with ``resolution``).

    igraph draws from one process-wide generator; it is swapped for ``random.Random(seed)``
    under a lock for the call and set back to the ``random`` module (igraph's default) after.

    Returns:
        One label per node (labels are arbitrary integers; equal labels: same community).
    """
    if not edges:
        return list(range(n))
    graph = igraph.Graph(n=n, edges=edges, directed=False)
    with _IGRAPH_RNG_LOCK:
        igraph.set_random_number_generator(random.Random(seed))
        try:
            clustering = graph.community_leiden(
                objective_function="modularity", weights=weights, resolution=resolution, n_iterations=LEIDEN_ITERATIONS
            )
        finally:
            igraph.set_random_number_generator(random)
    return list(clustering.membership)


def community_id_for(entity_ids: Iterable[str]) -> str:
    """Stable id of a community: ``community-`` + 16 hex digits of SHA-1 over its sorted member ids."""
    return "community-" + hashlib.sha1("\n".join(sorted(entity_ids)).encode()).hexdigest()[:16]


def content_hash_for(members: Iterable[Entity], relationships: Iterable[Relationship]) -> str:
    """SHA-1 (hex) over members (id, name, type, description) and relationships (ends, description), order-free."""
    digest = hashlib.sha1(f"v{REPORT_FORMAT_VERSION}\n".encode())
    for e in sorted(members, key=lambda e: e.id):
        digest.update(f"E\0{e.id}\0{e.name}\0{e.type}\0{e.description}\n".encode())
    for r in sorted(relationships, key=lambda r: (r.source_id, r.target_id)):
        digest.update(f"R\0{r.source_id}\0{r.target_id}\0{r.description}\n".encode())
    return digest.hexdigest()


def _community(members: list[Entity], relationships: list[Relationship]) -> Community:
    keys = tuple(sorted({(r.source_id, r.target_id) for r in relationships}))
    return Community(
        id=community_id_for(e.id for e in members),
        entity_ids=tuple(sorted(e.id for e in members)),
        relationship_keys=keys,
        content_hash=content_hash_for(members, relationships),
    )


# ----------------------------------------------------------------------------- reports


@dataclass(frozen=True, slots=True)
class CommunityContent:
    """A community with its members and internal relationships, strongest first (what a report is written from).

    Attributes:
        community: the community.
        entities: members by weighted degree inside the community (summed strength), then by name.
        relationships: internal relationships by strength, then by their ends.
    """

    community: Community
    entities: tuple[Entity, ...]
    relationships: tuple[Relationship, ...]


def community_content(
    community: Community, entities_by_id: dict[str, Entity], relationships_by_key: dict[tuple[str, str], Relationship]
) -> CommunityContent:
    """The members and internal relationships of ``community``, ranked (see :class:`CommunityContent`)."""
    rels = [relationships_by_key[k] for k in community.relationship_keys if k in relationships_by_key]
    degree = dict.fromkeys(community.entity_ids, 0.0)
    for rel in rels:
        degree[rel.source_id] += rel.strength
        degree[rel.target_id] += rel.strength
    members = sorted(
        (entities_by_id[i] for i in community.entity_ids if i in entities_by_id),
        key=lambda e: (-degree[e.id], e.name.casefold(), e.id),
    )
    rels.sort(key=lambda r: (-r.strength, r.source_id, r.target_id))
    return CommunityContent(community, tuple(members), tuple(rels))


@dataclass(frozen=True, slots=True)
class Term:
    """A term of a community's chunks, weighed against the whole Topic (:func:`distinctive_terms`).

    Attributes:
        text: an entity's name, or the head noun of noun phrases in the plural ("airports").
        kind: ``"name"`` (a named entity: person, place, group…) or ``"head"`` (what noun phrases name).
        tf: how many of the community's chunks name it.
        weight: its keyness in the community (:func:`keyness`, G²).
        entity: the entity, for a name; None for a head noun.
    """

    text: str
    kind: Literal["name", "head"]
    tf: int
    weight: float
    entity: Entity | None = None


@dataclass(frozen=True, slots=True)
class TopicTerms:
    """What the distinctive terms of a community are weighed against: the whole Topic's entities and sentences.

    Attributes:
        entities: every entity of the Topic by id.
        by_chunk: chunk id → ids of the named entities (not noun phrases) that name it (each entity's chunk sample).
        nouns: the head nouns of the Topic's noun phrases (CONCEPT names: "public use airport" → ``airport``), singular.
        noun_sentences: noun → how many distinct sentences of the Topic's entity descriptions hold it.
        chunks: chunks of the Topic that name an entity.
        sentences: distinct sentences of the Topic's entity descriptions.
    """

    entities: dict[str, Entity]
    by_chunk: dict[str, tuple[str, ...]]
    nouns: frozenset[str]
    noun_sentences: dict[str, int]
    chunks: int
    sentences: int

    @classmethod
    def of(cls, entities: Iterable[Entity]) -> TopicTerms:
        """The statistics of a Topic's entities (one pass over their names, chunk samples and descriptions)."""
        by_id = {e.id: e for e in entities}
        by_chunk: dict[str, list[str]] = {}
        for e in by_id.values():
            if e.type != "CONCEPT":
                for cid in e.chunk_ids:
                    by_chunk.setdefault(cid, []).append(e.id)
        nouns = frozenset(n for e in by_id.values() if e.type == "CONCEPT" for n in [head_noun(e.name)] if n)
        counts: dict[str, int] = {}
        sentences = _distinct_sentences(by_id.values())
        for noun in (n for sentence in sentences for n in _nouns_in(sentence, nouns)):
            counts[noun] = counts.get(noun, 0) + 1
        every_chunk = {c for e in by_id.values() for c in e.chunk_ids}
        return cls(by_id, {c: tuple(ids) for c, ids in by_chunk.items()}, nouns, counts, len(every_chunk), len(sentences))


#: Head nouns that name no kind of thing ("the vast majority", "a number of", "part").
_EMPTY_HEADS = frozenset(
    {"majority", "number", "part", "lot", "kind", "type", "sort", "member", "one", "time", "way", "year", "day", "end", "use"}
    | {"north", "south", "east", "west", "side", "top", "bottom", "beginning", "rest", "name", "word", "thing"}
)
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


def head_noun(phrase: str) -> str:
    """The head noun of an English noun phrase, lower-cased and singular: its last word
    ("public use airport" → ``airport``, "Bollywood actresses" → ``actress``, "the cities" → ``city``).

    Returns:
        "" when the last word is not a lower-case word of at least three letters (a name, a number, a code) or
        names no kind of thing (:data:`_EMPTY_HEADS`).
    """
    words = _WORD.findall(phrase)
    if not words or not words[-1].islower() or not words[-1].isascii() or len(words[-1]) < 3:
        return ""
    word = _singular(words[-1])
    return "" if word in _EMPTY_HEADS else word


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "oes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def plural(noun: str) -> str:
    """An English noun in the plural by the regular rules (``city`` → ``cities``, ``actress`` → ``actresses``)."""
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "z", "ch", "sh")) else "s")


def _distinct_sentences(entities: Iterable[Entity]) -> set[str]:
    return {s for e in entities for s in re.split(r"(?<=[.!?])\s+", e.description) if s}


def _nouns_in(sentence: str, nouns: frozenset[str]) -> set[str]:
    return {n for w in _WORD.findall(sentence) if w.islower() and w.isascii() for n in [_singular(w)] if n in nouns}


def keyness(a: int, inside: int, f: int, total: int) -> float:
    """Log-likelihood keyness (G²) of a term counted ``a`` times in ``inside`` units of a community and ``f`` times
    in ``total`` units of the whole Topic (Dunning 1993, "Accurate methods for the statistics of surprise and
    coincidence"; as corpus linguistics ranks the key words of a text against a reference corpus, Rayson & Garside
    2000): ``2 · Σ O · ln(O / E)`` over the community and the rest, 0 when the term is not more frequent inside.

    Unlike TF-IDF's ``tf · log(1 + A / f)`` (BERTopic's class-based c-TF-IDF, tried first), which ranked words met
    twice in the whole Topic above a community's main subject ("phones" above "films"), G² grows with the evidence,
    so a term must be both over-represented and frequent in the community to rank high.
    """
    f = max(f, a)
    total = max(total, inside, 1)
    expected = inside * f / total
    if a <= expected or inside >= total:
        return 0.0
    rest, rest_expected = f - a, (total - inside) * f / total
    return 2.0 * (a * math.log(a / expected) + (rest * math.log(rest / rest_expected) if rest else 0.0))


def distinctive_terms(content: CommunityContent, terms: TopicTerms) -> list[Term]:
    """The terms frequent in a community's text and rare in the rest of the Topic, best first, by :func:`keyness`.

    Two kinds of terms, each weighed against its own counts in the whole Topic:

    * **names**, the graph's named entities (not noun phrases), counted in chunks: how many of the community's
      chunks name one (its members' chunks, at most :data:`TERM_CHUNKS_PER_COMMUNITY`, strongest members first)
      against its mentions among all the Topic's chunks;
    * **nouns**, the head nouns of the Topic's noun phrases (``airport``, ``film``), counted in sentences: how many
      distinct sentences of the members' descriptions (the documents' sentences that name them) hold one, against
      the same over every entity of the Topic. They say what kind of things a community is about.

    Returns:
        Every term counted at least twice in the community (once is no theme) and over-represented in it, by
        weight, then by text.
    """
    chunks: dict[str, None] = {}
    for member in content.entities:
        for cid in sorted(member.chunk_ids):
            chunks.setdefault(cid)
        if len(chunks) >= TERM_CHUNKS_PER_COMMUNITY:
            break
    read = list(chunks)[:TERM_CHUNKS_PER_COMMUNITY]
    names: dict[str, int] = {}
    for cid in read:
        for eid in terms.by_chunk.get(cid, ()):
            names[eid] = names.get(eid, 0) + 1
    sentences = _distinct_sentences(content.entities)
    nouns: dict[str, int] = {}
    for sentence in sentences:
        for noun in _nouns_in(sentence, terms.nouns):
            nouns[noun] = nouns.get(noun, 0) + 1
    out = [
        Term(e.name, "name", n, keyness(n, len(read), e.mentions, terms.chunks), e)
        for eid, n in names.items()
        if n >= 2
        for e in [terms.entities[eid]]
    ]
    out += [
        Term(plural(noun), "head", n, keyness(n, len(sentences), terms.noun_sentences.get(noun, 0), terms.sentences))
        for noun, n in nouns.items()
        if n >= 2
    ]
    return sorted((t for t in out if t.weight > 0), key=lambda t: (-t.weight, t.text.casefold()))


def graph_report(content: CommunityContent, terms: TopicTerms | None = None) -> CommunityReport:
    """A report built from the graph alone: a title that says what the community is about, and a summary in the
    documents' own sentences, each with a chunk to cite.

    * **Title** (:func:`theme_title`): the community's most distinctive names and kinds of things against the
      whole Topic (:func:`distinctive_terms`, log-likelihood keyness), then its strongest named members:
      ``Indian and Shabana Azmi: films and actresses (India, Bollywood, West Bengal …)``. Without ``terms``, or
      when no term is counted twice in it, the title lists its strongest members, named ones first.
    * **Summary** (:func:`summary_sentences`): the sentences that state the relationships among its
      :data:`SUMMARY_TOP_ENTITIES` strongest members (strongest relationship first), then its other internal
      relationships, then what the documents say of its strongest named members; whole sentences, each once,
      up to :data:`GRAPH_SUMMARY_CHARS`. ``sources`` cites each to the first of its candidate chunks
      (``candidates``; :func:`cite_chunks` then picks the one whose text holds it). Offline, GLOBAL quotes the
      summary sentences (:mod:`ragtopics.graph.global_search`) and cites the document of each.

    Returns:
        A report with ``method="graph"``.
    """
    names = {e.id: e.name for e in content.entities}
    ranked = [e for e in content.entities if e.type != "CONCEPT"] + [e for e in content.entities if e.type == "CONCEPT"]
    distinctive = distinctive_terms(content, terms) if terms is not None else []
    title = theme_title(content, distinctive)
    candidates = summary_sentences(content)
    return CommunityReport(
        title=_clip(title, MAX_TITLE_CHARS),
        summary=" ".join(candidates) or title,
        key_entities=[e.name for e in ranked[:KEY_ENTITIES]],
        key_relationships=[_relationship_line(r, names) for r in content.relationships[:KEY_RELATIONSHIPS]],
        method="graph",
        sources={sentence: chunks[0] if chunks else "" for sentence, chunks in candidates.items()},
        candidates=candidates,
    )


def cite_chunks(reports: list[CommunityReport], texts: Callable[[list[str]], dict[str, str]]) -> list[CommunityReport]:
    """Graph-built reports with each summary sentence cited to the candidate chunk whose text holds it.

    A relationship of several chunks has a description merged from all of them, so its first chunk need not be
    the one a sentence was read from. The candidates of every sentence (at most :data:`CITE_CANDIDATES` each) are
    read at once; a sentence keeps its first candidate when none holds it (whitespace collapsed on both sides).

    Args:
        reports: reports of :func:`graph_report` (others are returned unchanged).
        texts: chunk ids → their texts (ids not stored are left out).

    Returns:
        The reports, in order, with ``sources`` corrected.
    """
    wanted = list(
        dict.fromkeys(c for r in reports for chunks in r.candidates.values() if len(chunks) > 1 for c in chunks[:CITE_CANDIDATES])
    )
    if not wanted:
        return reports
    found = {cid: " ".join(text.split()) for cid, text in texts(wanted).items()}
    out = []
    for report in reports:
        sources = dict(report.sources)
        for sentence, chunks in report.candidates.items():
            holder = next((c for c in chunks[:CITE_CANDIDATES] if sentence in found.get(c, "")), None)
            if holder is not None:
                sources[sentence] = holder
        out.append(report.model_copy(update={"sources": sources}))
    return out


def theme_title(content: CommunityContent, distinctive: list[Term]) -> str:
    """``<names>: <kinds> (<members> …)``: what a community is about, then who is in it.

    Args:
        content: the community, members strongest first.
        distinctive: its :func:`distinctive_terms`, best first.

    Returns:
        The title: its :data:`TITLE_TERMS` most distinctive names (its strongest named members when none is
        named in two of its chunks), then its two most distinctive kinds of things (head nouns; else the member
        types held by at least :data:`TITLE_TYPE_SHARE` of its named members: "people and works"), then up to
        :data:`TITLE_NAMES` of its strongest named members not already named (``…`` when there are more members).
        A community whose chunks give no distinctive term is titled by its strongest members, named ones first.
    """
    named = [e for e in content.entities if e.type != "CONCEPT"]
    lead: list[str] = []
    for term in (t for t in distinctive if t.kind == "name"):
        key = term.text.casefold()
        if len(lead) < TITLE_TERMS and not any(key in k.casefold() or k.casefold() in key for k in lead):
            lead.append(term.text)
    kinds = [t.text for t in distinctive if t.kind == "head"][:2]
    if not lead and not kinds:
        ranked = named + [e for e in content.entities if e.type == "CONCEPT"]
        top = [e.name for e in ranked[:3]]
        title = top[0] if len(top) == 1 else f"{', '.join(top[:-1])} and {top[-1]}"
        more = len(content.entities) - len(top)
        return f"{title} (+{more} more)" if more > 0 else title
    lead = lead or [e.name for e in named[:TITLE_TERMS]]
    if not kinds:
        counts: dict[str, int] = {}
        for e in named:
            counts[e.type] = counts.get(e.type, 0) + 1
        types = [t for t, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])) if n >= TITLE_TYPE_SHARE * len(named)]
        kinds = [TYPE_NOUNS.get(t, t.lower().replace("_", " ") + "s") for t in types[:2]]
    head = " and ".join(lead) if lead else ""
    title = ": ".join(part for part in (head, " and ".join(kinds)) if part)
    title = title[:1].upper() + title[1:]
    shown = {n.casefold() for n in lead}
    people = [e.name for e in named if e.name.casefold() not in shown][:TITLE_NAMES]
    if people:
        rest = " …" if len(content.entities) > len(lead) + len(people) else ""
        title += f" ({', '.join(people)}{rest})"
    return title


def summary_sentences(content: CommunityContent) -> dict[str, tuple[str, ...]]:
    """The sentences of a graph-built summary, in order, each with the chunks it may come from (see
    :func:`graph_report`): a relationship's chunks (each names both ends) or a member's (its chunk sample), sorted;
    :func:`cite_chunks` finds the one that holds it.

    Sentences cut short (``…``), fragments, sentences under five words and those already said (same words, or
    :data:`NEAR_DUPLICATE_JACCARD` of the same content words) are left out; a heading run into a sentence
    (``Title: The first sentence``) is kept as the sentence. At most :data:`SUMMARY_SENTENCES_PER_CHUNK` come
    from one chunk until every candidate has been seen; what is left of :data:`GRAPH_SUMMARY_CHARS` is then filled
    in the same order.
    """
    rank = {e.id: n for n, e in enumerate(content.entities)}
    top = set(list(rank)[:SUMMARY_TOP_ENTITIES])
    inner = [r for r in content.relationships if r.source_id in top and r.target_id in top]
    inner.sort(key=lambda r: (-r.strength, rank[r.source_id] + rank[r.target_id], r.source_id, r.target_id))
    outer = [r for r in content.relationships if not (r.source_id in top and r.target_id in top)]
    named = [e for e in content.entities if e.id in top and e.type != "CONCEPT"] or [e for e in content.entities if e.id in top]
    texts = [(r.description, tuple(sorted(r.chunk_ids))) for r in inner + outer]
    texts += [(e.description, tuple(sorted(e.chunk_ids))) for e in named]
    candidates: list[tuple[str, tuple[str, ...]]] = []
    read = 0
    for text, chunks in texts:  # in order, until there is CANDIDATE_CHARS_FACTOR times the summary's length to pick from
        if read >= CANDIDATE_CHARS_FACTOR * GRAPH_SUMMARY_CHARS:
            break
        read += len(text)
        for whole in document_sentences(text):
            # a description clipped at "…" and the next one can run together into one sentence: split them there
            for sentence in map(_without_heading, (piece.strip() for piece in _CLIPPED.split(whole))):
                if _SENTENCE.match(sentence) and "…" not in sentence and len(sentence.split()) >= 5:
                    candidates.append((sentence, chunks))
    kept: dict[str, tuple[str, ...]] = {}
    words: list[set[str]] = []
    per_chunk: dict[str, int] = {}
    budget = GRAPH_SUMMARY_CHARS
    for capped in (True, False):  # a second pass fills what is left when few chunks say much
        for sentence, chunks in candidates:
            first = chunks[0] if len(chunks) == 1 else ""  # a sentence of several chunks counts for none of them
            if sentence in kept or len(sentence) > budget:
                continue
            if capped and first and per_chunk.get(first, 0) >= SUMMARY_SENTENCES_PER_CHUNK:
                continue
            own = _content_words(sentence)
            if any(_jaccard(own, w) >= NEAR_DUPLICATE_JACCARD for w in words):
                continue
            kept[sentence] = chunks
            words.append(own)
            per_chunk[first] = per_chunk.get(first, 0) + 1
            budget -= len(sentence) + 1
            if budget < 40:
                return kept
    return kept


#: A whole sentence: it starts with a capital letter, a digit or an opening quote and ends with a full stop, a
#: question or exclamation mark (a closing quote or bracket after it allowed); a clipped one (``…``) or a fragment
#: ("of authorized translations is …", "(IATA: ALY) is …") is not.
_SENTENCE = re.compile(r"""^["'“‘]?[A-Z0-9À-Ý].*[.!?]["'”’)]?$""", re.DOTALL)
#: ``Heading: Sentence``: a heading line that NLP extraction joined to the sentence after it (up to eight words,
#: no sentence end inside), followed by a capitalised sentence.
_HEADING = re.compile(r"^(?:[^.!?:]{1,80}?): (?=[A-Z0-9\"'(])")
_CONTENT_WORD = re.compile(r"[^\W_]+")
#: Where a clipped description (``…``) ends inside a merged description's sentence.
_CLIPPED = re.compile(r"…\s+")


def document_sentences(text: str) -> list[str]:
    """A description's sentences as spaCy's rule-based sentencizer cuts them (it keeps "J. K. Rowling" and "U.S."
    whole, where a split at every full stop does not; :func:`~ragtopics.answer.extractive.split_sentences`)."""
    return extractive_sentences(text)


def _without_heading(sentence: str) -> str:
    match = _HEADING.match(sentence)
    if match and len(match.group(0).split()) <= 8 and len(sentence[match.end() :].split()) >= 5:
        return sentence[match.end() :]
    return sentence


def _content_words(sentence: str) -> set[str]:
    return {w for w in _CONTENT_WORD.findall(sentence.casefold()) if len(w) > 3}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def report_prompt(content: CommunityContent, template: PromptTemplate = COMMUNITY_REPORT) -> str:
    """The Community Report prompt of one community, bounded in size.

    Lists at most :data:`PROMPT_MAX_ENTITIES` members and :data:`PROMPT_MAX_RELATIONSHIPS`
    relationships (strongest first, descriptions cut to :data:`PROMPT_DESCRIPTION_CHARS`),
    and stops adding lines at :data:`PROMPT_MAX_CHARS` characters; it says how many were left out.
    """
    names = {e.id: e.name for e in content.entities}
    entity_lines = [
        f"- {e.name} ({e.type})" + (f": {_clip(e.description, PROMPT_DESCRIPTION_CHARS)}" if e.description else "")
        for e in content.entities[:PROMPT_MAX_ENTITIES]
    ]
    relation_lines = [
        f"- {_relationship_line(r, names, PROMPT_DESCRIPTION_CHARS)} (strength {r.strength:g})"
        for r in content.relationships[:PROMPT_MAX_RELATIONSHIPS]
    ]
    half = PROMPT_MAX_CHARS // 2
    entities = _bounded(entity_lines, len(content.entities), half, "entities")
    relationships = _bounded(relation_lines, len(content.relationships), PROMPT_MAX_CHARS - len(entities), "relationships")
    return template.render(entities=entities, relationships=relationships or "(none)")


def model_report(
    content: CommunityContent, gateway: ModelGateway, *, template: PromptTemplate = COMMUNITY_REPORT, trace: Trace | None = None
) -> CommunityReport:
    """A report whose title and summary the Community Report model writes (one typed call).

    The key entities and relationships come from the graph; an empty title or summary
    in the reply is filled from :func:`graph_report`.

    Raises:
        StructuredOutputError: when the reply does not fit :class:`ReportDraft`.
        ModelUnavailableError: when the endpoint cannot be reached.
    """
    messages = [{"role": "user", "content": report_prompt(content, template)}]
    draft = gateway.structured(ROLE, messages, ReportDraft, prompt_name=template.name, trace=trace, max_tokens=REPORT_MAX_TOKENS)
    fallback = graph_report(content)
    return fallback.model_copy(
        update={
            "title": _clip(" ".join(draft.title.split()), MAX_TITLE_CHARS) or fallback.title,
            "summary": _clip(draft.summary.strip(), MAX_SUMMARY_CHARS) or fallback.summary,
            "method": "model",
            "sources": {} if draft.summary.strip() else fallback.sources,
        }
    )


def uses_bundled_model(gateway: ModelGateway) -> bool:
    """Whether the Community Report role is served by the bundled model (decided as the Router's AUTO is:
    ``settings.endpoint(role).is_local``); reports are then built from the graph alone."""
    return gateway.endpoint(ROLE).is_local


def _relationship_line(rel: Relationship, names: dict[str, str], max_chars: int = PROMPT_DESCRIPTION_CHARS) -> str:
    ends = f"{names.get(rel.source_id, rel.source_id)} - {names.get(rel.target_id, rel.target_id)}"
    return f"{ends}: {_clip(rel.description, max_chars)}" if rel.description else ends


def _bounded(lines: list[str], total: int, max_chars: int, noun: str) -> str:
    kept, used = [], 0
    for line in lines:
        if used + len(line) + 1 > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    if total > len(kept):
        kept.append(f"(and {total - len(kept)} more {noun})")
    return "\n".join(kept)


def _clip(text: str, max_chars: int) -> str:
    text = text.strip()
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


# ----------------------------------------------------------------------------- rebuild


class _ModelBreaker:
    """Counts report calls that could not reach the model; open after :data:`MAX_CONSECUTIVE_MODEL_FAILURES` in a row."""

    def __init__(self) -> None:
        self.calls = self.failures = self._in_a_row = 0
        self._lock = threading.Lock()

    def is_open(self) -> bool:
        with self._lock:
            return self._in_a_row >= MAX_CONSECUTIVE_MODEL_FAILURES

    def record(self, *, called: bool, failed: bool, unreachable: bool) -> None:
        with self._lock:
            self.calls += called
            self.failures += failed
            self._in_a_row = self._in_a_row + 1 if unreachable else 0


def _write_report(
    content: CommunityContent,
    gateway: ModelGateway,
    use_model: bool,
    breaker: _ModelBreaker,
    template: PromptTemplate,
    overrides: dict[str, str],
    terms: TopicTerms | None = None,
) -> tuple[CommunityReport, Trace]:
    """One community's report and a private trace of its model call (merged into the run's trace in order)."""
    trace = Trace("communities", content.community.id, overrides)
    if not use_model or breaker.is_open():
        return graph_report(content, terms), trace
    try:
        report = model_report(content, gateway, template=template, trace=trace)
        breaker.record(called=True, failed=False, unreachable=False)
        return report, trace
    except ModelUnavailableError as exc:  # StructuredOutputError included: the model answered, but unusably
        breaker.record(called=True, failed=True, unreachable=not isinstance(exc, StructuredOutputError))
        log.warning("community %s: report model failed (%s); building the report from the graph", content.community.id, exc)
        trace.add("community_report_failed", community_id=content.community.id, error=str(exc)[:500])
        return graph_report(content, terms), trace


def stored_hash(community: Community, method: str) -> str:
    """The hash stored with a report: the community's content hash for a model's report; for one built from the
    graph, that hash followed by ``/graph-`` and :data:`GRAPH_REPORT_FORMAT` (a new offline format is not current)."""
    return community.content_hash if method == "model" else f"{community.content_hash}/graph-{GRAPH_REPORT_FORMAT}"


def is_current(stored: tuple[str, str] | None, community: Community, *, use_model: bool) -> bool:
    """Whether a stored report (``(stored hash, method)``) still serves ``community``.

    Same content is enough (:func:`stored_hash`: for a report built from the graph, also the same
    :data:`GRAPH_REPORT_FORMAT`), except that a report built from the graph is written again
    when a real model is available now (after a failed call, or a newly configured endpoint).
    """
    if stored is None or stored[0] != stored_hash(community, stored[1]):
        return False
    return stored[1] == "model" or not use_model


def rebuild(
    topic_id: str,
    store: GraphStore,
    index: CommunityIndex,
    gateway: ModelGateway,
    *,
    resolution: float,
    progress: ProgressFn | None = None,
    trace: Trace | None = None,
    template: PromptTemplate = COMMUNITY_REPORT,
    seed: int = 42,
) -> RebuildReport:
    """Recompute a Topic's communities and write the reports of the changed ones.

    Reads the whole graph, detects communities, keeps the stored report of every
    community of two or more entities whose content hash is unchanged, writes a report for
    each of the others (one model call each with a real endpoint, see :func:`is_current`),
    embeds the new summaries, then in one transaction writes them and deletes the reports
    of communities that no longer exist. The run's counts are stored for
    :func:`last_run`. Membership is kept in the reports (``entity_ids``), not in the graph.

    Args:
        topic_id: the Topic's id.
        store: the Topic's graph.
        index: the Topic's community index (created when missing).
        gateway: the model gateway (roles ``community_report`` and ``embedding``).
        resolution: the Topic's Resolution (> 0).
        progress: ``progress(phase, done, total)``: ``detect`` (0/1, 1/1), ``reports`` once per
            community with a report (kept ones first), ``write`` (0/1, 1/1).
        trace: records the steps and every model call (a DEV report of the rebuild).
        template: the ``community_report`` prompt (a Topic's override, or the default).
        seed: Leiden's seed.

    Returns:
        The counts of the run.

    Raises:
        ValueError: when ``resolution`` is not positive.
        ModelUnavailableError: when the embedding model cannot be reached (nothing is written).
    """
    t0 = time.perf_counter()
    trace = trace if trace is not None else Trace("communities", topic_id)
    report = progress or (lambda phase, done, total: None)
    report("detect", 0, 1)
    with trace.step("detect_communities", resolution=resolution) as ev:
        entities = list(store.all_entities())
        relationships = list(store.all_relationships())
        communities = detect_communities(entities, relationships, resolution=resolution, seed=seed)
        reportable = [c for c in communities if c.size >= MIN_REPORT_ENTITIES]
        half = half_graph_growth(entities, relationships, communities, resolution=resolution, seed=seed)
        ev.data.update(
            entities=len(entities),
            relationships=len(relationships),
            communities=len(communities),
            skipped_small=len(communities) - len(reportable),
            sizes=[c.size for c in reportable[:50]],
            half_graph=list(half),
        )
    report("detect", 1, 1)
    index.ensure()
    stored = index.get_hashes()
    use_model = not uses_bundled_model(gateway)
    changed = [c for c in reportable if not is_current(stored.get(c.id), c, use_model=use_model)]
    kept = len(reportable) - len(changed)
    report("reports", kept, len(reportable))
    with trace.step("community_reports", method="model" if use_model else "graph", changed=len(changed), kept=kept) as ev:
        reports, breaker = _write_reports(
            changed,
            entities,
            relationships,
            gateway,
            use_model,
            template,
            trace,
            lambda done: report("reports", kept + done, len(reportable)),
        )
        ev.data.update(model_calls=breaker.calls, model_failures=breaker.failures)
        chunk_index = ChunkIndex(index.client, topic_id, dims=index.dims)
        reports = cite_chunks(reports, lambda ids: {cid: hit.text for cid, hit in chunk_index.read_hits(ids)[0].items()})
    report("write", 0, 1)
    stale = sorted(set(stored) - {c.id for c in reportable})
    with trace.step("write_reports", written=len(changed), deleted=len(stale)):
        texts = [f"{r.title}\n{r.summary}" for r in reports]
        vectors = gateway.embed(texts, trace=trace, purpose="community summary embedding") if texts else []
        index.put([_record(c, r, v) for c, r, v in zip(changed, reports, vectors, strict=True)], delete_ids=stale)
    report("write", 1, 1)
    result = RebuildReport(
        written=len(changed),
        kept=kept,
        deleted=len(stale),
        communities=len(communities),
        skipped_small=len(communities) - len(reportable),
        seconds=round(time.perf_counter() - t0, 3),
        model_calls=breaker.calls,
        model_failures=breaker.failures,
        method="model" if use_model else "graph",
        resolution=resolution,
        entities=len(entities),
        relationships=len(relationships),
        finished_at=time.time(),
        half_entities=half[0],
        half_reportable=half[1],
        half_kept=half[2],
    )
    record_run(index.client, topic_id, result)
    log.info("communities of Topic %s rebuilt: %s", topic_id, result)
    return result


def _write_reports(
    changed: list[Community],
    entities: list[Entity],
    relationships: list[Relationship],
    gateway: ModelGateway,
    use_model: bool,
    template: PromptTemplate,
    trace: Trace,
    done: Callable[[int], None],
) -> tuple[list[CommunityReport], _ModelBreaker]:
    """The reports of ``changed`` in order; model calls run :data:`MAX_CONCURRENT_CALLS` at a time."""
    by_id = {e.id: e for e in entities}
    by_key = {(r.source_id, r.target_id): r for r in relationships}
    breaker = _ModelBreaker()
    contents = (community_content(c, by_id, by_key) for c in changed)
    terms = TopicTerms.of(entities) if changed else None
    reports: list[CommunityReport] = []
    with ThreadPoolExecutor(max_workers=MAX_CONCURRENT_CALLS if use_model else 1) as pool:
        for report, private in pool.map(
            lambda c: _write_report(c, gateway, use_model, breaker, template, trace.model_overrides, terms), contents
        ):
            for event in private.events:  # Trace is not thread-safe: each call kept its own, merged here in order
                trace.add(event.step, **event.data)
            reports.append(report)
            done(len(reports))
    return reports, breaker


def _record(community: Community, report: CommunityReport, vector) -> CommunityRecord:
    return CommunityRecord(
        community_id=community.id,
        title=report.title,
        summary=report.summary,
        entity_ids=community.entity_ids,
        content_hash=stored_hash(community, report.method),
        embedding=vector,
        key_entities=tuple(report.key_entities),
        key_relationships=tuple(report.key_relationships),
        method=report.method,
        sources=tuple(report.sources.items()),
    )


# ----------------------------------------------------------------------------- run record


def run_key(topic_id: str) -> str:
    """Redis key of a Topic's last community rebuild (under its prefix, so a Topic delete removes it)."""
    return f"rt:{topic_id}:runs:communities"


def record_run(client: redis.Redis, topic_id: str, result: RebuildReport) -> None:
    """Store ``result`` as the Topic's last community rebuild (JSON)."""
    client.set(run_key(topic_id), json.dumps(asdict(result)))


def last_run(client: redis.Redis, topic_id: str) -> RebuildReport | None:
    """The Topic's last community rebuild, or ``None`` when none has finished."""
    raw = client.get(run_key(topic_id))
    if raw is None:
        return None
    fields = set(RebuildReport.__dataclass_fields__)
    return RebuildReport(**{k: v for k, v in json.loads(raw).items() if k in fields})
