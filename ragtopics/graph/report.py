"""What the console and the CLI show about a GraphRAG Topic's graph: counts, the last community run, one entity."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from ragtopics.errors import NotFoundError
from ragtopics.graph.communities import last_run
from ragtopics.graph.community_index import CommunityIndex
from ragtopics.graph.corrections import history_of
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.lifecycle import recompute_due
from ragtopics.graph.model import graph_settings
from ragtopics.runtime import Runtime


def graph_stats(rt: Runtime, topic) -> dict[str, Any]:
    """Counts of a GraphRAG Topic: chunks, entities, relationships, documents, communities, summaries, the last run.

    Raises:
        ConfigurationError: for a RAG Topic.
    """
    graph_settings(topic)
    store = graph_store(rt, topic)
    counts = store.stats() if store.exists() else {"entities": 0, "relationships": 0, "chunks": 0, "documents": 0}
    out: dict[str, Any] = {
        "topic": topic.name,
        "chunks": rt.chunk_index(topic.id).count(),
        "entities": counts.get("entities", 0),
        "relationships": counts.get("relationships", 0),
        "graph_chunks": counts.get("chunks", 0),
        "documents": counts.get("documents", 0),
    }
    out.update(community_stats(rt, topic))
    out["recompute_due"] = recompute_due(rt, topic.id)
    return out


def community_stats(rt: Runtime, topic) -> dict[str, Any]:
    """Communities, summaries and the last rebuild of a Topic (zeros and None before the first run); the last
    run carries ``finished_at`` (epoch seconds) and ``finished`` (``2026-12-01 05:57:38 UTC``)."""
    run = last_run(rt.redis, topic.id)
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims)
    last = None
    if run:  # finished_at (seconds since the epoch) also as a readable UTC time
        finished = datetime.fromtimestamp(run.finished_at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        last = {**asdict(run), "finished": finished if run.finished_at else ""}
    return {"communities": run.communities if run else 0, "summaries": index.count(), "last_run": last}


def entity_info(rt: Runtime, topic, name: str) -> dict[str, Any]:
    """One entity by name or alias: its type, description, aliases, chunks, relationships (with the other end's name),
    communities, and its history: the operator's corrections that concern it (:func:`~ragtopics.graph.corrections.history_of`).

    Raises:
        ConfigurationError: for a RAG Topic.
        NotFoundError: when no entity has that name or alias.
    """
    graph_settings(topic)
    store = graph_store(rt, topic)
    entity = store.entity_by_name(name) if store.exists() else None
    if entity is None:
        raise NotFoundError(
            f"Topic {topic.name!r} has no entity called {name!r} (names and aliases are compared "
            "ignoring case, spaces and punctuation)"
        )
    around = store.neighbours([entity.id], hops=1, limit=200)
    names = {e.id: e.name for e in around.entities}
    relationships: list[dict[str, Any]] = [
        {
            "source": names.get(r.source_id, r.source_id),
            "target": names.get(r.target_id, r.target_id),
            "description": r.description,
            "strength": round(r.strength, 3),
            "chunks": r.mentions,
        }
        for r in around.relationships
        if entity.id in (r.source_id, r.target_id)
    ]
    relationships.sort(key=lambda r: -r["strength"])
    return {
        "id": entity.id,
        "name": entity.name,
        "type": entity.type,
        "description": entity.description,
        "aliases": list(entity.aliases),
        "chunk_ids": sorted(store.chunk_ids_for([entity.id]).get(entity.id, ())),
        "relationships": relationships,
        "communities": _communities_of(rt, topic, entity.id),
        "history": history_of(rt, topic.id, entity),
    }


def _communities_of(rt: Runtime, topic, entity_id: str) -> list[dict[str, Any]]:
    """The communities (id, title) that hold an entity, from the summaries index."""
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims)
    return [{"id": hit.community_id, "title": hit.title, "size": len(hit.entity_ids)} for hit in index.communities_of(entity_id)]
