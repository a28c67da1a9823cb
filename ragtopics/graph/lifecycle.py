"""When a GraphRAG Topic's communities are due for a recompute.

An upload or a delete marks a recompute as due (the GraphRAG kind's delete steps,
:mod:`ragtopics.kinds.graphrag`, remove a document's share of the graph, or the graph).
Community summaries are not rewritten by an upload or a delete: the Topic records that a
recompute is due, and the next rebuild (Refresh Cycle or Recompute Communities Now) brings
them up to date.
"""

from __future__ import annotations

import logging
import time

from ragtopics.runtime import Runtime

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
