"""When a GraphRAG Topic's communities are rebuilt: Recompute Communities Now and the Refresh Cycle.

A rebuild is always a background job (``ragtopics.worker.jobs.rebuild_communities``),
never part of an upload. Two ways start one:

- :func:`enqueue_rebuild` (the console's Recompute Communities Now, ``ragtopics
  communities TOPIC --recompute``): enqueued at once, unless a rebuild of the Topic is
  already queued or running, whose job id is returned instead.
- :func:`schedule_refresh` (the Refresh Cycle): rq's scheduler runs the job after the
  Topic's interval (``Queue.enqueue_in``; the worker runs with rq's scheduler on). Each
  scheduled run schedules the next one; the worker schedules every GraphRAG Topic when it
  starts, and saving a Topic's settings schedules it again, so an interval change takes
  effect at once.

Two rebuilds of a Topic never overlap: :func:`run_rebuild` holds a Redis lock per Topic
and skips (``status: skipped``) when another run holds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from dataclasses import asdict
from datetime import timedelta

from rq.exceptions import NoSuchJobError
from rq.job import Job

from ragtopics.graph.communities import rebuild
from ragtopics.graph.community_index import CommunityIndex
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.lifecycle import clear_recompute_due, due_marker
from ragtopics.graph.model import graph_settings
from ragtopics.ingest.cost import record_rebuild
from ragtopics.jobs.queue import queue_for
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.topics.topics import get_topic, list_topics
from ragtopics.tracing.reports import record_trace
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: ``reason`` of a rebuild started by the Refresh Cycle (such a run schedules the next one).
REFRESH_CYCLE = "refresh cycle"


def _job_key(topic_id: str) -> str:
    return f"rt:{topic_id}:communities:job"


def _next_key(topic_id: str) -> str:
    return f"rt:{topic_id}:communities:next"


def rebuild_job_id(rt: Runtime, topic_id: str) -> str | None:
    """The id of the Topic's latest rebuild job (queued, running or done), or None."""
    return _decode(rt.redis.get(_job_key(topic_id)))


def lock_key(topic_id: str) -> str:
    """The Redis key of the lock a rebuild of the Topic holds."""
    return f"rt:lock:communities:{topic_id}"


def enqueue_rebuild(rt: Runtime, topic, *, reason: str = "recompute now") -> str:
    """Enqueue a community rebuild of a GraphRAG Topic, or return the id of one already queued or running.

    Raises:
        ConfigurationError: for a RAG Topic.
        redis.RedisError: when the queue cannot be reached.
    """
    graph_settings(topic)
    current = _decode(rt.redis.get(_job_key(topic.id)))
    if current and _status(rt, current) in ("queued", "started", "deferred"):
        return current
    job = queue_for(rt).enqueue_call(
        "ragtopics.worker.jobs.rebuild_communities",
        args=(topic.id,),
        kwargs={"reason": reason},
        description=f"communities of {topic.name}",
        result_ttl=7 * 24 * 3600,
        failure_ttl=7 * 24 * 3600,
        meta={"phase": "queued", "done": 0, "total": 0, "topic_id": topic.id},
    )
    rt.redis.set(_job_key(topic.id), job.id, ex=7 * 24 * 3600)
    return job.id


def schedule_refresh(rt: Runtime, topic) -> str | None:
    """Schedule the Topic's next Refresh Cycle rebuild (replacing a scheduled one); None when the cycle is off.

    Returns:
        The scheduled job's id; ``None`` for a RAG Topic or a Refresh Cycle of ``off``.
    """
    previous = _decode(rt.redis.get(_next_key(topic.id)))
    if previous and _status(rt, previous) == "scheduled":
        with contextlib.suppress(NoSuchJobError):
            Job.fetch(previous, connection=rt.redis).cancel()
    cfg = topic.settings
    interval = cfg.refresh_interval_s if isinstance(cfg, GraphRagTopicSettings) else None
    if not interval:
        rt.redis.delete(_next_key(topic.id))
        return None
    job = queue_for(rt).enqueue_in(
        timedelta(seconds=interval),
        "ragtopics.worker.jobs.rebuild_communities",
        args=(topic.id,),
        kwargs={"reason": REFRESH_CYCLE},
        description=f"communities of {topic.name} (refresh cycle {topic.settings.refresh_cycle})",
        result_ttl=7 * 24 * 3600,
        failure_ttl=7 * 24 * 3600,
        meta={"phase": "scheduled", "done": 0, "total": 0, "topic_id": topic.id},
    )
    rt.redis.set(_next_key(topic.id), job.id)
    log.info("next community rebuild of Topic %s in %s", topic.name, topic.settings.refresh_cycle)
    return job.id


