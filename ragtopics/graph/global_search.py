"""The GLOBAL way of a GraphRAG Topic: the map step over community summaries.

GLOBAL answers questions about the whole collection ("what are the main themes?") from
the community reports written in Phase B, as Microsoft GraphRAG's global search does:

1. **Select**: the Top-K Reports summaries most similar to the question (cosine >= Min.
   Similarity Score), fused by reciprocal rank with a BM25 search of their titles and
   summaries when Global Keyword Search is on. A question about the whole collection that
   names no subject of its own ("What are the main themes of these documents?",
   :func:`is_overview`) matches every summary about equally weakly, and by similarity it picked
   small communities that happened to share its words; it reads the Top-K Reports *largest*
   communities instead (most entities: what the collection says most about), whatever their
   similarity. Offline (the bundled Language Model), a question about a kind of named thing in the
   whole collection ("What kinds of places are described?", "Which people do these documents talk
   about?", :func:`~ragtopics.answer.extractive.overview_subject`) resolves the kind to the graph's
   entity types (places: PLACE, which NLP extraction gives spaCy's GPE, LOC and FAC; people: PERSON)
   and reads the communities most made of them (:func:`rank_by_subject`), each with the summary
   sentence about its members of that kind (:func:`subject_sentence`) and a title listing them
   (:func:`subject_title`). By similarity, such questions picked communities of two to four
   entities that shared their words. With a real Language Model endpoint they are selected by
   similarity as before.
2. **Map**: each summary is read alone. With a real Language Model endpoint, one typed call
   per summary, ``{helpful, points, score}``, at most :data:`MAP_CONCURRENCY` at a time;
   unhelpful summaries are dropped. With the bundled model (too small to judge), the
   summary's sentences and key relationships are ranked by cosine similarity to the
   question with the bundled embedding model and the best :data:`POINTS_PER_REPORT` kept;
   for an overview question, by similarity to the summary's own centroid (its most
   representative sentences), in the communities' size order. A report built from the graph
   offers its documents' sentences, each cited to a chunk, and its evidence item then carries
   the document of each kept point (:func:`point_provenance`), so an offline answer cites them.
3. **Reduce**: the answer stage writes one answer from the kept points (the evidence
   items returned here, kind ``community_report``; without source files when a model read
   the summaries) and streams it.

None of the summaries above the threshold, or no community run yet: an empty context
whose note says why (the answer stage gives the no-results message).
"""

from __future__ import annotations

import logging
import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from ragtopics.answer.context import Context, Evidence, Provenance, RetrievalQuery, SearchProgress
from ragtopics.answer.extractive import is_overview, overview_subject
from ragtopics.answer.fusion import DEFAULT_RRF_K, reciprocal_rank_fusion
from ragtopics.errors import ModelUnavailableError, StructuredOutputError
from ragtopics.graph.community_index import CommunityHit, CommunityIndex
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.local import graph_chunk_evidence
from ragtopics.graph.model import Entity
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.storage.chunk_index import ChunkHit
from ragtopics.tracing.trace import Trace

if TYPE_CHECKING:
    from ragtopics.topics.topics import Topic

log = logging.getLogger(__name__)

#: Summaries read at once by the map step (the gateway also caps calls per endpoint).
MAP_CONCURRENCY = 4
#: Points kept per summary when the bundled embedding model ranks them.
POINTS_PER_REPORT = 3
#: Role whose model reads the summaries.
MAP_ROLE = "language_model"
#: Candidates read from the report index per report kept, before the size prior re-ranks them.
CANDIDATES_PER_REPORT = 3
#: Weight of a community's size in the selection: the largest candidate gains this much over a
#: one-entity one on top of its cosine (log scale). Microsoft GraphRAG's global search likewise
#: orders reports by a community rank that grows with the community's share of the corpus, so an
#: overview question ("the main themes") reads the communities the corpus says most about.
SIZE_PRIOR = 0.1
#: Community members whose types a question about a kind of thing reads (the largest communities' first): bounds the
#: graph read of a Topic with hundreds of thousands of entities.
SUBJECT_MAX_ENTITIES = 20_000
#: Members of the asked kind, by mentions, whose names a community's quoted sentence is chosen by.
SUBJECT_MEMBERS = 8
#: Fewest members of the asked kind a community must have to be chosen while any community has that many.
SUBJECT_MIN_MEMBERS = 3
#: Members of the asked kind a chosen community's title lists.
SUBJECT_TITLE_NAMES = 3


