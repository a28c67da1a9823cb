"""Documents whose indexing job was lost: found at worker start and queued again.

A document is ``queued`` or ``processing`` while a chain of jobs works on its pending
version: the ingest job, and for a GraphRAG Topic the extraction jobs and the job that
finishes the upload (``continued_in``). When Redis crashes in the middle of a job (its
append-only file loses the last second) or the worker process dies, that chain can stop
for good: a job left ``started`` by a worker that no longer runs, a finishing job
``deferred`` behind extraction jobs that are gone, or no job at all. rq's own clean-up
does not see a job that is missing from its registries, so the document would say
``processing`` forever.

Several workers may run it at once, and while others work: a job is never taken for lost
because it is between two of rq's lists. A job a worker started stays that worker's until
rq itself says it was abandoned: every worker renews its job's execution in rq's started
registry (:class:`~ragtopics.worker.main.ProductWorker`), and rq's clean-up
(:meth:`~rq.registry.StartedJobRegistry.cleanup`) fails a job whose execution stopped being
renewed. Only such a failed job, one rq no longer holds anywhere, or a chain waiting on one,
is queued again, and only after the document's row and its job were read again under the
document's lock (a job that finished meanwhile has changed the row).

:func:`recover_stranded` finds those documents and enqueues their ingest job again under
the same job id (the version's id), which the pipeline resumes: chunks whose graph was
already extracted are not extracted again. A document whose pending file is gone is
marked ``failed`` with a message saying to upload it again; nothing already searchable is
touched either way.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.queue import Queue
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.worker import Worker
from sqlmodel import col, select

from ragtopics.documents.uploads import enqueue_document
from ragtopics.errors import StoreUnavailableError
from ragtopics.graph.refresh import rebuild_job_id
from ragtopics.jobs.queue import awaiting_queue, batch_of, enqueue_ingest, queue_for
from ragtopics.runtime import Runtime
from ragtopics.storage import documents as document_store
from ragtopics.storage.locks import WORKER_LOCK_WAIT_S, document_lock, release_dead_holders
from ragtopics.storage.metadata import DocumentRow, TopicRow

log = logging.getLogger(__name__)

#: Document statuses with a job chain in flight.
IN_FLIGHT = ("queued", "processing")
#: Job statuses that still lead somewhere by themselves (rq queues a ``rate_limited`` job when a slot frees:
#: a GraphRAG upload's extraction jobs wait so behind ``EXTRACTION_CONCURRENCY``).
WAITING = ("queued", "scheduled", "rate_limited")
#: Most links followed along a chain of jobs (ingest → finisher, a finisher's dependencies).
MAX_DEPTH = 4
#: How long recovery waits for a document's lock before it leaves the document for its next pass, in seconds.
RECHECK_WAIT_S = 5


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :func:`recover_stranded` did for one document.

    Attributes:
        document_id, file_name: the document.
        why: why its job chain could not finish.
        action: ``requeued`` (ingest enqueued again) or ``failed`` (its pending file is gone).
    """

    document_id: str
    file_name: str
    why: str
    action: str


def recover_stranded(rt: Runtime) -> list[Recovered]:
    """Queue again the ingest of every document whose job chain can no longer finish (see the module docstring).

    Safe to call from any number of workers at any time: rq's clean-up of abandoned jobs runs first,
    and each document found stranded is looked at again under its lock before it is queued.

    Returns:
        One :class:`Recovered` per document acted on; ``[]`` when every chain is alive.

    Raises:
        redis.RedisError: when Redis cannot be reached.
    """
    StartedJobRegistry(queue=queue_for(rt)).cleanup()  # rq fails the jobs whose worker stopped renewing them
    out: list[Recovered] = []
    for row in _in_flight(rt):
        if stranded_reason(rt, row.job_id) is None:
            continue
        try:
            with document_lock(rt.redis, row.id, wait_s=RECHECK_WAIT_S) as fence:
                done = _recover_locked(rt, row.id, row.job_id, fence)
        except StoreUnavailableError:  # busy: someone is working on the document right now
            continue
        if done is not None:
            out.append(done)
    return out


