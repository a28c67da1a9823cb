"""Worker start-up: one RQ worker that loads the embedding model once, then runs jobs.

Any number of workers may run on one Redis (``--scale worker=N``), and any may be killed and
started again at any time. Each sends rq heartbeats every ``WORKER_HEARTBEAT_S`` seconds, also
while it runs a job, so rq's clean-up can tell a dead worker's job (its execution is no longer
renewed) from a long one; the recoveries (:mod:`ragtopics.worker.recovery`) run at start and in
every maintenance pass, one worker at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rq import SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job
from rq.queue import Queue
from rq.worker import WorkerStatus

from ragtopics.graph.refresh import schedule_all
from ragtopics.jobs.queue import queue_for
from ragtopics.runtime import Runtime, freeze_startup_heap, get_runtime
from ragtopics.storage.locks import set_holder
from ragtopics.worker.recovery import recovery_pass

log = logging.getLogger(__name__)

#: A worker (or its job's execution) silent for this many heartbeats is taken for dead by rq.
MISSED_HEARTBEATS = 3


class ProductWorker(SimpleWorker):
    """An rq ``SimpleWorker`` (jobs run in this process) that keeps its job alive in rq's eyes and recovers others.

    - While a job runs, a thread renews the worker's key and the job's execution in rq's started
      registry every ``heartbeat_s`` seconds (rq's own ``maintain_heartbeats``), each for
      ``MISSED_HEARTBEATS × heartbeat_s``: a killed worker's job is abandoned, in rq's terms, that
      long after its last heartbeat, however long the job may run.
    - rq's maintenance pass (clean the registries: abandoned jobs become failed) runs every
      ``heartbeat_s`` seconds, and after it :func:`~ragtopics.worker.recovery.recovery_pass` queues
      again the documents and community rebuilds whose job rq gave up.

    Args:
        queues: the queues to listen on.
        rt: the runtime (Redis, metadata, settings).
        heartbeat_s: seconds between heartbeats (``WORKER_HEARTBEAT_S``), at least 1.

    Raises:
        ValueError: ``heartbeat_s`` is below 1.
    """

    def __init__(self, queues: list[Queue], *, rt: Runtime, heartbeat_s: int, **kwargs):
        if heartbeat_s < 1:
            raise ValueError(f"heartbeat_s must be at least 1 second, not {heartbeat_s}")
        self.rt = rt
        self.heartbeat_s = heartbeat_s
        super().__init__(
            queues,
            connection=rt.redis,
            worker_ttl=max(MISSED_HEARTBEATS * heartbeat_s, 16),
            maintenance_interval=heartbeat_s,
            **kwargs,
        )

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        """How long a job's execution stays in rq's started registry without a heartbeat, in seconds."""
        return MISSED_HEARTBEATS * self.heartbeat_s

    def execute_job(self, job: Job, queue: Queue) -> None:
        """Run the job in this process while a thread sends its heartbeats."""
        execution = self.prepare_execution(job)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                try:
                    self.maintain_heartbeats(job, execution)
                except Exception as exc:
                    log.warning("heartbeat of job %s not sent: %s", job.id, exc)

        thread = threading.Thread(target=beat, name="job-heartbeat", daemon=True)
        thread.start()
        try:
            self.perform_job(job, queue, execution)
        finally:
            stop.set()
            thread.join()
        self.set_state(WorkerStatus.IDLE)

    def run_maintenance_tasks(self) -> None:
        """rq's maintenance, then the recoveries (each worker tries; one at a time runs them)."""
        super().run_maintenance_tasks()
        try:
            report(*_recovery_pass(self.rt))
        except StopRequested:  # a stop signal came during the pass (rq's handler raises it): the loop ends on it
            raise
        except Exception as exc:
            log.warning("recovery pass failed: %s", exc)

    def _shutdown(self) -> None:
        """A warm stop (SIGINT/SIGTERM): also note it when idle, where rq only raises ``StopRequested``.

        rq's handler raises ``StopRequested`` wherever the idle worker happens to be; code that catches
        ``Exception`` there (a library's retry, a pass that logs and goes on) would swallow the stop and
        the worker would keep listening. With the flag set, rq's loop ends at its next check either way.
        """
        self._stop_requested = True
        super()._shutdown()


def _recovery_pass(rt: Runtime, *, lost_chunks: bool = False):
    return recovery_pass(rt, lost_chunks=lost_chunks)


def report(recovered: list, rebuilt: list) -> None:
    """Log what a recovery pass queued again."""
    if recovered:
        log.warning(
            "queued the indexing of %d document(s) again after a crash: %s",
            len(recovered),
            "; ".join(f"{r.file_name} ({r.why}: {r.action})" for r in recovered),
        )
    if rebuilt:
        log.warning("queued %d community rebuild(s) again after a crash", len(rebuilt))


def run_worker(*, burst: bool = False, ready: Callable[[], None] | None = None) -> None:
    """Run an RQ worker on the product's queue until stopped (or, with ``burst``, until empty).

    It also runs rq's scheduler (the Refresh Cycle of GraphRAG Topics) and, at start, queues
    again the documents whose indexing job a crash lost (:mod:`ragtopics.worker.recovery`) and
    schedules every GraphRAG Topic's next community rebuild that is not scheduled yet. Other
    workers may run meanwhile (see the module docstring).

    Jobs run in this process (:class:`ProductWorker`): the embedding model is loaded once
    and stays loaded, instead of once per forked job.

    Args:
        burst: exit when the queue is empty.
        ready: called once the worker is about to listen (model loaded, recoveries run); the
            worker launcher (:mod:`ragtopics.worker.launcher`) tells a worker killed while working
            from one that never got going by it.

    Raises:
        StoreUnavailableError: when Redis is unreachable or lacks a module.
    """
    started = time.monotonic()
    rt = get_runtime()
    rt.check_store()
    embedder = rt.gateway.embedder
    if hasattr(embedder, "load"):
        embedder.load()

    # documents whose job chain a crash cut, and indexed documents whose last chunks a killed Redis lost
    report(*_recovery_pass(rt, lost_chunks=True))
    scheduled = schedule_all(rt)  # the Refresh Cycle of GraphRAG Topics that have no rebuild scheduled
    if scheduled:
        log.info("scheduled the Refresh Cycle of %d GraphRAG Topic(s)", scheduled)
    freeze_startup_heap()  # the model and modules loaded: full collections no longer walk them between jobs
    worker = ProductWorker([queue_for(rt)], rt=rt, heartbeat_s=rt.settings.worker_heartbeat_s)
    set_holder(worker.name)  # the locks its jobs take name it: released soon after it dies, not when they expire
    log.info(
        "worker %s listening on queue %s (started in %.1f s)", worker.name, rt.settings.queue_name, time.monotonic() - started
    )
    if ready is not None:
        ready()
    # with_scheduler: rq's scheduler moves due Refresh Cycle jobs to the queue (one worker at a time holds it).
    worker.work(burst=burst, logging_level=rt.settings.log_level, with_scheduler=True)
