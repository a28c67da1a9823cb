"""The process's Prometheus metrics: model calls, HTTP requests and answers, counted where they happen.

Counters and histograms live in :data:`REGISTRY` (one per process). What the stores hold (queue
depth, jobs by state, documents by status) is read when ``/metrics`` is scraped, by
:class:`StoreCollector`, so every process reports the same figures for them. Model calls are
counted by the process that makes them: the console counts chat turns' calls, each worker its
ingestion's (the console's ``/metrics`` shows the console's).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rq import Queue
from sqlalchemy import func
from sqlmodel import select

from ragtopics.storage.metadata import DocumentRow

log = logging.getLogger(__name__)

#: The registry of the process's counters and histograms.
REGISTRY = CollectorRegistry(auto_describe=True)

#: Outcomes of a model call: answered, failed (after retries, or an unparsable reply), stopped by its caller.
OUTCOMES = ("ok", "error", "stopped")

MODEL_CALLS = Counter(
    "ragtopics_model_calls", "Model calls by role and outcome (ok, error, stopped).", ["role", "outcome"], registry=REGISTRY
)
MODEL_TOKENS = Counter(
    "ragtopics_model_tokens",
    "Tokens of model calls by role and direction (prompt, completion), as the servers report them.",
    ["role", "direction"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "ragtopics_http_request_duration_seconds",
    "HTTP requests by route, method and status, until the last byte of the response (a streamed answer's whole stream).",
    ["route", "method", "status"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
ANSWER_SECONDS = Histogram(
    "ragtopics_answer_duration_seconds",
    "Chat answers served by the HTTP API, by Topic kind and the way taken: from the question to the whole answer.",
    ["kind", "route"],
    registry=REGISTRY,
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300),
)
FIRST_TOKEN_SECONDS = Histogram(
    "ragtopics_answer_first_token_seconds",
    "Chat answers served by the HTTP API: from the question to the model's first token.",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60),
)


def count_model_call(role: str, outcome: str) -> None:
    """Count one model call of ``role`` (``language_model``, ``embedding``, ...) that ended with ``outcome``."""
    MODEL_CALLS.labels(role=role, outcome=outcome).inc()


def count_tokens(role: str, prompt_tokens: int, completion_tokens: int) -> None:
    """Add a call's reported tokens to its role's counts (nothing for zero)."""
    if prompt_tokens:
        MODEL_TOKENS.labels(role=role, direction="prompt").inc(prompt_tokens)
    if completion_tokens:
        MODEL_TOKENS.labels(role=role, direction="completion").inc(completion_tokens)


def observe_answer(kind: str, route: str, timings_ms: dict[str, float]) -> None:
    """Record a finished answer's total time and time to first token (``timings_ms`` of its final update)."""
    if "total" in timings_ms:
        ANSWER_SECONDS.labels(kind=kind, route=route).observe(timings_ms["total"] / 1000)
    if "first_token" in timings_ms:
        FIRST_TOKEN_SECONDS.labels(kind=kind).observe(timings_ms["first_token"] / 1000)


#: rq's registries whose jobs are counted by state, besides the queue itself (``queued``).
JOB_STATES = ("started", "finished", "failed", "deferred", "scheduled", "canceled")


class StoreCollector(Collector):
    """Figures read from the stores at each scrape: queue depth, jobs by state, documents by status.

    A store that cannot be read is said in ``ragtopics_store_readable`` (0) and its figures are left
    out; the scrape itself does not fail.

    Args:
        rt: the runtime whose Redis and metadata database are read.
    """

    def __init__(self, rt):
        self.rt = rt

    def collect(self) -> Iterator[Metric]:
        readable = GaugeMetricFamily(
            "ragtopics_store_readable", "Whether the store could be read at this scrape.", labels=["store"]
        )
        for store, read in (("redis", self._jobs), ("sql", self._documents)):
            try:
                families = list(read())
            except Exception as exc:
                log.warning("metrics: could not read %s: %s", store, exc)
                readable.add_metric([store], 0)
                continue
            readable.add_metric([store], 1)
            yield from families
        yield readable

    def _jobs(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("ragtopics_queue_depth", "Jobs waiting in each job queue.", labels=["queue"])
        jobs = GaugeMetricFamily("ragtopics_jobs", "Jobs of each queue by state (rq's registries).", labels=["queue", "state"])
        for queue in Queue.all(connection=self.rt.redis):
            waiting = queue.count
            depth.add_metric([queue.name], waiting)
            jobs.add_metric([queue.name, "queued"], waiting)
            for state in JOB_STATES:
                jobs.add_metric([queue.name, state], getattr(queue, f"{state}_job_registry").count)
        yield depth
        yield jobs

    def _documents(self) -> Iterator[Metric]:
        documents = GaugeMetricFamily(
            "ragtopics_documents",
            "Documents by status (queued, processing, indexed, empty, failed, deleting).",
            labels=["status"],
        )
        with self.rt.metadata.session() as s:
            for status, count in s.exec(select(DocumentRow.status, func.count()).group_by(DocumentRow.status)):
                documents.add_metric([status], count)
        yield documents
