"""Worker start-up: one RQ worker that loads the embedding model once, then runs jobs."""

from __future__ import annotations

import logging

from rq import SimpleWorker

from ragtopics.runtime import get_runtime
from ragtopics.worker.queue import queue_for

log = logging.getLogger(__name__)


def run_worker(*, burst: bool = False) -> None:
    """Run an RQ worker on the product's queue until stopped (or, with ``burst``, until empty).

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
    worker = SimpleWorker([queue_for(rt)], connection=rt.redis)
    log.info("worker %s listening on queue %s", worker.name, rt.settings.queue_name)
    worker.work(burst=burst, logging_level=rt.settings.log_level)
