"""How a GraphRAG Topic extends the delete sequences, and when its communities are due for a recompute.

Importing this module adds, once:

- to a document delete (:mod:`ragtopics.documents.delete`): ``remove_graph_share``,
  which removes the document's chunk ids from every entity's and relationship's
  provenance (deleting what is left without any, and rebuilding the description,
  aliases and strength of what stays from the chunks left; an entity keeps its vector,
  made of its name) and marks a recompute as due;
- to a Topic delete (:mod:`ragtopics.topics.delete`): ``drop_graph``, which deletes the
  Topic's FalkorDB graph and every RediSearch index named for the Topic.

Community summaries are not rewritten by an upload or a delete: the Topic records
that a recompute is due, and the next rebuild (Refresh Cycle or Recompute Communities
Now) brings them up to date.
"""

from __future__ import annotations

import logging
import time

from ragtopics.documents.delete import Deletion, add_delete_step
from ragtopics.graph.store import GraphStore
from ragtopics.runtime import Runtime
from ragtopics.topics.delete import TopicDeletion, add_topic_delete_step
from ragtopics.topics.topics import get_topic

log = logging.getLogger(__name__)


def due_key(topic_id: str) -> str:
    """The Redis key that says why a Topic's communities are due for a recompute (absent: up to date)."""
    return f"rt:{topic_id}:communities:due"


def mark_recompute_due(rt: Runtime, topic_id: str, reason: str) -> None:
    """Record that the communities of a Topic no longer match its graph (shown in the console and ``graph --stats``):
    the latest change's ``reason``, how many changes since the last run, and since when."""
    pipe = rt.redis.pipeline(transaction=True)
    pipe.hset(due_key(topic_id), "reason", reason)
    pipe.hsetnx(due_key(topic_id), "since", f"{time.time():.0f}")
    pipe.hincrby(due_key(topic_id), "changes", 1)  # grows with every change: see due_marker
    pipe.execute()


def due_marker(rt: Runtime, topic_id: str) -> bytes | str | None:
    """The count of changes since the last rebuild, which grows with every :func:`mark_recompute_due`: a rebuild
    clears the mark only when it is unchanged after the run (no upload or delete while it ran). ``None`` when
    no change was counted."""
    return rt.redis.hget(due_key(topic_id), "changes")


def recompute_due(rt: Runtime, topic_id: str) -> str:
    """Why a recompute is due (``curie.txt was uploaded``, ``curie.txt was uploaded and 11 other changes``),
    or "" when the communities are up to date."""
    reason, changes = rt.redis.hmget(due_key(topic_id), ["reason", "changes"])
    if not reason:
        return ""
    text = reason.decode() if isinstance(reason, bytes) else reason
    others = int(changes or 1) - 1
    return f"{text} and {others} other change{'' if others == 1 else 's'}" if others > 0 else text


def clear_recompute_due(rt: Runtime, topic_id: str) -> None:
    """Forget the due mark (after a rebuild)."""
    rt.redis.delete(due_key(topic_id))


def _graph_store(rt: Runtime, topic_id: str) -> GraphStore | None:
    # deferred: graph.ingest imports this module at module level (through graph.corrections)
    from ragtopics.graph.ingest import graph_store

    topic = get_topic(rt, topic_id)
    return graph_store(rt, topic) if topic.kind == "graphrag" else None


def _remove_graph_share(d: Deletion) -> None:
    """Remove the document's share of the graph; entities other documents also mention stay, with what those say.

    Counts ``entities`` and ``relationships`` removed, ``entities_kept`` and ``relationships_kept`` (rebuilt
    from the chunks left), and ``descriptions_changed`` (kept entities whose description lost text).
    """
    store = _graph_store(d.rt, d.topic_id)
    if store is None or not store.exists():
        return
    report = store.remove_document(d.document.id)  # entities that stay keep their vectors (made of their names)
    d.count("entities", report.entities_removed)
    d.count("relationships", report.relationships_removed)
    d.count("entities_kept", report.entities_kept)
    d.count("relationships_kept", report.relationships_kept)
    d.count("descriptions_changed", len(report.rebuilt))
    mark_recompute_due(d.rt, d.topic_id, f"{d.document.file_name} was deleted")
    log.info("graph share of %s removed: %s", d.document.file_name, report)


def _drop_graph(t: TopicDeletion) -> None:
    """Delete the Topic's graph, and every RediSearch index named for the Topic (entities, community reports)."""
    if t.topic.kind == "graphrag":
        # deferred: graph.ingest imports this module at module level (through graph.corrections)
        from ragtopics.graph.ingest import graph_store

        store = graph_store(t.rt, t.topic)
        if store.exists():
            t.count("graph_entities", store.stats().get("entities", 0))
            store.drop()
    names = [n.decode() if isinstance(n, bytes) else n for n in t.rt.redis.execute_command("FT._LIST")]
    for name in names:
        if name.startswith(f"rt-{t.topic.id}-"):
            t.rt.redis.execute_command("FT.DROPINDEX", name, "DD")
            t.count("search_indexes", 1)


add_delete_step("remove_graph_share", _remove_graph_share, before="remove_files")
add_topic_delete_step("drop_graph", _drop_graph, before="drop_index")