def _recover_locked(rt: Runtime, document_id: str, job_id: str, fence) -> Recovered | None:
    """Under the document's lock (``fence``: its token, checked before each write): read the row and its job chain
    again, and queue it again if it is still stranded."""
    row = document_store.get_document(rt.metadata, document_id)
    if row is None or row.status not in IN_FLIGHT or row.job_id != job_id:
        return None  # finished, superseded or deleted since it was first read
    why = stranded_reason(rt, job_id)
    if why is None:
        return None  # another worker queued it again meanwhile, or its chain moved on
    if row.pending_blob_path and rt.blobs.exists(row.pending_blob_path):
        fence.check()
        if document_store.requeue_lost(rt.metadata, row.id, job_id) is None:
            return None  # superseded meanwhile: the newer job owns the document
        forget_dead_runs(rt, job_id)
        enqueue_ingest(rt, row.topic_id, row.id, job_id=job_id, blob_path=row.pending_blob_path)
        action = "requeued"
    else:
        document_store.fail(
            rt.metadata,
            row.id,
            job_id,
            f"its indexing job was lost ({why}) and the file with it; upload it again",
            before_commit=fence.check,
        )
        action = "failed"
    log.warning("document %s (%s): %s; %s", row.file_name, row.id, why, action)
    return Recovered(row.id, row.file_name, why, action)


def forget_dead_runs(rt: Runtime, job_id: str) -> int:
    """Remove what a dead worker left of a job in rq's bookkeeping, before the job is queued again.

    A worker killed mid-job leaves the job's execution in the started registry and may leave its id
    in the queue's intermediate list. rq's own clean-up later marks a job with such a leftover as
    abandoned (failed), and it checks the job's status, not which run it was: the run queued again
    under the same id would be failed while it waits or runs. (Found by killing Redis and the worker
    together, ``tests/faults/test_redis_kill.py``.)

    Returns:
        How many leftovers were removed.
    """
    queue = queue_for(rt)
    removed = 0
    for registry in (StartedJobRegistry(queue=queue), FailedJobRegistry(queue=queue)):
        stale = [
            entry
            for entry in rt.redis.zrange(registry.key, 0, -1)  # members only (no scores asked)
            if isinstance(entry, (bytes, str)) and _decoded(entry).split(":", 1)[0] == job_id
        ]
        if stale:
            removed += rt.redis.zrem(registry.key, *stale)
    removed += rt.redis.lrem(f"{queue.key}:intermediate", 0, job_id)
    return removed