class MapReply(BaseModel):
    """What the map call says about one summary."""

    helpful: bool = Field(description="Whether the summary helps answer the question at all.")
    points: list[str] = Field(default_factory=list, description="Facts from the summary that answer the question.")
    score: int = Field(0, ge=0, le=100, description="How much the summary helps, 0-100.")


@dataclass(slots=True)
class GlobalRetriever:
    """GLOBAL search over a Topic's community reports (see the module docstring).

    Args:
        rt: the runtime (embedder, gateway, Redis).
        topic: the GraphRAG Topic.
        settings: its settings (top_k_reports, min_similarity_score, global_keyword_search, rrf_k when present).
        map_prompt: the ``global_map`` prompt.
        route: the route name put on the context.
        progress: where to say "reading N summaries", and whose Stop ends the map step (None: silent).
    """

    rt: Runtime
    topic: Topic
    settings: GraphRagTopicSettings
    map_prompt: PromptTemplate
    route: str = "GLOBAL"
    progress: SearchProgress | None = None

    def retrieve(self, query: RetrievalQuery, trace: Trace) -> Context:
        """Select, then map; the items are kind ``community_report`` with no provenance, best first."""
        cfg = self.settings
        index = CommunityIndex(
            self.rt.redis, self.topic.id, dims=self.rt.gateway.embedder.dims, embedding_model=self.rt.gateway.embedder.model
        )
        if index.count() == 0:
            trace.add("global_select", reports=0, reason="no community summaries")
            return Context((), self.route, "no community summaries yet: run Recompute Communities Now")
        overview = is_overview(query.question)
        subject = overview_subject(query.question) if self.bundled and not overview else frozenset()
        chosen: list[tuple[CommunityHit, list[str], float]] = []
        with trace.step("global_select", top_k=cfg.top_k_reports, min_score=cfg.min_similarity_score) as ev:
            vector = self.rt.gateway.embed([query.question], trace=trace, purpose="question")[0]
            if subject:  # a kind of thing in the whole collection: the communities most made of it, offline
                chosen = self._by_subject(index, subject, ev.data)
            hits = [h for h, _, _ in chosen]
            if overview:  # the whole collection: its largest communities, whatever their similarity to the question
                hits = index.largest(cfg.top_k_reports)
                ev.data.update(
                    overview=True, reports=[{"id": h.community_id, "title": h.title, "entities": len(h.entity_ids)} for h in hits]
                )
            elif not hits:
                hits = self._similar(query, index, vector, ev.data)
        if not hits:
            return Context((), self.route, "no community summary passed Min. Similarity Score")
        if self.progress is not None:
            self.progress.say(f"reading {len(hits)} summar{'y' if len(hits) == 1 else 'ies'}")
        method = "subject" if chosen else "embedding" if self.bundled else "model"
        with trace.step("global_map", reports=len(hits), method=method) as ev:
            if chosen:  # each community's sentence about its members of the asked kind, chosen with it
                mapped = chosen
            elif self.bundled:
                mapped = self._map_by_embedding(query.question, hits, None if overview else vector)
            else:
                mapped = self._map_by_model(query.question, hits, trace)
            kept = [(h, points, score) for h, points, score in mapped if points]
            kept.sort(key=lambda x: -x[2])
            ev.data.update(kept=len(kept), dropped=[h.title for h, points, _ in mapped if not points])
            if self.progress is not None and self.progress.stopped:
                ev.data["stopped"] = True
        cited = self._cited_chunks(kept) if self.bundled else {}
        items = tuple(
            Evidence(
                kind="community_report",
                id=h.community_id,
                text=_report_text(h, points),
                score=score,
                provenance=point_provenance(h, points, cited),
            )
            for h, points, score in kept
        )
        return Context(items, self.route, "" if items else "no community summary helps answer the question")

    def _cited_chunks(self, kept: list[tuple[CommunityHit, list[str], float]]) -> dict[str, ChunkHit]:
        """The stored chunks the kept points are cited to (one pipelined read; chunks gone since are left out)."""
        ids = list(dict.fromkeys(h.sources[p] for h, points, _ in kept for p in points if h.sources.get(p)))
        return self.rt.chunk_index(self.topic.id).read_hits(ids)[0] if ids else {}

    def _by_subject(
        self, index: CommunityIndex, types: frozenset[str], data: dict
    ) -> list[tuple[CommunityHit, list[str], float]]:
        """The Top-K Reports communities most made of entities of ``types``, each with its summary sentence about them.

        Communities are ranked by :func:`rank_by_subject` (their members' types read from the graph, the largest
        communities' first, at most :data:`SUBJECT_MAX_ENTITIES` members). Each quotes the sentence of its summary
        that best names its members of the kind (:func:`subject_sentence`, with each sentence's cosine to the mean of
        the summary's sentences as its centrality); one whose summary has no such sentence is skipped, and so is a
        graph-built report with no documents' sentence (its title fell back to a list of members). The title's list
        of members names the community's members of the kind (:func:`subject_title`).

        Returns:
            ``(report, [sentence], score)``, best first (score ``1 / (1 + rank)``); empty when no community has a
            member of the kind with a sentence about it.
        """
        cfg = self.settings
        read: dict[str, tuple[str, ...]] = {}
        total = 0
        for cid, ids in index.memberships().items():
            if total >= SUBJECT_MAX_ENTITIES:
                break
            read[cid] = ids
            total += len(ids)
        store = graph_store(self.rt, self.topic)
        ranked = rank_by_subject(read, store.entity_types({e for ids in read.values() for e in ids}), types)
        best = ranked[: cfg.top_k_reports * CANDIDATES_PER_REPORT]
        hits = {h.community_id: h for h in index.get([cid for cid, _, _ in best])}
        entities = {e.id: e for e in store.entities(e for _, _, of_kind in best for e in of_kind[:SUBJECT_MEMBERS])}
        offered = {cid: list(h.sources) or ([] if h.method == "graph" else _sentences(h.summary)) for cid, h in hits.items()}
        texts = [t for ts in offered.values() for t in ts]
        vectors = self.rt.gateway.embed(texts, purpose="global subject") if texts else np.zeros((0, 1), dtype=np.float32)
        own: dict[str, np.ndarray] = {}
        at = 0
        for cid, ts in offered.items():
            own[cid] = vectors[at : at + len(ts)]
            at += len(ts)
        out: list[tuple[CommunityHit, list[str], float]] = []
        for cid, _, of_kind in best:
            hit = hits.get(cid)
            if hit is None or not offered[cid]:
                continue
            found = [entities[e] for e in of_kind[:SUBJECT_MEMBERS] if e in entities]
            members = rank_members(found, hit.key_entities, offered[cid])
            centrality = own[cid] @ own[cid].mean(axis=0)
            sentence = subject_sentence(offered[cid], members, [float(c) for c in centrality])
            if sentence:
                hit = replace(hit, title=subject_title(hit, [e.name for e in members]))
                out.append((hit, [sentence], 1.0 / (1 + len(out))))  # the answer keeps this order
            if len(out) == cfg.top_k_reports:
                break
        data.update(
            subject=sorted(types),
            candidates=len(ranked),
            reports=[{"id": h.community_id, "title": h.title, "entities": len(h.entity_ids)} for h, _, _ in out],
        )
        return out

    def _similar(self, query: RetrievalQuery, index: CommunityIndex, vector: np.ndarray, data: dict) -> list[CommunityHit]:
        """The summaries most similar to the question (with a small preference for large communities), at least
        Min. Similarity Score, fused with a keyword search when Global Keyword Search is on; ``data`` is the trace step's."""
        cfg = self.settings
        nearest = prefer_large(index.search_vector(vector, cfg.top_k_reports * CANDIDATES_PER_REPORT))[: cfg.top_k_reports]
        dense = [h for h in nearest if h.score >= cfg.min_similarity_score]
        hits = dense
        data["best"] = [{"title": h.title, "score": round(h.score, 4)} for h in nearest[:3]]  # kept or not
        if cfg.global_keyword_search and dense:
            keyword = index.search_text(re.findall(r"\w+", query.question), cfg.top_k_reports)
            similar = {h.community_id for h in dense}
            fused = reciprocal_rank_fusion(
                {
                    "dense": [h.community_id for h in dense],
                    "keyword": [h.community_id for h in keyword if h.community_id in similar],
                },
                k=DEFAULT_RRF_K,
            )
            by_id = {h.community_id: h for h in dense}
            hits = [by_id[cid] for cid in fused][: cfg.top_k_reports]
        data.update(reports=[{"id": h.community_id, "title": h.title, "score": round(h.score, 4)} for h in hits])
        return hits

    @property
    def bundled(self) -> bool:
        """True while the Language Model is the bundled one (the map step then ranks by embeddings)."""
        return self.rt.gateway.endpoint(MAP_ROLE).is_local

    def _map_by_model(self, question: str, hits: list[CommunityHit], trace: Trace) -> list[tuple[CommunityHit, list[str], float]]:
        """One typed call per summary, concurrently; a failed call drops its summary (logged, traced)."""

        def read(hit: CommunityHit) -> tuple[CommunityHit, list[str], float, Trace]:
            private = trace.child("chat", hit.community_id)
            if self.progress is not None and self.progress.stopped:
                private.add("global_map_skipped", community=hit.community_id, reason="stopped")
                return hit, [], 0.0, private
            prompt = self.map_prompt.render(
                question=question,
                title=hit.title,
                summary=hit.summary,
                key_entities=", ".join(hit.key_entities),
                key_relationships="\n".join(hit.key_relationships),
            )
            try:
                reply = self.rt.gateway.structured(
                    MAP_ROLE,
                    [{"role": "user", "content": prompt}],
                    MapReply,
                    prompt_name=self.map_prompt.name,
                    trace=private,
                    max_tokens=400,
                )
            except (ModelUnavailableError, StructuredOutputError) as exc:
                log.warning("GLOBAL map of %s failed: %s", hit.community_id, exc)
                return hit, [], 0.0, private
            points = [p.strip() for p in reply.points if p.strip()] if reply.helpful else []
            return hit, points, reply.score / 100.0, private

        out = []
        with ThreadPoolExecutor(max_workers=MAP_CONCURRENCY) as pool:
            for hit, points, score, private in pool.map(read, hits):
                for event in private.events:  # Trace is not thread-safe: merged here in order
                    trace.add(event.step, **event.data)
                out.append((hit, points, score))
        return out

    def _map_by_embedding(
        self, question: str, hits: list[CommunityHit], vector: np.ndarray | None
    ) -> list[tuple[CommunityHit, list[str], float]]:
        """The best sentences and key relationships of each summary by cosine to the question (no model call).

        With ``vector`` None (an overview question): each summary's most representative sentences, by cosine
        to the mean of its sentences' vectors, and as score the community's size relative to the largest
        selected (the answer keeps the size order). A report built from the graph offers the sentences it took from
        the documents (its ``sources``, each cited to a chunk); another, its summary's sentences and key relationships.
        """
        candidates = [(h, list(h.sources) or list(_sentences(h.summary)) + list(h.key_relationships)) for h in hits]
        texts = [t for _, ts in candidates for t in ts]
        dims = self.rt.gateway.embedder.dims
        vectors = self.rt.gateway.embed(texts, purpose="global map") if texts else np.zeros((0, dims), dtype=np.float32)
        largest = max((len(h.entity_ids) for h in hits), default=1) or 1
        out, at = [], 0
        for hit, ts in candidates:
            own = vectors[at : at + len(ts)]
            at += len(ts)
            target = vector if vector is not None else own.mean(axis=0) if ts else None
            scores = own @ target if ts and target is not None else np.zeros(0)
            order = np.argsort(-scores)[:POINTS_PER_REPORT]
            points = [ts[i] for i in sorted(order)]  # in the summary's own order
            if vector is None:
                out.append((hit, points, len(hit.entity_ids) / largest))
            else:
                out.append((hit, points, float(scores[order[0]]) if len(order) else 0.0))
        return out


