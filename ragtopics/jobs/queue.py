"""Enqueue jobs and read their progress (used by the console and the CLI)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from rq import Queue
from rq.job import Job
from rq.registry import FailedJobRegistry
from rq.results import Result

from ragtopics.errors import NotFoundError, RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.storage import documents


@dataclass(frozen=True, slots=True)
class JobProgress:
    """The state of one job as the console shows it.

    Attributes:
        job_id: RQ job id.
        status: queued, started, finished, failed, stopped, canceled, or missing.
        phase: the step the job reports (reading, chunking, embedding, storing, done).
        done, total: units of the phase (chunks while embedding).
        error: the failure message, for a failed job.
        result: the job's return value when finished.
        shared_by: how many files the job indexes (1, or the files of a shared job; its phase,
            done and total are then the whole job's while it runs).
        partial: only the status was read (:func:`job_statuses`): phase, done and total are not known.
    """

    job_id: str
    status: str
    phase: str = ""
    done: int = 0
    total: int = 0
    error: str = ""
    result: dict | None = None
    shared_by: int = 1
    partial: bool = False

    @property
    def is_final(self) -> bool:
        """True when the job will not change any more."""
        return self.status in {"finished", "failed", "stopped", "canceled", "missing"}

    @property
    def fraction(self) -> float:
        """Progress in [0, 1]."""
        if self.status == "finished":
            return 1.0
        return self.done / self.total if self.total else 0.0


#: Phases whose done/total need a word to read well: phase -> (label, unit).
PHASE_UNITS = {"extracting": ("extracting graph", "chunks"), "evaluating": ("evaluating", "questions")}


def phase_text(phase: str, done: int, total: int) -> str:
    """A running job's step in words, as the progress bars and ``ragtopics ingest`` show it:
    ``embedding 3/10``, ``extracting graph 12/40 chunks``, ``reading`` (no count)."""
    label, unit = PHASE_UNITS.get(phase, (phase, ""))
    return f"{label} {done}/{total}{f' {unit}' if unit else ''}" if total else label


#: Redis set of the ids of the jobs made for a Topic (``rt:jobs:of-topic:<topic id>``). Outside the Topic's key
#: prefix, so a Topic delete still finds its jobs after it removed the Topic's keys.
TOPIC_JOBS = "rt:jobs:of-topic:{}"


class TopicJobsQueue(Queue):
    """rq's queue, noting every job made for a Topic in the Topic's job set (:data:`TOPIC_JOBS`), so that a
    Topic delete reads the Topic's own jobs instead of every job of every registry."""

    def create_job(self, *args, **kwargs) -> Job:
        """``Queue.create_job`` (every enqueue goes through it), then the job's id added to its Topic's set."""
        job = super().create_job(*args, **kwargs)
        topic_id = job_topic_id(job)
        if topic_id:
            pipe = self.connection.pipeline(transaction=False)
            pipe.sadd(TOPIC_JOBS.format(topic_id), job.id)
            pipe.expire(TOPIC_JOBS.format(topic_id), TOPIC_JOBS_TTL_S)  # renewed by every new job of the Topic
            pipe.execute()
        return job


def job_topic_id(job: Job) -> str:
    """The Topic a job works for: ``job.meta["topic_id"]``, else its first argument when that is a Topic id
    (``topic-…``); ``""`` for a job of no Topic (an evaluation run)."""
    topic_id = (job.meta or {}).get("topic_id")
    if not topic_id and job.args and isinstance(job.args[0], str) and job.args[0].startswith("topic-"):
        topic_id = job.args[0]
    return topic_id or ""


def queue_for(rt: Runtime) -> Queue:
    """The product's RQ queue on the runtime's Redis (a :class:`TopicJobsQueue`)."""
    return TopicJobsQueue(rt.settings.queue_name, connection=rt.redis, default_timeout=rt.settings.job_timeout_s)


def enqueue_ingest(rt: Runtime, topic_id: str, document_id: str, *, job_id: str, blob_path: str) -> str:
    """Enqueue ``ragtopics.worker.jobs.ingest`` for one version of a document and return the job id.

    Args:
        job_id: the id chosen for this version when it was staged (``DocumentRow.job_id``).
        blob_path: the stored file of that version: the job indexes exactly this file.

    Raises:
        redis.RedisError: when the queue cannot be reached (the caller marks the document failed).
    """
    job = queue_for(rt).enqueue_call(
        "ragtopics.worker.jobs.ingest",
        args=(topic_id, document_id),
        kwargs={"job_id": job_id, "blob_path": blob_path},
        job_id=job_id,
        description=f"ingest {document_id}",
        result_ttl=RESULT_TTL_S,
        failure_ttl=FAILURE_TTL_S,
        meta={"phase": "queued", "done": 0, "total": 0, "topic_id": topic_id, "document_id": document_id},
    )
    rt.redis.delete(AWAITING_QUEUE.format(job_id))
    return job.id


#: Redis key of a version received but whose job is not enqueued yet (``rt:jobs:awaiting-queue:<job id>``).
#: :class:`~ragtopics.documents.uploads.BatchedUploads` holds small files until a shared job is full, and each
#: file's cost estimate is made before its job is queued: meanwhile the crash recovery must not take the version
#: for one whose job was lost (:func:`~ragtopics.worker.recovery.stranded_reason`).
AWAITING_QUEUE = "rt:jobs:awaiting-queue:{}"
#: How long a received version may wait for its job before the crash recovery takes it for lost (seconds): an
#: uploader that died between receiving a file and enqueuing its job leaves it that long.
AWAITING_QUEUE_TTL_S = 600


def mark_awaiting_queue(rt: Runtime, job_id: str) -> None:
    """Note that version ``job_id`` was received and its job is about to be enqueued (for :data:`AWAITING_QUEUE_TTL_S`
    seconds at most; enqueuing it clears the note)."""
    rt.redis.set(AWAITING_QUEUE.format(job_id), 1, ex=AWAITING_QUEUE_TTL_S)


def awaiting_queue(rt: Runtime, job_id: str) -> bool:
    """Whether version ``job_id`` was received and its job is still to be enqueued (see :func:`mark_awaiting_queue`)."""
    return bool(job_id) and bool(rt.redis.exists(AWAITING_QUEUE.format(job_id)))


#: Redis key naming the shared job that indexes a version (``rt:jobs:batch-of:<job id>`` → batch job id).
BATCH_OF = "rt:jobs:batch-of:{}"
#: How long a finished or failed indexing job's record is kept (seconds); the batch names live as long.
RESULT_TTL_S, FAILURE_TTL_S = 24 * 3600, 7 * 24 * 3600
#: How long a Topic's job set outlives the Topic's newest job (seconds): longer than a job record is kept.
TOPIC_JOBS_TTL_S = 4 * FAILURE_TTL_S


def enqueue_ingest_batch(rt: Runtime, topic_id: str, rows: list) -> str:
    """Enqueue one ``ragtopics.worker.jobs.ingest_batch`` job for several staged versions of one Topic.

    Each version keeps its own job id (``DocumentRow.job_id``, the token that says which version
    is wanted); a Redis key (:data:`BATCH_OF`) names the shared job, so :func:`job_progress` and
    the crash recovery find it from the version's id.

    Args:
        rows: the staged :class:`~ragtopics.storage.metadata.DocumentRow` of each file.

    Returns:
        The shared job's id (``batch-`` + 32 hex digits).

    Raises:
        redis.RedisError: when the queue cannot be reached (the caller marks the documents failed).
    """
    batch_id = f"batch-{uuid.uuid4().hex}"
    pipe = rt.redis.pipeline(transaction=False)
    for row in rows:
        pipe.set(BATCH_OF.format(row.job_id), batch_id, ex=FAILURE_TTL_S)
    pipe.execute()
    job = queue_for(rt).enqueue_call(
        "ragtopics.worker.jobs.ingest_batch",
        args=(topic_id, [(row.id, row.job_id, row.pending_blob_path) for row in rows]),
        job_id=batch_id,
        description=f"ingest {len(rows)} files",
        result_ttl=RESULT_TTL_S,
        failure_ttl=FAILURE_TTL_S,
        meta={"phase": "queued", "done": 0, "total": 0, "topic_id": topic_id},
    )
    rt.redis.delete(*(AWAITING_QUEUE.format(row.job_id) for row in rows))
    return job.id


def batch_of(rt: Runtime, job_id: str) -> str:
    """The id of the shared job that indexes the version ``job_id`` ("" when it has its own job)."""
    name = rt.redis.get(BATCH_OF.format(job_id)) if job_id else None
    return name.decode() if isinstance(name, bytes) else (name or "")


def job_progresses(rt: Runtime, job_ids: list[str], *, known: dict[str, JobProgress] | None = None) -> list[JobProgress]:
    """:func:`job_progress` of several jobs in at most four pipelined round trips, whatever their number
    (the progress bars of an upload).

    Every job is read with ``Job.fetch_many``; then, in one pipeline, the results of the jobs that
    ended and the shared job of each version that has no job of its own; then the shared jobs and
    the finishing jobs of fanned-out GraphRAG uploads; then their results and extraction counts.
    A parked GraphRAG version is never read (its total is in the finishing job's meta).

    Args:
        job_ids: version job ids (``DocumentRow.job_id``), repeats allowed.
        known: job id → progress of versions already seen finished; they are not read again (a
            finished version's progress never changes), and every version found finished is added.
            The caller bounds it. ``None``: read every job.

    Returns:
        One progress per id, in the order given.
    """
    known = {} if known is None else known
    wanted = [job_id for job_id in dict.fromkeys(job_ids) if job_id not in known]
    read = _read_progresses(rt, wanted) if wanted else {}
    known.update({job_id: p for job_id, p in read.items() if p.status == "finished"})
    return [known[job_id] if job_id in known else read[job_id] for job_id in job_ids]


#: Statuses of a job that is still to run or running: :func:`job_statuses` reads only these jobs' status.
LIVE_STATUSES = ("queued", "started", "deferred", "scheduled")


def job_statuses(rt: Runtime, job_ids: list[str], *, known: dict[str, JobProgress] | None = None) -> list[JobProgress]:
    """:func:`job_progresses` reading less: a version whose own job is still to run or running gets its
    status alone (one ``HGET`` each, in one pipeline; ``partial`` progress); every other version (ended,
    indexed by a shared job, or continued by a GraphRAG finishing job) is read in full, finished ones
    once (``known``). For counting many jobs and reading in full only those shown.

    Returns:
        One progress per id, in the order given.
    """
    known = {} if known is None else known
    wanted = [job_id for job_id in dict.fromkeys(job_ids) if job_id not in known]
    pipe = rt.redis.pipeline(transaction=False)
    for job_id in wanted:
        pipe.hget(Job.key_for(job_id), "status")
    statuses = dict(zip(wanted, (_text(s) if s else "" for s in (pipe.execute() if wanted else [])), strict=True))
    live = {job_id: JobProgress(job_id, status, partial=True) for job_id, status in statuses.items() if status in LIVE_STATUSES}
    rest = [job_id for job_id in wanted if job_id not in live]
    full = dict(zip(rest, job_progresses(rt, rest, known=known), strict=True))
    return [known.get(job_id) or live.get(job_id) or full[job_id] for job_id in job_ids]


def job_progress(rt: Runtime, job_id: str) -> JobProgress:
    """Read a job's status and ``job.meta`` progress.

    An ingest job whose GraphRAG extraction fanned out finishes with ``continued_in``:
    its progress is then that of the finishing job, and while that one waits for the
    extraction jobs, the phase is ``extracting`` with the chunks extracted so far. A version
    indexed by a shared job (:func:`enqueue_ingest_batch`) shows that job's progress while it
    runs, then its own result.
    """
    return job_progresses(rt, [job_id])[0]


def _read_progresses(rt: Runtime, job_ids: list[str]) -> dict[str, JobProgress]:
    """The progress of each version job (see :func:`job_progresses`), read in at most four round trips."""
    # deferred: graph.fanout imports this module at module level
    from ragtopics.graph.fanout import extracted_key

    jobs = dict(zip(job_ids, Job.fetch_many(job_ids, connection=rt.redis), strict=True))
    pipe = rt.redis.pipeline(transaction=False)
    missing = [job_id for job_id, job in jobs.items() if job is None]
    for job_id in missing:
        pipe.get(BATCH_OF.format(job_id))
    ended = _queue_results(pipe, [job for job in jobs.values() if job is not None])
    replies = pipe.execute()
    batch_names = {job_id: _text(name) for job_id, name in zip(missing, replies) if name}
    results = ended(replies[len(missing) :])
    progress = {job_id: _progress_of(job, results.get(job_id)) for job_id, job in jobs.items() if job is not None}
    following = {
        job_id: then_id
        for job_id, p in progress.items()
        if p.status == "finished" and (then_id := (p.result or {}).get("continued_in"))
    }
    second = list(dict.fromkeys([*batch_names.values(), *following.values()]))
    then = dict(zip(second, Job.fetch_many(second, connection=rt.redis), strict=True)) if second else {}
    pipe = rt.redis.pipeline(transaction=False)
    waiting = [
        job_id
        for job_id, finisher in following.items()
        if then[finisher] is not None and _status(then[finisher]) in ("deferred", "queued", "scheduled")
    ]
    for job_id in waiting:
        pipe.scard(extracted_key(then[following[job_id]].meta.get("topic_id", ""), job_id))
    ended = _queue_results(pipe, [job for job in then.values() if job is not None])
    replies = pipe.execute() if len(pipe) else []
    results = ended(replies[len(waiting) :])
    states = {
        job_id: _progress_of(job, results.get(job_id)) if job is not None else JobProgress(job_id, "missing")
        for job_id, job in then.items()
    }
    extracted = dict(zip(waiting, replies[: len(waiting)], strict=True))
    for job_id in job_ids:
        if job_id in batch_names:
            batch = then[batch_names[job_id]]
            progress[job_id] = _in_batch(job_id, _batch_state(batch, states[batch_names[job_id]]))
        elif job_id in extracted:
            total = int(then[following[job_id]].meta.get("total", 0))
            progress[job_id] = JobProgress(job_id, "started", "extracting", int(extracted[job_id]), total)
        elif job_id in following:
            progress[job_id] = replace(states[following[job_id]], job_id=job_id)
        elif job_id not in progress:
            progress[job_id] = JobProgress(job_id=job_id, status="missing")
    return progress


def _queue_results(pipe, jobs: list[Job]):
    """Queue a read of the latest result of each job that ended on ``pipe``; returns a function that
    maps the replies of those reads (in order) to ``{job id: Result}``."""
    ended = [job for job in jobs if _status(job) in ("finished", "failed")]
    for job in ended:
        pipe.xrevrange(Result.get_key(job.id), "+", "-", count=1)

    def results(replies: list) -> dict[str, Result]:
        return {
            job.id: Result.restore(job.id, _text(reply[0][0]), reply[0][1], connection=job.connection, serializer=job.serializer)
            for job, reply in zip(ended, replies)
            if reply
        }

    return results


def _in_batch(job_id: str, state: tuple[JobProgress, dict]) -> JobProgress:
    """The progress of one version indexed by a shared job: the job's while it runs, its own result once
    known (a file that failed or was superseded is known before the job ends: ``job.meta["settled"]``)."""
    batch, settled = state
    result = (batch.result or {}).get("documents", {}).get(job_id) if batch.status == "finished" else settled.get(job_id)
    if result is None:
        return replace(batch, job_id=job_id) if batch.status != "finished" else JobProgress(job_id, "missing")
    if result.get("status") == "failed":
        return JobProgress(job_id, "failed", "done", error=result.get("reason") or "indexing failed", shared_by=batch.shared_by)
    count = int(result.get("chunk_count") or 0)
    return JobProgress(job_id, "finished", "done", count, count, result=result, shared_by=batch.shared_by)


def _batch_state(job: Job | None, progress: JobProgress) -> tuple[JobProgress, dict]:
    """A shared ingest job's progress (``shared_by``: its number of files) and the results it settled so far."""
    if job is None:
        return progress, {}
    files = len(job.args[1]) if len(job.args) > 1 and isinstance(job.args[1], list | tuple) else 1
    return replace(progress, shared_by=files), dict(job.meta.get("settled") or {})


def _status(job: Job) -> str:
    status = job.get_status(refresh=False)
    return getattr(status, "value", status) or "missing"


def _progress_of(job: Job, result=None) -> JobProgress:
    """A job's progress from its fetched hash and its latest ``result`` (read for jobs that ended)."""
    status, meta = _status(job), job.meta or {}
    error = ""
    if status == "failed":
        error = _last_line(result.exc_string if result is not None else "") or "the job failed"
    value = result.return_value if result is not None and result.type == Result.Type.SUCCESSFUL else None
    return JobProgress(
        job.id,
        status,
        meta.get("phase", ""),
        int(meta.get("done", 0)),
        int(meta.get("total", 0)),
        error,
        value if status == "finished" else None,
    )


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _last_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    last = lines[-1]
    # "ragtopics.errors.ReadError: message" → "message"
    head, sep, rest = last.partition(": ")
    return rest if sep and "." in head and " " not in head else last


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job that failed for good (rq's failed-job registry): what it was, when and why.

    Attributes:
        job_id: RQ job id.
        description: what the job did (``communities of Plant``, an upload, an evaluation).
        failed_at: when it failed, ``YYYY-MM-DD HH:MM:SS UTC`` ("" when unknown).
        error: the last line of its error.
    """

    job_id: str
    description: str
    failed_at: str
    error: str


def dead_letters(rt: Runtime, limit: int = 100) -> list[DeadLetter]:
    """The jobs that failed for good, newest first (at most ``limit``)."""
    ids = FailedJobRegistry(queue=queue_for(rt)).get_job_ids()[-limit:][::-1]
    out = []
    for job in Job.fetch_many(ids, connection=rt.redis):
        if job is None:
            continue
        ended = job.ended_at.strftime("%Y-%m-%d %H:%M:%S UTC") if job.ended_at else ""
        out.append(DeadLetter(job.id, job.description or job.func_name or "", ended, _last_line(job.exc_info)))
    return out


def retry_dead_letter(rt: Runtime, job_id: str) -> None:
    """Queue a failed job again, as it was.

    An upload job is queued again only while one of its files still waits for it (a file left
    ``processing`` when the store went away). A file whose indexing failed is marked ``failed``
    and its uploaded copy dropped, so there is nothing left to index: it must be uploaded again.

    Raises:
        NotFoundError: no failed job has that id.
        RagTopicsError: an upload job none of whose files waits for it any more (names them, and why they failed).
    """
    registry = FailedJobRegistry(queue=queue_for(rt))
    if job_id not in registry.get_job_ids():
        raise NotFoundError(f"no failed job {job_id!r} (it may have been retried already)")
    versions = _upload_versions(Job.fetch(job_id, connection=rt.redis))
    if versions:
        rows = [documents.get_document(rt.metadata, document_id) for document_id, _ in versions]
        waiting = [
            row
            for row, (_, version_job) in zip(rows, versions, strict=True)
            if row is not None
            and row.job_id == version_job
            and row.status in (documents.DocumentStatus.QUEUED, documents.DocumentStatus.PROCESSING)
        ]
        if not waiting:
            failed = [
                row
                for row, (_, version_job) in zip(rows, versions, strict=True)
                if row is not None and row.job_id == version_job and row.status == documents.DocumentStatus.FAILED
            ]
            if not failed:
                raise RagTopicsError(
                    "this upload job has nothing left to do: its files were indexed, uploaded again or deleted since"
                )
            names = ", ".join(row.file_name for row in failed[:3])
            verb = "waits" if len(failed) == 1 else "wait"
            raise RagTopicsError(
                f"this upload cannot be retried: {names} no longer {verb} for it "
                f"({failed[0].file_name}: {failed[0].error}). A file whose indexing failed is not "
                "kept; fix the cause, then upload the file again."
            )
    registry.requeue(job_id)


def _upload_versions(job: Job) -> list[tuple[str, str]]:
    """``(document id, job id)`` of each file version an upload job indexes; ``[]`` for other jobs."""
    name = (job.func_name or "").rsplit(".", 1)[-1]
    args = list(job.args or ())
    if name == "ingest_batch" and len(args) >= 2:
        return [(document_id, version_job) for document_id, version_job, _ in args[1]]
    if name in ("ingest", "extract_batch", "finish_graph") and len(args) >= 2:
        return [(args[1], (args[2] if len(args) > 2 and args[2] else job.id))]
    return []