def _decoded(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def recover_lost_chunks(rt: Runtime) -> list[Recovered]:
    """Index again every indexed document whose chunks the index no longer holds in full.

    Redis appends every write to its append-only file and syncs it once a second
    (``appendfsync everysec``, :mod:`ragtopics.ops.redis_server`): when Redis is killed, up to
    the last second of writes is gone after its restart, while the metadata database already
    says those documents are indexed. Each such document (chunk count in the index differs
    from its row's) is queued again from its stored file, as a re-upload would be; it stays
    searchable with what is left until the job has run. Safe while other workers run: the rows are
    read before the counts, and each document is read again under its lock before it is queued.

    Returns:
        One :class:`Recovered` (action ``requeued``) per document queued again.

    Raises:
        redis.RedisError: when Redis cannot be reached.
    """
    out: list[Recovered] = []
    with rt.metadata.session() as s:
        topic_ids = list(s.exec(select(TopicRow.id)).all())
    for topic_id in topic_ids:
        index = rt.chunk_index(topic_id)
        # The rows first, then the counts: a row says indexed only once its chunks are swapped in, so a
        # document finished between the two reads is seen whole, never as missing chunks.
        with rt.metadata.session() as s:
            rows = s.exec(
                select(DocumentRow).where(
                    DocumentRow.topic_id == topic_id, DocumentRow.status == "indexed", DocumentRow.chunk_count > 0
                )
            ).all()
        counts = index.chunk_counts() if rows else {}
        for row in rows:
            if counts.get(row.id, 0) == row.chunk_count:
                continue
            with document_lock(rt.redis, row.id, wait_s=WORKER_LOCK_WAIT_S):
                # read again under the lock: a re-upload or a delete may have changed both meanwhile
                now = document_store.get_document(rt.metadata, row.id)
                held = len(index.document_chunk_ids(row.id))
                if now is None or now.status != "indexed" or held == now.chunk_count:
                    continue
                queued = document_store.requeue_stored(rt.metadata, row.id)
            if queued is None:
                continue
            enqueue_document(rt, queued)
            why = f"the index holds {held} of its {now.chunk_count} chunks"
            log.warning("document %s (%s): %s; indexed again", row.file_name, row.id, why)
            out.append(Recovered(row.id, row.file_name, why, "requeued"))
    return out


def recover_rebuilds(rt: Runtime) -> list[str]:
    """Queue again every community rebuild that a dead worker had started (or that rq then failed as abandoned).

    The rebuild writes a whole new set of communities and summaries and deletes the stale ones
    only at the end, so a run cut short leaves the previous communities searchable; the run
    queued again under the same job id redoes it. Call it through :func:`recovery_pass` (one worker at a time).

    Returns:
        The ids of the GraphRAG Topics whose rebuild was queued again.
    """
    out = []
    for key in rt.redis.scan_iter(match="rt:*:communities:job", count=1000):
        topic_id = _decoded(key).split(":")[1]
        job_id = rebuild_job_id(rt, topic_id)
        if not job_id:
            continue
        try:
            job = Job.fetch(job_id, connection=rt.redis)
        except NoSuchJobError:
            continue
        status = getattr(job.get_status(refresh=True), "value", "")
        dead = status == "started" and not (_held_by_rq(rt, job) or _worker_runs(rt, job.worker_name))
        abandoned = status == "failed" and "abandoned" in (_decoded(job.exc_info or "") or "").lower()
        if not (dead or abandoned):
            continue
        forget_dead_runs(rt, job_id)
        queue_for(rt).enqueue_job(job)
        log.warning(
            "community rebuild %s of Topic %s: %s; queued again",
            job_id,
            topic_id,
            "its worker died" if dead else "rq failed it as abandoned",
        )
        out.append(topic_id)
    return out


#: The Redis key that lets one worker at a time run :func:`recovery_pass`.
RECOVERY_LOCK_KEY = "rt:lock:recovery"


def recovery_pass(rt: Runtime, *, lost_chunks: bool = False) -> tuple[list[Recovered], list[str]]:
    """Run the recoveries once, unless another worker is running them now (then do nothing).

    Every worker calls it at start (with ``lost_chunks``: after a Redis crash) and from rq's maintenance
    pass (:class:`~ragtopics.worker.main.ProductWorker`), so a job abandoned by a dead worker is queued
    again while the others keep working.

    Returns:
        ``(documents acted on, Topics whose community rebuild was queued again)``.

    Raises:
        redis.RedisError: when Redis cannot be reached.
    """
    # At start (``lost_chunks``) wait for another worker's pass to end: the lost chunks are looked for only then.
    lock = rt.redis.lock(RECOVERY_LOCK_KEY, timeout=120, blocking=lost_chunks, blocking_timeout=60)
    if not lock.acquire():
        return [], []
    try:
        release_locks_of_dead_workers(rt)
        recovered = recover_stranded(rt)
        if lost_chunks:
            recovered += recover_lost_chunks(rt)
        return recovered, recover_rebuilds(rt)
    finally:
        with contextlib.suppress(Exception):
            lock.release()


def release_locks_of_dead_workers(rt: Runtime) -> list[str]:
    """Release the document and graph locks held by workers rq no longer knows (their key expired: dead, or stalled
    past three heartbeats), so their documents and Topics need not wait for the locks' time to live
    (:func:`~ragtopics.storage.locks.release_dead_holders`); returns the keys released."""
    return release_dead_holders(rt.redis, {worker.name for worker in Worker.all(connection=rt.redis)})


def stranded_reason(rt: Runtime, job_id: str, depth: int = 0) -> str | None:
    """Why the chain of jobs from ``job_id`` can no longer finish, or None while it can.

    A version whose job rq has never seen is alive while its upload is still to enqueue it
    (:func:`~ragtopics.jobs.queue.awaiting_queue`). A job is alive when it is queued or scheduled and rq holds it (in its queue, in the list a worker
    moves it to while taking it, or started); started and still in rq's started registry (rq's clean-up
    decides when its worker is dead) or by a worker whose key is still in Redis; deferred behind a
    dependency that is alive; or finished with a ``continued_in`` job that is alive.
    """
    if not job_id:
        return "it has no job"
    if depth > MAX_DEPTH:
        return None  # an unexpected long chain: leave it alone rather than guess
    try:
        job = Job.fetch(job_id, connection=rt.redis)
    except NoSuchJobError:
        batch = batch_of(rt, job_id)  # a version indexed by a shared job: that job's chain decides
        if batch:
            return stranded_reason(rt, batch, depth + 1)
        if awaiting_queue(rt, job_id):
            return None  # received a moment ago, its job not queued yet (a batch still filling, its estimate)
        return f"job {job_id} is gone"
    status = getattr(job.get_status(refresh=True), "value", None) or "missing"
    if status == "queued" and not _held_by_rq(rt, job):
        return f"job {job_id} says queued but rq holds it nowhere"
    if status in WAITING:
        return None
    if status == "started":
        if _held_by_rq(rt, job) or _worker_runs(rt, job.worker_name):
            return None  # its worker renews it; once it stops, rq's clean-up fails it as abandoned
        return f"job {job_id} was started by a worker that no longer runs"
    if status == "deferred":
        reasons = [stranded_reason(rt, dep, depth + 1) for dep in job.dependency_ids]
        pending = [dep for dep, why in zip(job.dependency_ids, reasons) if why is None and _status(rt, dep) != "finished"]
        if pending or _about_to_be_enqueued(rt, job):
            return None
        return f"job {job_id} waits for jobs that will not run"
    if status == "finished":
        following = (job.return_value() or {}).get("continued_in") if isinstance(job.return_value(), dict) else None
        if following:
            return stranded_reason(rt, following, depth + 1)
        return f"job {job_id} finished without finishing the document"
    if status == "failed" and depth == 0:
        # an ingest job that died after it fanned out a GraphRAG extraction: the finishing job it enqueued decides
        from ragtopics.graph.fanout import finish_job_id

        if rt.redis.exists(Job.key_for(finish_job_id(job_id))):
            return stranded_reason(rt, finish_job_id(job_id), depth + 1)
    return f"job {job_id} is {status}"


#: Seconds after its last dependency ended during which a deferred job is left for rq to enqueue (besides four
#: heartbeats: an abandoned dependency's last sign of life is that much older than its failure).
DEPENDENTS_GRACE_S = 120


def _about_to_be_enqueued(rt: Runtime, job: Job) -> bool:
    """Whether rq enqueues the deferred ``job`` by itself: every dependency has ended (finished; or failed, when the
    job allows failures, as a GraphRAG upload's finishing job does), the last one moments ago.

    rq enqueues a job's dependents when its last dependency ends, in the same clean-up or worker that ended it; a
    recovery pass in another worker may look in between. A job still deferred long after that was lost.
    """
    ended = []
    for dep in Job.fetch_many(job.dependency_ids, connection=rt.redis):
        if dep is None:
            return False
        status = getattr(dep.get_status(refresh=False), "value", "")
        if status not in ("finished", "failed") or (status == "failed" and not job.allow_dependency_failures):
            return False
        ended.append(max(t for t in (dep.ended_at, dep.last_heartbeat, dep.started_at, dep.enqueued_at) if t is not None))
    if not ended:
        return False
    latest = max(t if t.tzinfo else t.replace(tzinfo=UTC) for t in ended)
    age = (datetime.now(UTC) - latest).total_seconds()
    return age < DEPENDENTS_GRACE_S + 4 * rt.settings.worker_heartbeat_s


def _status(rt: Runtime, job_id: str) -> str:
    try:
        return getattr(Job.fetch(job_id, connection=rt.redis).get_status(refresh=True), "value", "") or ""
    except NoSuchJobError:
        return "missing"


def _held_by_rq(rt: Runtime, job: Job) -> bool:
    """Whether rq holds the job in one of the places a queued or started job is: its queue, the queue's
    intermediate list (a worker took it and is about to start it), or the started registry.

    rq moves a job between them atomically (``LMOVE``; MULTI/EXEC), so a job in none is not between two.
    """
    queue = Queue(job.origin, connection=rt.redis)
    if rt.redis.lpos(queue.key, job.id) is not None or rt.redis.lpos(queue.intermediate_queue_key, job.id) is not None:
        return True
    registry = StartedJobRegistry(queue=queue)
    return any(
        isinstance(entry, (bytes, str)) and _decoded(entry).split(":", 1)[0] == job.id
        for entry in rt.redis.zrange(registry.key, 0, -1)
    )  # members only (no scores asked)


def _worker_runs(rt: Runtime, name: str | None) -> bool:
    """Whether rq still has the worker called ``name``: its key lives while the worker sends heartbeats."""
    if not name:
        return False
    return Worker.find_by_key(Worker.redis_worker_namespace_prefix + name, connection=rt.redis) is not None


def _in_flight(rt: Runtime) -> list[DocumentRow]:
    with rt.metadata.session() as s:
        return list(s.exec(select(DocumentRow).where(col(DocumentRow.status).in_(IN_FLIGHT))).all())