def prefer_large(hits: list[CommunityHit], weight: float = SIZE_PRIOR) -> list[CommunityHit]:
    """Candidates ordered by cosine plus ``weight · log(1 + entities) / log(1 + most entities)`` (see :data:`SIZE_PRIOR`).

    Args:
        hits: reports found by vector search (``score`` is the cosine, kept unchanged on the results).
        weight: the prior's weight; 0 keeps the cosine order.

    Returns:
        The same hits, best first.
    """
    if not hits:
        return []
    most = max(math.log1p(len(h.entity_ids)) for h in hits) or 1.0
    return sorted(hits, key=lambda h: -(h.score + weight * math.log1p(len(h.entity_ids)) / most))


def subject_score(of_kind: int, named: int) -> float:
    """How much a community is made of one kind of thing: ``of_kind · of_kind / named``, its members of the kind
    weighted by their share of its named members (noun phrases not counted), so that a large community where the
    kind is common ranks above a small one made only of it, and above a larger one where it is rare.

    Args:
        of_kind: members of the asked kind.
        named: members that are named entities (any type but CONCEPT), at least ``of_kind``.
    """
    return of_kind * of_kind / max(named, of_kind, 1)


def rank_by_subject(
    memberships: dict[str, tuple[str, ...]], kinds: dict[str, tuple[str, int]], types: frozenset[str]
) -> list[tuple[str, float, list[str]]]:
    """Communities ranked by how much they are made of entities of ``types`` (:func:`subject_score`).

    Args:
        memberships: community id → member entity ids.
        kinds: entity id → ``(type, mentions)`` (:meth:`~ragtopics.graph.store.GraphStore.entity_types`); members not
            in it are left out.
        types: the asked entity types (:func:`~ragtopics.answer.extractive.overview_subject`).

    Returns:
        ``(community id, score, members of the kind by mentions)`` for each community with a member of the kind:
        first those with at least :data:`SUBJECT_MIN_MEMBERS` of them, best first, then the others, best first.
    """
    out = []
    for cid, ids in memberships.items():
        known = [(e, kinds[e]) for e in ids if e in kinds]
        of_kind = sorted(((e, n) for e, (t, n) in known if t in types), key=lambda x: (-x[1], x[0]))
        if of_kind:
            named = sum(1 for _, (t, _) in known if t != "CONCEPT")
            out.append((cid, subject_score(len(of_kind), named), [e for e, _ in of_kind]))
    return sorted(out, key=lambda x: (len(x[2]) < SUBJECT_MIN_MEMBERS, -x[1], x[0]))


