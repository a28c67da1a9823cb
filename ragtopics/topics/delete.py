"""Deleting a Topic: its index, documents, chats, traces, prompts, stored files and job records.

Like a document delete (:mod:`ragtopics.documents.delete`), a Topic delete is a
sequence of named, idempotent steps (:data:`TOPIC_DELETE_STEPS`), to which the Topic's
kind adds its own (:meth:`~ragtopics.kinds.TopicKind.topic_delete_steps`: a GraphRAG
Topic's graph) and other parts of the product add theirs with :func:`add_topic_delete_step`.
The SQL rows go last, so a delete that stopped half-way can be run again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rq.job import Job

from ragtopics.documents.delete import delete_steps, insert_step
from ragtopics.jobs.queue import BATCH_OF, TOPIC_JOBS, job_topic_id
from ragtopics.kinds import kind_of
from ragtopics.runtime import Runtime
from ragtopics.storage import documents as document_store
from ragtopics.storage import topics as topic_store
from ragtopics.storage.locks import document_lock
from ragtopics.topics.keys import remove_topic_keys
from ragtopics.topics.topics import Topic, get_topic, update_settings

log = logging.getLogger(__name__)

#: How long a Topic delete waits for jobs of its documents that are running right now, in seconds.
RUNNING_JOB_WAIT_S = 30.0


@dataclass
class TopicDeletion:
    """What a Topic delete works on, and what each step removed.

    Attributes:
        rt: the runtime.
        topic: the Topic.
        removed: counts by kind (``redis_keys``, ``files``, ``jobs``, table names, ...).
        notes: things the operator should know (a job still running, Topics disconnected).
    """

    rt: Runtime
    topic: Topic
    removed: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def count(self, kind: str, n: int) -> None:
        """Add ``n`` removed things of ``kind``."""
        self.removed[kind] = self.removed.get(kind, 0) + n


TopicDeleteStep = Callable[[TopicDeletion], None]


def topic_job_ids(rt: Runtime, topic_id: str) -> list[str]:
    """Ids of the RQ job records (queued, running, finished, failed, ...) that belong to a Topic (see :func:`topic_jobs`)."""
    return [job.id for job in topic_jobs(rt, topic_id)]


def topic_jobs(rt: Runtime, topic_id: str) -> list[Job]:
    """The RQ jobs that belong to a Topic: those of its job set (:data:`~ragtopics.jobs.queue.TOPIC_JOBS`) and
    of its documents' versions, read in one round trip. No registry is read, so the cost follows the
    Topic's own jobs, not the queue's.
    """
    candidates = {m.decode() if isinstance(m, bytes) else m for m in rt.redis.smembers(TOPIC_JOBS.format(topic_id))}
    candidates.update(document_store.job_ids(rt.metadata, topic_id))
    jobs = Job.fetch_many(sorted(candidates), connection=rt.redis)
    return [job for job in jobs if job is not None and job_topic_id(job) == topic_id]


def _stop_documents(d: TopicDeletion) -> None:
    """Mark every document ``deleting`` (running jobs stop at their next step) and cancel queued jobs."""
    rows = document_store.topic_documents(d.rt.metadata, d.topic.id)
    for row in rows:
        with document_lock(d.rt.redis, row.id):
            document_store.begin_delete(d.rt.metadata, row.id)
    for job in topic_jobs(d.rt, d.topic.id):
        if _status(job) in ("queued", "deferred", "scheduled"):
            job.cancel()


def _drop_index(d: TopicDeletion) -> None:
    """Drop the Topic's chunk index with its chunks, and every other Redis key the Topic owns.

    Those keys are named, not searched for (:func:`~ragtopics.topics.keys.topic_keys`: its keys of one
    name and those its jobs noted), with the shared-job names of its documents' versions: the cost
    follows the Topic's own keys, and no other key of the server is read or walked.
    """
    index = d.rt.chunk_index(d.topic.id)
    d.count("chunks", index.count())
    index.drop()
    versions = document_store.job_ids(d.rt.metadata, d.topic.id)
    d.count("redis_keys", remove_topic_keys(d.rt, d.topic.id, [BATCH_OF.format(job_id) for job_id in versions]))


def _drop_search_indexes(d: TopicDeletion) -> None:
    """Drop every other RediSearch index named for the Topic (a GraphRAG Topic's entities and community reports)."""
    names = [n.decode() if isinstance(n, bytes) else n for n in d.rt.redis.execute_command("FT._LIST")]
    for name in names:
        if name.startswith(f"rt-{d.topic.id}-"):
            d.rt.redis.execute_command("FT.DROPINDEX", name, "DD")
            d.count("search_indexes", 1)


def _remove_jobs(d: TopicDeletion) -> None:
    """Remove the Topic's job records; waits up to RUNNING_JOB_WAIT_S for running jobs to stop first.

    While waiting, only the status of the jobs still running is read.
    """
    deadline = time.monotonic() + RUNNING_JOB_WAIT_S
    running_ids = [job.id for job in topic_jobs(d.rt, d.topic.id) if _status(job) == "started"]
    while running_ids and time.monotonic() <= deadline:
        time.sleep(0.2)
        pipe = d.rt.redis.pipeline(transaction=False)
        for job_id in running_ids:
            pipe.hget(Job.key_for(job_id), "status")
        running_ids = [
            job_id for job_id, status in zip(running_ids, pipe.execute(), strict=True) if status in (b"started", "started")
        ]
    jobs = topic_jobs(d.rt, d.topic.id)  # again: a job that stopped meanwhile may have queued others
    running = [job for job in jobs if _status(job) == "started"]
    for job in jobs:
        if job not in running:
            job.delete()
            d.count("jobs", 1)
    d.rt.redis.delete(TOPIC_JOBS.format(d.topic.id))
    if running:
        d.rt.redis.sadd(TOPIC_JOBS.format(d.topic.id), *[job.id for job in running])
        d.notes.append(f"{len(running)} indexing job(s) were still running; they stop at their next step and store nothing")


def _status(job: Job) -> str:
    """A fetched job's status (as read with it)."""
    status = job.get_status(refresh=False)
    return getattr(status, "value", status) or ""


def _disconnect(d: TopicDeletion) -> None:
    """Remove the Topic from the MCP Interfaces of every Topic connected to it."""
    for row in topic_store.all_topics(d.rt.metadata):
        if row.id == d.topic.id:
            continue
        other = get_topic(d.rt, row.id)
        names = list(other.settings.mcp_interfaces)
        kept = [n for n in names if n not in (d.topic.name, d.topic.id)]
        if kept != names:
            update_settings(d.rt, other.id, {"mcp_interfaces": kept})
            d.notes.append(f"Topic {other.name!r} is no longer connected to it")


def _remove_rows(d: TopicDeletion) -> None:
    """Delete the Topic's SQL rows: chats, pictures, documents, traces, prompt overrides, settings versions, the Topic."""
    for table, n in topic_store.delete_topic_rows(d.rt.metadata, d.topic.id).items():
        d.count(table, n)


def _remove_files(d: TopicDeletion) -> None:
    """Remove the Topic's files from the file store (every document version and picture)."""
    d.count("files", d.rt.blobs.remove_tree(d.topic.id))


#: The steps of a Topic delete, in order: ``(name, step)``.
TOPIC_DELETE_STEPS: list[tuple[str, TopicDeleteStep]] = [
    ("stop_documents", _stop_documents),
    ("drop_index", _drop_index),
    ("drop_search_indexes", _drop_search_indexes),
    ("remove_jobs", _remove_jobs),
    ("disconnect", _disconnect),
    ("remove_files", _remove_files),
    ("remove_rows", _remove_rows),
]


def add_topic_delete_step(name: str, step: TopicDeleteStep, *, before: str = "remove_files") -> None:
    """Insert a step into :data:`TOPIC_DELETE_STEPS` before the step ``before`` (idempotent by name).

    Raises:
        ValueError: when ``before`` names no step.
    """
    insert_step(TOPIC_DELETE_STEPS, name, step, before=before)


def delete_topic(rt: Runtime, name_or_id: str) -> TopicDeletion:
    """Delete a Topic and everything it holds.

    Returns:
        The deletion, with what was removed (``removed``) and notes for the operator.

    Raises:
        NotFoundError: when there is no such Topic.
    """
    import ragtopics.demo.links  # noqa: F401 - adds its step (the Topic's demo links); demo imports this module

    topic = get_topic(rt, name_or_id)
    deletion = TopicDeletion(rt, topic)
    for name, step in delete_steps(TOPIC_DELETE_STEPS, kind_of(topic).topic_delete_steps()):
        step(deletion)
        log.debug("delete Topic %s: %s done", topic.name, name)
    log.info("deleted Topic %r (%s): %s", topic.name, topic.id, deletion.removed)
    return deletion