def next_refresh(rt: Runtime, topic_id: str) -> float | None:
    """When the next Refresh Cycle rebuild is due (seconds since the epoch), or None when none is scheduled."""
    job_id = _decode(rt.redis.get(_next_key(topic_id)))
    score = rt.redis.zscore(queue_for(rt).scheduled_job_registry.key, job_id) if job_id else None
    return float(score) if score is not None else None


def schedule_all(rt: Runtime) -> int:
    """Schedule the Refresh Cycle of every GraphRAG Topic that has none scheduled (the worker calls it at start).

    Returns:
        How many Topics were scheduled now.
    """
    scheduled = 0
    for topic in list_topics(rt):
        if not isinstance(topic.settings, GraphRagTopicSettings):  # only a graph has communities to refresh
            continue
        current = _decode(rt.redis.get(_next_key(topic.id)))
        if current and _status(rt, current) == "scheduled":
            continue
        scheduled += schedule_refresh(rt, topic) is not None
    return scheduled


def run_rebuild(rt: Runtime, topic_id: str, *, reason: str = "recompute now", progress=None) -> dict:
    """Rebuild a Topic's communities now, holding the Topic's rebuild lock (the job's body).

    Clears the "recompute due" mark unless the graph changed again during the run, saves
    the run's trace (kind ``communities``) and, for a Refresh Cycle run, schedules the next.

    Returns:
        The run's counts with ``status: done``, or ``{"status": "skipped", "reason": ...}``.

    Raises:
        NotFoundError: when the Topic is gone.
        ModelUnavailableError: when the embedding model cannot be reached (nothing is written).
    """
    topic = get_topic(rt, topic_id)
    try:
        return _locked_rebuild(rt, topic, reason, progress)
    finally:
        if reason == REFRESH_CYCLE:  # the cycle goes on whatever this run did
            schedule_refresh(rt, get_topic(rt, topic_id))


def _holder_token() -> str:
    """The value a rebuild lock holds: ``host|pid|random``, so a later run can tell that its holder died."""
    return f"{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex}"


def break_dead_lock(rt: Runtime, topic_id: str) -> bool:
    """Release the Topic's rebuild lock when its holder was a process on this machine that no longer runs.

    A worker killed mid-rebuild leaves the lock for up to JOB_TIMEOUT_S; without this, the run queued
    again after the crash would find it taken and skip. A holder on another machine is left to the TTL.

    Returns:
        Whether a dead holder's lock was released.
    """
    held = _decode(rt.redis.get(lock_key(topic_id)))
    host, _, rest = held.partition("|")
    pid = rest.partition("|")[0]
    if not held or host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
        return False  # the holder still runs
    except ProcessLookupError:
        pass
    except PermissionError:
        return False
    # Compare and delete in one step: only the dead holder's lock goes, never one taken meanwhile.
    released = rt.redis.eval(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
        1,
        lock_key(topic_id),
        held,
    )
    if released:
        log.warning("released the community rebuild lock of Topic %s: its holder (pid %s) no longer runs", topic_id, pid)
    return bool(released)


def _locked_rebuild(rt: Runtime, topic, reason: str, progress) -> dict:
    lock = rt.redis.lock(lock_key(topic.id), timeout=rt.settings.job_timeout_s, blocking=False)
    if not lock.acquire(token=_holder_token()) and not (break_dead_lock(rt, topic.id) and lock.acquire(token=_holder_token())):
        return {"status": "skipped", "reason": "another rebuild of this Topic is running"}
    try:
        due_before = due_marker(rt, topic.id)
        store = graph_store(rt, topic)
        store.ensure()
        index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims, embedding_model=rt.gateway.embedder.model)
        trace = Trace("communities", topic.name, topic.settings.role_models)
        try:
            result = rebuild(
                topic.id,
                store,
                index,
                rt.gateway,
                resolution=topic.settings.resolution,
                progress=progress,
                trace=trace,
                template=resolve_prompts(rt, topic.id)["community_report"],
            )
        finally:
            record_trace(
                rt,
                trace,
                kind="communities",
                owner=f"communities:{topic.id}",
                subject=f"{topic.name} ({reason})",
                topic_id=topic.id,
            )
            record_rebuild(rt, topic.id, trace)  # reports per chunk stored since the last rebuild, for the cost estimate
        if due_marker(rt, topic.id) == due_before:  # no upload or delete while it ran
            clear_recompute_due(rt, topic.id)
    finally:
        lock.release()
    return {"status": "done", "reason": reason, **asdict(result)}


def _status(rt: Runtime, job_id: str) -> str:
    try:
        status = Job.fetch(job_id, connection=rt.redis).get_status(refresh=True)
    except NoSuchJobError:
        return "missing"
    return getattr(status, "value", status) or "missing"


def _decode(value) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")