def _name_patterns(member: Entity) -> list[re.Pattern[str]]:
    """A member's name and aliases as whole words (one-letter names left out)."""
    return [re.compile(rf"(?<!\w){re.escape(n)}(?!\w)") for n in dict.fromkeys((member.name, *member.aliases)) if len(n) > 1]


#: What may follow a member's name at the start of a sentence that is about it ("Leland is…", "Shabana Azmi (born…"),
#: not a longer name that opens with it ("New York State Route 12F…").
_AFTER_OPENING_NAME = re.compile(r"(?!\s+[A-Z0-9])")


def rank_members(members: list[Entity], key_entities: tuple[str, ...] | list[str], sentences: list[str]) -> list[Entity]:
    """A community's members of one kind, strongest first: the report's key entities among them in their order
    (strongest in the community), then the others by how many of the summary's sentences name them, then in the
    order given (most mentioned in the Topic first).

    Args:
        members: its members of the kind, most mentioned first.
        key_entities: the report's key entity names, strongest first.
        sentences: the summary's sentences.
    """
    rank = {name: n for n, name in enumerate(key_entities)}
    said = {e.id: sum(1 for s in sentences if any(p.search(s) for p in _name_patterns(e))) for e in members}
    return sorted(members, key=lambda e: (rank.get(e.name, len(rank)), -said[e.id]))


