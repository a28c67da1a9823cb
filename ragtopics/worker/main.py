"""Worker start-up: one RQ worker that loads the embedding model once, then runs jobs."""

from __future__ import annotations

import logging

from rq import SimpleWorker

from ragtopics.runtime import get_runtime
from ragtopics.worker.queue import queue_for

log = logging.getLogger(__name__)


def run_worker(*, burst: bool = False) -> None:
    """Run an RQ worker on the product's queue until stopped (or, with ``burst``, until empty).

    It also runs rq's scheduler (the Refresh Cycle of GraphRAG Topics) and, at start, queues
    again the documents whose indexing job a crash lost (:mod:`ragtopics.worker.recovery`) and
    schedules every GraphRAG Topic's next community rebuild that is not scheduled yet.

    Jobs run in this process (``SimpleWorker``): the embedding model is loaded once
    and stays loaded, instead of once per forked job.

    Raises:
        StoreUnavailableError: when Redis is unreachable or lacks a module.
    """
    rt = get_runtime()
    rt.check_store()
    embedder = rt.gateway.embedder
    if hasattr(embedder, "load"):
        embedder.load()
    from ragtopics.graph.refresh import schedule_all
    from ragtopics.worker.recovery import recover_lost_chunks, recover_rebuilds, recover_stranded

    recovered = recover_stranded(rt)  # documents whose job chain a crash cut: queued again before any job runs
    recovered += recover_lost_chunks(rt)  # indexed documents whose last chunks a killed Redis lost
    if recovered:
        log.warning("queued the indexing of %d document(s) again after a crash: %s", len(recovered),
                    "; ".join(f"{r.file_name} ({r.why}: {r.action})" for r in recovered))  # fmt: skip

    rebuilt = recover_rebuilds(rt)  # community rebuilds a dead worker had started
    if rebuilt:
        log.warning("queued %d community rebuild(s) again after a crash", len(rebuilt))
    scheduled = schedule_all(rt)  # the Refresh Cycle of GraphRAG Topics that have no rebuild scheduled
    if scheduled:
        log.info("scheduled the Refresh Cycle of %d GraphRAG Topic(s)", scheduled)
    worker = SimpleWorker([queue_for(rt)], connection=rt.redis)
    log.info("worker %s listening on queue %s", worker.name, rt.settings.queue_name)
    # with_scheduler: rq's scheduler moves due Refresh Cycle jobs to the queue (one worker at a time holds it).
    worker.work(burst=burst, logging_level=rt.settings.log_level, with_scheduler=True)
