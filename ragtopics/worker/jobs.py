"""RQ job functions. Each runs in a worker process with the process-wide runtime.

An expected refusal (a file of the wrong type, one that would give too many chunks,
a file that cannot be read) still fails its job, so the console shows the message,
but the worker log gets one clear line for it instead of RQ's traceback: a traceback
says "bug", and these are the operator's files, not bugs.
"""

from __future__ import annotations

import logging
import time

from rq import get_current_job

from ragtopics.errors import ReadError, RefusedFileError
from ragtopics.graph import fanout
from ragtopics.graph.refresh import run_rebuild
from ragtopics.ingest.pipeline import ingest_document, ingest_documents
from ragtopics.llm import endpoints
from ragtopics.quality.runs import execute_run
from ragtopics.runtime import get_runtime

log = logging.getLogger(__name__)

#: Errors that are the file's fault, not the product's: logged in one line, without traceback.
EXPECTED_FAILURES: tuple[type[Exception], ...] = (RefusedFileError, ReadError)


class OneLineRefusals(logging.Filter):
    """Drop RQ's "exception raised while executing" record (with its traceback) for an expected refusal.

    The pipeline has already logged the refusal in one line ("upload of … failed:
    <message>"); RQ logs every failed job again with the formatted traceback as the
    last argument. When that traceback ends in one of :data:`EXPECTED_FAILURES`, the
    record is dropped; any other failure keeps its traceback.
    """

    _names = tuple(f"{cls.__module__}.{cls.__qualname__}: " for cls in EXPECTED_FAILURES)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if not args or not isinstance(args[-1], str) or "exception raised while executing" not in str(record.msg):
            return True
        last = args[-1].rstrip().rsplit("\n", 1)[-1]
        return not last.startswith(self._names)


def install_one_line_refusals(logger: logging.Logger | None = None) -> None:
    """Add :class:`OneLineRefusals` to RQ's worker logger once (idempotent)."""
    target = logger or logging.getLogger("rq.worker")
    if not any(isinstance(f, OneLineRefusals) for f in target.filters):
        target.addFilter(OneLineRefusals())


# The job module is imported by the worker before it runs the first job, so the
# filter is in place before RQ logs any failure of these jobs.
install_one_line_refusals()


def ingest(topic_id: str, document_id: str, job_id: str | None = None, blob_path: str | None = None) -> dict:
    """Index one version of an uploaded document; progress goes to ``job.meta`` (phase, done, total).

    Args:
        job_id, blob_path: the version to index (see ``enqueue_ingest``); None for a job
            queued by an older release, which indexes the document's pending version.

    Returns:
        ``{"document_id", "status", "chunk_count", "replaced", "reason"}``; status is
        ``superseded`` or ``cancelled`` (with the reason) when a newer upload or a
        delete made this version obsolete before it was stored.

    Raises:
        RagTopicsError: the job fails with the error's message (shown in the console).
    """
    job = get_current_job()

    def progress(phase: str, done: int, total: int) -> None:
        if job is not None:
            job.meta.update(phase=phase, done=done, total=total, topic_id=topic_id, document_id=document_id)
            job.save_meta()

    result = ingest_document(_runtime(), document_id, progress, job_id=job_id, blob_path=blob_path, fan_out=True)
    return _result(result)


def ingest_batch(topic_id: str, items: list[tuple[str, str, str]]) -> dict:
    """Index several small files of one Topic together (``enqueue_ingest_batch``): their chunks share
    embedding batches; progress goes to ``job.meta`` for the whole batch.

    Args:
        items: ``(document id, job id, blob path)`` of each staged version.

    Returns:
        ``{"documents": {job id: as ingest returns}}``: each file's own outcome; one that failed
        has status ``failed`` and its message as ``reason``.
    """
    job = get_current_job()

    def settled(job_id: str, result) -> None:  # a file that failed early shows it at once, not when the batch ends
        if job is not None:
            job.meta.setdefault("settled", {})[job_id] = _result(result)
            job.save_meta()

    staged = [(document_id, job_id, blob_path) for document_id, job_id, blob_path in items]  # tuples, also from lists
    results = ingest_documents(_runtime(), topic_id, staged, _job_progress(), settled)
    return {"documents": {job_id: _result(result) for job_id, result in results.items()}}


def _result(result) -> dict:
    return {
        "document_id": result.document_id,
        "status": result.status,
        "chunk_count": result.chunk_count,
        "replaced": result.replaced,
        "reason": result.reason,
        "continued_in": result.continued_in,
    }


#: Least seconds between two progress writes of a job within one phase (the console polls about once a second).
PROGRESS_EVERY_S = 0.25


def _job_progress():
    """``progress(phase, done, total)`` writing to the current job's meta: at every new phase and at its end,
    and in between at most every :data:`PROGRESS_EVERY_S` (a batch of small files reports per file)."""
    job = get_current_job()
    last = {"phase": None, "at": 0.0}

    def progress(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if job is None or (phase == last["phase"] and done < total and now - last["at"] < PROGRESS_EVERY_S):
            return
        last.update(phase=phase, at=now)
        job.meta.update(phase=phase, done=done, total=total)
        job.save_meta()

    return progress


def extract_batch(topic_id: str, document_id: str, job_id: str, chunk_ids: list[str]) -> dict:
    """Extract some chunks of a GraphRAG upload into the extraction cache (see :mod:`ragtopics.graph.fanout`).

    Returns:
        ``{"status", "extracted", "cached", "failed"}``.
    """
    return fanout.extract_batch(_runtime(), topic_id, document_id, job_id, chunk_ids)


def finish_graph(topic_id: str, document_id: str, job_id: str) -> dict:
    """Finish a GraphRAG upload once its extraction jobs are done: deduplicate, embed entities, store.

    Returns:
        As :func:`ingest`.
    """
    return _result(fanout.finish_graph(_runtime(), topic_id, document_id, job_id, _job_progress()))


def rebuild_communities(topic_id: str, reason: str = "now") -> dict:
    """Recompute a GraphRAG Topic's communities and their reports (Recompute Communities Now, Refresh Cycle).

    Progress goes to ``job.meta`` (phases detect, reports, write). A scheduled run
    schedules the next one (the Topic's Refresh Cycle).

    Returns:
        The run's counts (:class:`~ragtopics.graph.communities.RebuildReport` as a dict), or
        ``{"status": "skipped", "reason": ...}`` when another rebuild of the Topic holds its lock.
    """
    return run_rebuild(_runtime(), topic_id, reason=reason, progress=_job_progress())


def evaluate_run(run_id: str) -> dict:
    """Run an evaluation queued from the console (:mod:`ragtopics.quality.runs`); progress in ``job.meta``
    (phase ``evaluating``, questions done of total).

    Returns:
        The run's summary (also written to its folder).
    """
    report = _job_progress()
    return execute_run(_runtime(), run_id, lambda done, total: report("evaluating", done, total))


def _runtime():
    """The worker's runtime, with the model endpoints set in the console re-read (a change reaches the next job)."""
    rt = get_runtime()
    endpoints.refresh(rt)
    return rt