def subject_sentence(sentences: list[str], members: list[Entity], centrality: list[float] | None = None) -> str:
    """The sentence that says most about a community's members of one kind: ``""`` when none names one.

    A sentence naming at least one member scores ``1 / (1 + rank)`` for each member it names (name or alias as
    whole words; rank in ``members``), one more when it opens with a member's name (it is about that member,
    "Leland is a town in Brunswick County…", not "New York State Route 12F…"), and its centrality (how
    representative of the summary it is); the first best in the summary's order wins.

    Args:
        sentences: the summary's sentences, in order.
        members: its members of the kind, strongest first (:func:`rank_members`).
        centrality: per sentence, its cosine to the mean of the sentences' vectors (None: 0 each).
    """
    patterns = [_name_patterns(e) for e in members]
    best, best_score = "", -math.inf
    for n, sentence in enumerate(sentences):
        score = 0.0
        for rank, names in enumerate(patterns):
            found = [m for p in names for m in [p.search(sentence)] if m]
            if found:
                opens = any(m.start() == 0 and _AFTER_OPENING_NAME.match(sentence, m.end()) for m in found)
                score += 1.0 / (1 + rank) + (1.0 if opens else 0.0)
        total = score + (centrality[n] if centrality else 0.0)
        if score > 0 and total > best_score:
            best, best_score = sentence, total
    return best


