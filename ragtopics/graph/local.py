"""A GraphRAG Topic's LOCAL way: seed entities, expand the graph around them, rank the chunks behind it.

Steps (each one traced):

1. **Seeds** by the Topic's Seed Strategy. NODES: entities whose vectors are close to the
   question (Top-K Nodes, Min. Similarity Score). CHUNKS: the Top-K Seed Chunks nearest to the
   question, and the entities those chunks carry (a chunk's entities ranked by the chunk's
   rank, rarer entities first). FUSED: both, plus the entity full-text hits when Local
   Keyword Search is on, merged by reciprocal rank fusion (Cormack et al., SIGIR 2009). Names
   the router saw (``RetrievalQuery.entities``) that match an entity are always seeds.
2. **Expansion**: Hop Depth steps along relationships, at most Max Subgraph Nodes entities.
3. **Chunks**: those behind the entities and relationships found, plus the Top-K Unlinked
   Chunks (the best chunk-vector hits that no collected entity carries).
4. **Ranking with the graph**: personalized PageRank over entities and chunks, reset at the
   seed entities and (weakly) at each chunk by its cosine to the question, as HippoRAG 2 does
   (Gutiérrez et al., "From RAG to Memory", ICML 2025: passage nodes joined to their
   entities, reset weight 0.05 for passages, damping 0.5). The PageRank order, the cosine
   order, the chunks *about* an entity the question names (a chunk is about the entity its
   heading names, marked at upload) and, with Local Keyword Search, the BM25 hits of the
   question are fused by reciprocal rank fusion (:func:`more_candidates`).
5. **Second hops**: a file named in one of the first chunks brings its chunk most similar to the
   question in right after it (Follow File Mentions, :mod:`ragtopics.rag.mentions`); then
   **entity bridging** (:func:`follow_entities`): an entity named in one of the first chunks
   brings in the chunk about it, from another document. The second works without meaningful
   file names. The Max Cited Chunks best are kept.

Measured with ``make eval`` (recall@5, Top-K 10, bundled MiniLM; BENCHMARKS.md): on the opaque
HotpotQA set, LOCAL FUSED went from 0.775 (PageRank and cosine fused) to 0.815 with bridging
by entity id, 0.860 with bridging by name, 0.895 with the named and keyword lists.

Scores: a chunk item's ``score`` is its cosine similarity to the question; an entity or
relationship item's is the best cosine among the candidate chunks it rests on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Set
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import igraph
import numpy as np
import redis

from ragtopics.answer.context import Context, Evidence, Provenance, RetrievalQuery, chunk_evidence
from ragtopics.answer.fusion import DEFAULT_RRF_K, reciprocal_rank_fusion
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.model import Entity, Relationship
from ragtopics.graph.store import ENTITY_CHUNK_SAMPLE, GraphStore, Subgraph
from ragtopics.rag.mentions import MENTION_SEEDS, Link, follow_mentions_guarded, place_links
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.storage.chunk_index import ChunkHit, ChunkIndex
from ragtopics.text.keywords import is_searchable, query_keywords
from ragtopics.tracing.trace import Trace

if TYPE_CHECKING:
    from ragtopics.topics.topics import Topic

log = logging.getLogger(__name__)

#: PageRank damping (probability of following an edge rather than resetting); HippoRAG 2 uses 0.5.
PPR_DAMPING = 0.5
#: Share of the reset mass spread over chunk nodes by their cosine (HippoRAG 2's passage node weight).
PASSAGE_NODE_WEIGHT = 0.05
#: Reciprocal rank fusion constant for the seeds' reset weights (sharp; see :func:`seed_weights`).
WEIGHT_RRF_K = 1
#: Most candidate chunks collected behind the subgraph (those carried by more of it first).
MAX_CANDIDATE_CHUNKS = 400
#: Chunk-vector hits searched for seed and unlinked chunks, at least.
CHUNK_SEARCH_DEPTH = 30
#: Entity bridging (:func:`follow_entities`): leading chunks read for entities, and chunks brought in after each.
BRIDGE_SEEDS = 3
BRIDGES_PER_SEED = 2
#: Entity and relationship items given to the prompt, and the characters of each one's text.
MAX_ENTITY_ITEMS = 8
MAX_RELATIONSHIP_ITEMS = 8
MAX_ITEM_CHARS = 300
#: Documents named in an entity or relationship item's provenance, at most.
MAX_ITEM_DOCUMENTS = 3
#: What follows a graph-ingestion pseudo-document's name (``ragtopics.graph.graph_ingestion.SUFFIX``).
GRAPH_INGESTION_SUFFIX = " (graph ingestion)"


@dataclass(frozen=True, slots=True)
class Seeds:
    """The starting entities of a LOCAL search.

    Attributes:
        entities: best first (named ones first, then by fused rank), at most Top-K Nodes plus the named.
        weights: entity id → reset weight for PageRank in (0, 1] (the best seed 1).
        sources: list name (``named``, ``nodes``, ``chunks``, ``keywords``) → entity names, best first.
        dense: the chunk-vector hits of the question at or above Min. Similarity Score, best first.
    """

    entities: tuple[Entity, ...]
    weights: dict[str, float]
    sources: dict[str, list[str]]
    dense: tuple[ChunkHit, ...]


@dataclass(slots=True)
class LocalRetriever:
    """LOCAL search of a GraphRAG Topic (see the module docstring).

    Args:
        rt: the runtime (embedder, chunk index, graph database).
        topic: the GraphRAG Topic searched (its graph and chunk index).
        settings: the settings to search with (usually ``topic.settings``).
        route: the route name put on the context.
    """

    rt: Runtime
    topic: Topic
    settings: GraphRagTopicSettings
    route: str = "LOCAL"

    def retrieve(self, query: RetrievalQuery, trace: Trace) -> Context:
        """Seed, expand, collect and rank; see :class:`~ragtopics.answer.context.Retriever`.

        Returns:
            Kept chunks (best first), then entity and relationship items; empty with a note when
            nothing reaches Min. Similarity Score (the answer stage then gives the no-results message).
        """
        cfg = self.settings
        if not is_searchable(query.question):
            trace.add("local", query=query.question, skipped="the question holds no letter or digit")
            return Context((), self.route, "the question has nothing that can be searched")
        store, index = graph_store(self.rt, self.topic), self.rt.chunk_index(self.topic.id)
        texts = [query.question] + ([f"{query.previous_question}\n{query.question}"] if query.previous_question else [])
        with trace.step("local", strategy=seed_strategy(cfg), hop_depth=cfg.hop_depth, min_score=cfg.min_similarity_score) as ev:
            for text in texts:
                with trace.step("embed_question"):
                    vector = self.rt.gateway.embed([text], trace=trace, purpose="question")[0]
                seeds = find_seeds(store, index, text, vector, query.entities, cfg, trace)
                if similar(seeds):
                    break
            if not similar(seeds):
                note = f"no entity or chunk reached Min. Similarity Score ({cfg.min_similarity_score:g})"
                ev.data["note"] = note
                return Context((), self.route, note)
            items = self.gather(store, index, seeds, vector, trace, question=text)
            ev.data["kept"] = [i.id for i in items if i.kind == "chunk"]
        return Context(tuple(items), self.route, "")

    def gather(
        self, store: GraphStore, index: ChunkIndex, seeds: Seeds, vector: np.ndarray, trace: Trace, *, question: str = ""
    ) -> list[Evidence]:
        """Expand the seeds, collect and rank their chunks; the evidence items, chunks first."""
        cfg = self.settings
        with trace.step("expand", seeds=len(seeds.entities), hop_depth=cfg.hop_depth, limit=cfg.max_subgraph_nodes) as ev:
            # descriptions only for the relationships shown (graph_items), not for every tie of the subgraph
            around = store.neighbours([e.id for e in seeds.entities], cfg.hop_depth, cfg.max_subgraph_nodes, descriptions=False)
            sub = with_chunks(store, around)
            ev.data.update(
                entities=len(sub.entities), relationships=len(sub.relationships), names=[e.name for e in sub.entities][:50]
            )
        with trace.step("collect_chunks") as ev:
            linked = collect_chunk_ids(sub, seeds.dense)
            carried = {cid for e in sub.entities for cid in e.chunk_ids}
            unlinked = [h.chunk_id for h in seeds.dense if h.chunk_id not in carried][: cfg.top_k_unlinked_chunks]
            # Ranked by their embeddings: the texts are read for the few chunks that use them (below).
            chunks = fetch_chunks(index, [*linked, *unlinked], vector, texts=False)
            ev.data.update(linked=len(linked), unlinked=unlinked, fetched=len(chunks))
        with trace.step("rank_chunks", damping=PPR_DAMPING, passage_weight=PASSAGE_NODE_WEIGHT) as ev:
            cosine = {cid: h.score for cid, h in chunks.items()}
            ppr = personalized_pagerank(sub, _links(sub, chunks), seeds.weights, cosine)
            more = more_candidates(store, index, question, vector, chunks, keywords=cfg.local_keyword_search) if question else {}
            bare = set(chunks)
            cosine = {cid: h.score for cid, h in chunks.items()}
            ranked = [chunks[cid] for cid in rank_chunks(ppr, cosine, more)]
            ev.data["more"] = {name: ids[:10] for name, ids in more.items()}
            top = ranked[:20]
            if cfg.follow_file_mentions:
                ranked = with_texts(index, ranked, chunks, bare, MENTION_SEEDS)  # file names are found in the texts
                ranked, links = follow_mentions_guarded(index, ranked, vector)
                chunks.update((h.chunk_id, h) for h in ranked if h.chunk_id not in chunks)
                ev.data["links"] = [asdict(link) for link in links]
            ranked, bridges = follow_entities(store, index, ranked, vector, chunks)
            ev.data["bridges"] = [asdict(link) for link in bridges]
            ranked = with_texts(index, ranked, chunks, bare, cfg.max_cited_chunks)
            kept = [h.chunk_id for h in ranked[: cfg.max_cited_chunks]]
            ev.data["top"] = [
                {
                    "chunk_id": h.chunk_id,
                    "file": h.file_name,
                    "ppr": round(ppr.get(h.chunk_id, 0.0), 6),
                    "cosine": round(h.score, 4),
                    "kept": h.chunk_id in kept,
                }
                for h in top
            ]
            ev.data["kept"] = [{"chunk_id": cid, "file": chunks[cid].file_name} for cid in kept]  # after file mentions
        items = [graph_chunk_evidence(chunks[cid]) for cid in kept]
        items += graph_items(sub, ppr, chunks, describe=store.relationship_descriptions)
        return items


def follow_entities(
    store: GraphStore,
    index: ChunkIndex,
    ranked: list[ChunkHit],
    vector: np.ndarray,
    chunks: dict[str, ChunkHit],
    *,
    seeds: int = BRIDGE_SEEDS,
    per_seed: int = BRIDGES_PER_SEED,
) -> tuple[list[ChunkHit], list[Link]]:
    """Entity bridging: an entity named in one of the first chunks brings in the chunk that is about it.

    Follow File Mentions generalised from file names to the graph: the second passage of a bridge
    question ("the town where the film was shot") is the one about an entity the first passage names,
    and the graph knows which chunks are about which entity (:meth:`GraphStore.chunks_about`, marked
    at upload from the chunks' headings). For each of the first ``seeds`` chunks, the chunks about the
    entities it mentions, from other documents, most similar to the question first, are placed right
    after it (at most ``per_seed``), and a placed chunk that is one of the first brings its own in turn.
    A Redis or graph failure leaves the order as it was (logged).

    Args:
        ranked: the ranked chunks, best first (``score``: cosine to the question).
        vector: the question's embedding, shape ``(dims,)``, unit norm.
        chunks: chunk id → fetched hit; chunks fetched here are added to it.

    Returns:
        ``(ranked, links)``: the chunks with the bridged ones placed, and each hop taken.
    """
    if not ranked or seeds < 1 or per_seed < 1:
        return ranked, []
    try:
        about = store.chunks_about([h.chunk_id for h in ranked[:seeds]])
        wanted = [cid for pairs in about.values() for _, cid in pairs if cid not in chunks]
        chunks.update(fetch_chunks(index, wanted, vector) if wanted else {})
    except redis.RedisError as exc:
        log.warning("entity bridges not followed: %s", exc)
        return ranked, []
    named = {seed: [(name, chunks[cid]) for name, cid in pairs if cid in chunks] for seed, pairs in about.items()}
    return place_links(ranked, named, per_seed=per_seed)


def similar(seeds: Seeds) -> bool:
    """Whether anything reached Min. Similarity Score: a chunk, an entity by its vector, or an entity the
    router named. Keyword hits alone do not count (a shared word is not a match of meaning)."""
    return bool(seeds.dense or seeds.sources.get("nodes") or seeds.sources.get("named"))


def find_seeds(
    store: GraphStore,
    index: ChunkIndex,
    question: str,
    vector: np.ndarray,
    named: Iterable[str],
    cfg: GraphRagTopicSettings,
    trace: Trace,
) -> Seeds:
    """The seed entities of the question by the Seed Strategy, merged by reciprocal rank fusion.

    Args:
        store, index: the Topic's graph and chunk index.
        question: the text searched (for the full-text entity search).
        vector: its embedding, shape ``(dims,)``, unit norm.
        named: entity names the router saw; each that matches an entity (name or alias) is a seed.
        cfg: Seed Strategy, Top-K Nodes, Top-K Seed Chunks, Min. Similarity Score, Local Keyword Search.

    Returns:
        The seeds; the chunk-vector hits are searched under every strategy (for the unlinked chunks).
    """
    strategy = seed_strategy(cfg)
    with trace.step("seeds", strategy=strategy, top_k_nodes=cfg.top_k_nodes) as ev:
        depth = max(CHUNK_SEARCH_DEPTH, cfg.top_k_seed_chunks, 3 * cfg.top_k_unlinked_chunks)
        dense = [h for h in index.search_vector(vector, depth) if h.score >= cfg.min_similarity_score]
        lists: dict[str, list[Entity]] = {}
        if strategy in ("NODES", "FUSED"):
            lists["nodes"] = [e for e, _ in store.search_entities(vector, cfg.top_k_nodes, cfg.min_similarity_score)]
        if strategy in ("CHUNKS", "FUSED"):
            lists["chunks"] = entities_of_chunks(store, [h.chunk_id for h in dense[: cfg.top_k_seed_chunks]])
        if strategy == "FUSED" and cfg.local_keyword_search:
            lists["keywords"] = [e for e, _ in store.search_entities_text(query_keywords(question), cfg.top_k_nodes)]
        by_name = store.entities_by_names(named)
        named_found = list({e.id: e for e in (by_name.get(n) for n in dict.fromkeys(named)) if e is not None}.values())
        fused = reciprocal_rank_fusion({name: [e.id for e in found] for name, found in lists.items()}, k=DEFAULT_RRF_K)
        entity = {e.id: e for found in lists.values() for e in found} | {e.id: e for e in named_found}
        order = list(dict.fromkeys([e.id for e in named_found] + list(fused)[: cfg.top_k_nodes]))
        weights = seed_weights(
            [entity[eid] for eid in order],
            {name: [e.id for e in found] for name, found in lists.items()},
            named={e.id for e in named_found},
        )
        sources = {"named": [e.name for e in named_found]} | {name: [e.name for e in found] for name, found in lists.items()}
        ev.data.update(
            sources=sources,
            seeds=[entity[eid].name for eid in order],
            dense=[{"chunk_id": h.chunk_id, "file": h.file_name, "score": round(h.score, 4)} for h in dense[:10]],
        )
    return Seeds(tuple(entity[eid] for eid in order), weights, sources, tuple(dense))


def seed_weights(
    seeds: list[Entity], ranked: dict[str, list[str]], *, named: Set[str] = frozenset(), k: int = WEIGHT_RRF_K
) -> dict[str, float]:
    """PageRank reset weights of the seeds: a sharp reciprocal rank fusion, divided by how many chunks carry the seed.

    The fusion constant is small (``k`` = 1) so the first ranks weigh much more than the tenth
    (the ordering of seeds uses k = 60; as weights that would make ten seeds nearly equal). The
    division by the seed's chunk count is HippoRAG 2's node specificity: an entity named in
    hundreds of chunks spreads its weight over all of them. A named seed counts as first in every list.

    Args:
        seeds: the seed entities.
        ranked: list name → entity ids, best first (the lists the seeds were fused from).
        named: ids of seeds the router named.

    Returns:
        entity id → weight in (0, 1], the heaviest seed 1.
    """
    fused = reciprocal_rank_fusion(ranked, k=k)
    top = len([r for r in ranked.values() if r]) / (k + 1) or 1.0
    raw = {e.id: (top if e.id in named else fused.get(e.id, {"rrf": 0.0})["rrf"]) / max(e.mentions, 1) for e in seeds}
    best = max(raw.values(), default=0.0) or 1.0
    return {eid: max(w / best, 1e-6) for eid, w in raw.items()}


def seed_strategy(cfg: GraphRagTopicSettings) -> str:
    """The Seed Strategy as its name (``NODES``, ``CHUNKS`` or ``FUSED``), whether stored as the enum or as text."""
    return str(getattr(cfg.seed_strategy, "value", cfg.seed_strategy))


def entities_of_chunks(store: GraphStore, chunk_ids: list[str]) -> list[Entity]:
    """The entities the given chunks carry, ranked: by the best rank of a chunk carrying them, then rarer first.

    Ranking inside a chunk by rarity (fewer chunks) follows HippoRAG's node specificity: an
    entity named in one passage says more about it than one named in hundreds.

    Args:
        chunk_ids: chunk ids, best first.

    Returns:
        Entities, best first, each once (``[]`` when the graph does not exist).
    """
    if not chunk_ids or not store.exists():
        return []
    rows = store.graph.ro_query(
        "UNWIND $ids AS cid MATCH (e:Entity)-[:MENTIONED_IN]->(:Chunk {id: cid}) "
        "RETURN cid, e.id, coalesce(e.chunk_count, size(e.chunk_ids))",
        {"ids": chunk_ids},
    ).result_set
    rank = {cid: i for i, cid in enumerate(chunk_ids)}
    best: dict[str, tuple[int, int]] = {}
    for cid, eid, size in rows:
        best[eid] = min(best.get(eid, (len(chunk_ids), 0)), (rank[cid], int(size)))
    return store.entities(sorted(best, key=lambda eid: (best[eid], eid)))


def with_chunks(store: GraphStore, sub: Subgraph, limit: int = MAX_CANDIDATE_CHUNKS) -> Subgraph:
    """The subgraph with its entities' chunks read from their mentions, about ``limit`` in all (one query).

    An entity read from the graph carries only the first few of its chunks
    (:data:`~ragtopics.graph.store.ENTITY_CHUNK_SAMPLE`); the search collects at most
    :data:`MAX_CANDIDATE_CHUNKS` chunks, so the entities that have more share ``limit`` between them, each
    reading at least its sample's size: the reply is bounded by the subgraph's size (at most ``limit`` rows, or
    one sample per entity), never by how many chunks mention a hub.
    """
    wanting = [e.id for e in sub.entities if e.mentions > len(e.chunk_ids)]
    if not wanting:
        return sub
    found = store.chunks_of(wanting, max(ENTITY_CHUNK_SAMPLE, limit // len(wanting)))
    if not found:
        return sub
    return replace(
        sub, entities=tuple(replace(e, chunk_ids=frozenset(found[e.id])) if e.id in found else e for e in sub.entities)
    )


def collect_chunk_ids(sub: Subgraph, dense: Iterable[ChunkHit]) -> list[str]:
    """The chunks behind a subgraph's entities and relationships, at most :data:`MAX_CANDIDATE_CHUNKS`.

    A chunk carried by more of the subgraph (entities and relationships) comes first; the
    chunk-vector hits among them come before all others, so a hit that seeded the search is
    never cut.

    Returns:
        Chunk ids, most supported first (ties: the order the subgraph names them).
    """
    support: dict[str, int] = {}
    items: tuple[Entity | Relationship, ...] = (*sub.entities, *sub.relationships)
    for item in items:
        for cid in sorted(item.chunk_ids):
            support[cid] = support.get(cid, 0) + 1
    hits = list(dict.fromkeys(h.chunk_id for h in dense if h.chunk_id in support))
    first = set(hits)
    rest = sorted((cid for cid in support if cid not in first), key=lambda cid: -support[cid])
    return (hits + rest)[:MAX_CANDIDATE_CHUNKS]


def fetch_chunks(index: ChunkIndex, chunk_ids: list[str], vector: np.ndarray, *, texts: bool = True) -> dict[str, ChunkHit]:
    """Stored chunks by id, each scored by its cosine similarity to ``vector``
    (:meth:`~ragtopics.storage.chunk_index.ChunkIndex.chunks_by_id`; ``texts`` False: without their texts);
    chunk id → hit, in the order asked."""
    return index.chunks_by_id(chunk_ids, vector, texts=texts)


def with_texts(
    index: ChunkIndex, ranked: list[ChunkHit], chunks: dict[str, ChunkHit], bare: set[str], count: int
) -> list[ChunkHit]:
    """The ranked chunks, the first ``count`` of them with their texts (read in one round trip for those in ``bare``).

    LOCAL ranks its candidates (up to :data:`MAX_CANDIDATE_CHUNKS`) by their embeddings and ids alone and reads
    the text, context and pictures of the few it keeps or reads for file names.

    Args:
        ranked: the ranked chunks, best first.
        chunks: chunk id → hit; the completed hits replace the bare ones in it.
        bare: ids of the hits read without their texts; the completed ones leave it.
        count: how many of the first chunks need their texts.

    Returns:
        ``ranked`` with the same chunks in the same order (a chunk deleted meanwhile keeps its bare hit).
    """
    wanted = [h.chunk_id for h in ranked[:count] if h.chunk_id in bare]
    if not wanted:
        return ranked
    full, _ = index.read_hits(wanted)
    for cid, hit in full.items():
        chunks[cid] = replace(hit, score=chunks[cid].score)
        bare.discard(cid)
    return [chunks.get(h.chunk_id, h) if h.chunk_id in full else h for h in ranked]


def _links(sub: Subgraph, chunks: dict[str, ChunkHit]) -> dict[str, list[str]]:
    """Chunk id → the subgraph entities that carry it (``[]`` for an unlinked chunk), for every fetched chunk."""
    links: dict[str, list[str]] = {cid: [] for cid in chunks}
    for e in sub.entities:
        for cid in e.chunk_ids:
            if cid in links:
                links[cid].append(e.id)
    return links


def personalized_pagerank(
    sub: Subgraph,
    chunk_links: dict[str, list[str]],
    seed_weights: dict[str, float],
    chunk_cosine: dict[str, float],
    *,
    damping: float = PPR_DAMPING,
    passage_weight: float = PASSAGE_NODE_WEIGHT,
) -> dict[str, float]:
    """Personalized PageRank over the subgraph's entities and the chunks linked to them (HippoRAG 2).

    Nodes: entities and chunks. Edges (undirected): each relationship, weighted ``log(1 + strength)``
    (so a tie repeated in many chunks does not drown the rest); each entity–chunk mention, weight 1.
    Reset vector: the seed weights on seed entities, plus ``passage_weight`` × the chunk's cosine
    (min-max scaled to [0, 1] over the chunks) on every chunk; normalised to sum 1.

    Args:
        sub: the expanded subgraph.
        chunk_links: chunk id → ids of the subgraph entities that carry it.
        seed_weights: entity id → reset weight (> 0).
        chunk_cosine: chunk id → cosine similarity to the question.
        damping: probability of following an edge at each step.
        passage_weight: the chunks' share of the reset weight, relative to a seed of weight 1.

    Returns:
        node id (entity or chunk) → PageRank probability; all nodes together sum to 1 (``{}`` for no nodes).
    """
    names = list(dict.fromkeys([*(e.id for e in sub.entities), *chunk_links]))
    if not names:
        return {}
    at = {name: i for i, name in enumerate(names)}
    edges, weights = [], []
    for r in sub.relationships:
        if r.source_id in at and r.target_id in at:
            edges.append((at[r.source_id], at[r.target_id]))
            weights.append(math.log1p(max(r.strength, 0.0)) or 1e-3)
    for cid, entity_ids in chunk_links.items():
        for eid in entity_ids:
            if eid in at:
                edges.append((at[eid], at[cid]))
                weights.append(1.0)
    graph = igraph.Graph(n=len(names), edges=edges)
    low, high = min(chunk_cosine.values(), default=0.0), max(chunk_cosine.values(), default=0.0)
    reset = [seed_weights.get(name, 0.0) for name in names]
    for cid, cos in chunk_cosine.items():
        if cid in at:
            reset[at[cid]] += passage_weight * ((cos - low) / (high - low) if high > low else 1.0)
    if sum(reset) <= 0:
        return dict.fromkeys(names, 0.0)
    scores = graph.personalized_pagerank(directed=False, damping=damping, reset=reset, weights=weights or None)
    return dict(zip(names, scores))


def more_candidates(
    store: GraphStore, index: ChunkIndex, question: str, vector: np.ndarray, chunks: dict[str, ChunkHit], *, keywords: bool
) -> dict[str, list[str]]:
    """Two more ranked lists of chunks for LOCAL's fusion, found without the subgraph.

    * ``named``: the chunks *about* an entity the question names (:meth:`GraphStore.chunks_about_names`
      of the question's candidate names, :func:`~ragtopics.graph.path.candidate_names`), most similar
      to the question first: "Who is older, Sid Haig or Vic Darchinyan?" needs both articles, and
      the graph knows which chunks are about each name.
    * ``keyword``: BM25 hits of the question's keywords over the Topic's chunks (Local Keyword Search
      on), as a RAG Topic's HYBRID search adds them: exact names and codes.

    Measured on ``hotpotqa-opaque`` (LOCAL FUSED recall@5, with entity bridging): 0.860 without
    either, 0.880 with ``named``, 0.885 with ``keyword``, 0.895 with both.

    Args:
        chunks: chunk id → fetched hit; chunks fetched here are added to it, without their texts (as LOCAL's
            candidates are read: :func:`with_texts`).
        keywords: whether to add the ``keyword`` list.

    Returns:
        list name → chunk ids, best first (only fetched chunks).
    """
    from ragtopics.graph.path import MAX_NAME_LOOKUPS, candidate_names  # path.py builds on this module

    lists = {"named": store.chunks_about_names(candidate_names(question)[:MAX_NAME_LOOKUPS])}
    if keywords:
        lists["keyword"] = [h.chunk_id for h in index.search_keywords(query_keywords(question), CHUNK_SEARCH_DEPTH, full=False)]
    wanted = list(dict.fromkeys(cid for ids in lists.values() for cid in ids if cid not in chunks))
    if wanted:
        chunks.update(fetch_chunks(index, wanted, vector, texts=False))
    lists["named"] = sorted((cid for cid in lists["named"] if cid in chunks), key=lambda cid: -chunks[cid].score)
    if keywords:
        lists["keyword"] = [cid for cid in lists["keyword"] if cid in chunks]
    return lists


def rank_chunks(ppr: dict[str, float], cosine: dict[str, float], more: dict[str, list[str]] | None = None) -> list[str]:
    """Chunks ordered by reciprocal rank fusion of their PageRank order, their cosine order and ``more`` lists.

    Args:
        ppr: node id → personalized PageRank (chunks absent from the subgraph count 0).
        cosine: chunk id → cosine similarity to the question: every candidate chunk.
        more: further ranked lists (:func:`more_candidates`), chunk ids best first.

    Returns:
        Every chunk of ``cosine``, best first (ties: higher cosine first).
    """
    by_cosine = sorted(cosine, key=lambda cid: -cosine[cid])
    by_ppr = sorted(by_cosine, key=lambda cid: -ppr.get(cid, 0.0))
    fused = reciprocal_rank_fusion({"cosine": by_cosine, "ppr": by_ppr, **(more or {})}, k=DEFAULT_RRF_K)
    return [cid for cid in fused if cid in cosine]


def graph_chunk_evidence(hit: ChunkHit, *, topic: str = "") -> Evidence:
    """A chunk as evidence (:func:`~ragtopics.answer.context.chunk_evidence`), a graph-ingestion record marked as such."""
    item = chunk_evidence(hit, topic=topic)
    if not hit.file_name.endswith(GRAPH_INGESTION_SUFFIX):
        return item
    name = hit.file_name[: -len(GRAPH_INGESTION_SUFFIX)]
    return replace(item, provenance=tuple(replace(p, file_name=name, kind="graph_ingestion") for p in item.provenance))


def provenance_of(
    chunk_ids: Iterable[str], chunks: dict[str, ChunkHit], *, limit: int = MAX_ITEM_DOCUMENTS
) -> tuple[Provenance, ...]:
    """The documents behind some chunks, grouped by document, best chunk first (only fetched chunks count).

    Returns:
        At most ``limit`` provenances, the document of the best chunk first; each lists its chunks best first.
    """
    ranked = sorted((chunks[cid] for cid in set(chunk_ids) if cid in chunks), key=lambda h: (-h.score, h.chunk_id))
    grouped: dict[str, list[ChunkHit]] = {}
    for hit in ranked:
        grouped.setdefault(hit.document_id, []).append(hit)
    out = []
    for hits in list(grouped.values())[:limit]:
        prov = graph_chunk_evidence(hits[0]).provenance[0]
        pages = tuple(sorted({p for h in hits for p in h.pages}))
        out.append(replace(prov, chunk_ids=tuple(h.chunk_id for h in hits), pages=pages))
    return tuple(out)


def graph_items(
    sub: Subgraph,
    ppr: dict[str, float],
    chunks: dict[str, ChunkHit],
    *,
    describe: Callable[[list[tuple[str, str]]], dict[tuple[str, str], str]] | None = None,
) -> list[Evidence]:
    """The subgraph as a few bounded evidence items: the entities with most PageRank, then the relationships among them.

    Args:
        describe: reads the descriptions of the relationships shown, ``(source id, target id)`` → description
            (:meth:`GraphStore.relationship_descriptions`), for a subgraph read without them; None: ``sub``'s own.

    Returns:
        At most :data:`MAX_ENTITY_ITEMS` entity items and :data:`MAX_RELATIONSHIP_ITEMS` relationship
        items, each cut to :data:`MAX_ITEM_CHARS`; items without a fetched chunk (nothing to cite) are left out.
    """
    names = {e.id: e.name for e in sub.entities}
    entities = [e for e in sorted(sub.entities, key=lambda e: -ppr.get(e.id, 0.0)) if e.chunk_ids & chunks.keys()]
    entities = entities[:MAX_ENTITY_ITEMS]
    shown = {e.id for e in entities}
    rels = [r for r in sub.relationships if r.source_id in shown and r.target_id in shown and r.chunk_ids & chunks.keys()]
    rels = sorted(rels, key=lambda r: -(ppr.get(r.source_id, 0.0) + ppr.get(r.target_id, 0.0)))[:MAX_RELATIONSHIP_ITEMS]
    if describe is not None and rels:
        said = describe([(r.source_id, r.target_id) for r in rels])
        rels = [replace(r, description=said.get((r.source_id, r.target_id), r.description)) for r in rels]
    items = [_item("entity", e.id, _entity_text(e), e.chunk_ids, chunks) for e in entities]
    items += [
        _item("relationship", f"rel-{r.source_id[4:]}-{r.target_id[4:]}", relationship_text(r, names), r.chunk_ids, chunks)
        for r in rels
    ]
    return items


def relationship_text(r: Relationship, names: dict[str, str]) -> str:
    """``A —[description]— B`` (see :func:`short_description`), ends named by ``names`` (entity id → name)."""
    return f"{names.get(r.source_id, r.source_id)} —[{short_description(r)}]— {names.get(r.target_id, r.target_id)}"


def short_description(r: Relationship) -> str:
    """A relationship's description on one line, cut to :data:`MAX_ITEM_CHARS` (``related`` when it has none)."""
    return " ".join(r.description.split())[:MAX_ITEM_CHARS] or "related"


def _entity_text(e: Entity) -> str:
    desc = " ".join(e.description.split())
    return f"{e.name} ({e.type}): {desc}"[:MAX_ITEM_CHARS] if desc else f"{e.name} ({e.type})"


def _item(kind: str, item_id: str, text: str, chunk_ids: Iterable[str], chunks: dict[str, ChunkHit]) -> Evidence:
    prov = provenance_of(chunk_ids, chunks)
    score = max((chunks[c].score for p in prov for c in p.chunk_ids), default=0.0)
    return Evidence(kind=kind, id=item_id, text=text, score=score, provenance=prov)  # type: ignore[arg-type]