#: The end of a graph-built title that lists a community's strongest members only: ``Forbes, Harris and Chase (+11 more)``.
_MORE_MEMBERS = re.compile(r" \(\+\d+ more\)$")


def subject_title(hit: CommunityHit, names: list[str]) -> str:
    """A report's title with its list of members replaced by its members of the asked kind (``names``, strongest
    first): ``Indian and Shabana Azmi: films and actresses (Shabana Azmi, Kaifi Azmi, Sathish Kalathil …)``.

    A graph-built title ends with its strongest named members in brackets (``… (India, Bollywood, West Bengal …)``,
    :func:`~ragtopics.graph.communities.theme_title`) or with how many members it does not name (``(+11 more)``);
    that is cut off (where a key entity opens the list). Other titles keep what they say and get the list after it.
    """
    shown = [n for n in names if n.casefold() not in hit.title.split(" (")[0].casefold()][:SUBJECT_TITLE_NAMES]
    if not shown:
        return hit.title
    head = hit.title
    if hit.method == "graph" and head.endswith(")"):
        cuts = [at for name in hit.key_entities if (at := head.rfind(f" ({name}")) > 0]
        cuts += [m.start() for m in [_MORE_MEMBERS.search(head)] if m]
        head = head[: min(cuts)] if cuts else head
    more = " …" if len(names) > len(shown) else ""
    return f"{head} ({', '.join(shown)}{more})"


def point_provenance(hit: CommunityHit, points: list[str], chunks: dict[str, ChunkHit]) -> tuple[Provenance, ...]:
    """The documents behind a summary's kept points: one provenance per point, in the points' order.

    Only when every point is a sentence of the report's ``sources`` whose chunk is still stored, so that the
    i-th provenance is the i-th point's (an answer quoting one point cites its document alone); otherwise none
    (a model's summary, or a point that is not a documents' sentence: the summary is cited as a whole, no file).

    Args:
        hit: the report (``sources``: sentence → chunk id).
        points: the kept points, in the order the evidence text lists them.
        chunks: chunk id → stored chunk (:meth:`~ragtopics.storage.chunk_index.ChunkIndex.read_hits`).
    """
    found = [chunks.get(hit.sources.get(p, "")) for p in points]
    if not points or any(c is None for c in found):
        return ()
    return tuple(graph_chunk_evidence(c).provenance[0] for c in found if c is not None)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text or "") if len(s.strip()) > 3]


def _report_text(hit: CommunityHit, points: list[str]) -> str:
    """What the answer prompt shows for one summary: its title and the kept points."""
    return f"Community: {hit.title}\n" + "\n".join(f"- {p}" for p in points)
