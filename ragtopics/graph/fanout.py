"""A GraphRAG upload's extraction as many small queued jobs, with a concurrency limit per model endpoint.

The ingest job reads, chunks and embeds the file as for a RAG Topic, then
:func:`park_and_fan_out` parks the prepared version in Redis and enqueues:

- one ``extract_batch`` job per :attr:`~ragtopics.settings.env.Settings.extraction_batch_chunks`
  chunks whose extraction is not cached yet. They carry an rq ``RateLimit`` keyed by the
  extraction endpoint (the Graph Extraction model's base URL and name, or ``nlp``), so at most
  :attr:`~ragtopics.settings.env.Settings.extraction_concurrency` of them run at once across
  every worker; the rest wait in rq's rate-limited set, not in a worker.
- one ``finish_graph`` job that depends on all of them (failures allowed): it plans the graph
  from the cache (deduplication, entity embeddings), then stores chunks and graph under the
  document's lock, as the in-process path does (:func:`ragtopics.ingest.pipeline.finish_version`).

Each extraction lands in the Topic's extraction cache as soon as it is made, so a worker
killed half-way loses at most the chunk it was on: the batch's retry, or the finishing
job for whatever is still missing, reads the finished chunks from the cache.

Progress: the chunks extracted so far are a Redis set per upload (:func:`extracted_key`), and
the number to extract is in the finishing job's meta; the console reads both while the finishing
job waits (:func:`ragtopics.jobs.queue.job_progresses`), never the parked version.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

from rq import Queue, Retry
from rq.job import Dependency
from rq.rate_limit import RateLimit

from ragtopics.errors import SupersededError
from ragtopics.graph.extract import looks_like_toc_or_index
from ragtopics.graph.ingest import extract_cached, extraction_setup, extraction_text
from ragtopics.ingest.pipeline import IngestResult, _stopped, finish_version
from ragtopics.jobs.queue import queue_for
from ragtopics.runtime import Runtime
from ragtopics.storage import documents
from ragtopics.topics.keys import forget_keys, note_keys
from ragtopics.topics.topics import get_topic
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: How long a parked version waits for its extraction jobs, in seconds (then Redis drops it).
PARK_TTL_S = 3 * 24 * 3600
#: Retries of an extraction job whose worker died or that failed unexpectedly.
BATCH_RETRIES = 2
#: Extraction jobs' trace events read at once when the finishing job merges them into the upload's trace.
EVENT_PAGE = 20


def parked_key(topic_id: str, job_id: str) -> str:
    """Redis key of a parked version (under the Topic's prefix, so a Topic delete removes it)."""
    return f"rt:{topic_id}:parked:{job_id}"


def extracted_key(topic_id: str, job_id: str) -> str:
    """Redis key of the set of chunk ids of a parked version whose extraction is done."""
    return parked_key(topic_id, job_id) + ":done"


def _failed_key(topic_id: str, job_id: str) -> str:
    return parked_key(topic_id, job_id) + ":failed"


def _events_key(topic_id: str, job_id: str) -> str:
    return parked_key(topic_id, job_id) + ":events"


def _parked_keys(topic_id: str, job_id: str) -> list[str]:
    """Every key of a parked version: the version, the chunks extracted, the failures, the trace events."""
    return [
        parked_key(topic_id, job_id),
        extracted_key(topic_id, job_id),
        _failed_key(topic_id, job_id),
        _events_key(topic_id, job_id),
    ]


def finish_job_id(job_id: str) -> str:
    """The id of the job that finishes an upload whose extraction fanned out."""
    return f"{job_id}-graph"


def rate_limit_for(rt: Runtime, method: str) -> RateLimit:
    """The rq concurrency limit of extraction jobs on one endpoint (``nlp`` for the NLP method)."""
    if method == "NLP":
        key = "ragtopics:extraction:nlp"
    else:
        endpoint = rt.settings.endpoint("graph_extraction")
        key = f"ragtopics:extraction:{endpoint.base_url}|{endpoint.model}"
    return RateLimit(key=key, concurrency=rt.settings.extraction_concurrency)


def park_and_fan_out(rt: Runtime, topic, doc, job_id: str, version, trace: Trace):
    """Park a prepared GraphRAG version and enqueue its extraction jobs and the job that finishes it.

    When every chunk's extraction is already cached (an unchanged re-upload), nothing fans
    out: the version is finished here.

    Returns:
        An :class:`~ragtopics.ingest.pipeline.IngestResult` with status ``extracting`` and
        ``continued_in`` the finishing job's id (or the finished result).

    Raises:
        SupersededError: when a newer upload or a delete made the version obsolete.
    """
    setup = extraction_setup(rt, topic)
    wanted = {
        r.chunk_id: setup.cache.key(extraction_text(r), setup.method, setup.version)
        for r in version.records
        if not looks_like_toc_or_index(r.text)
    }
    cached = setup.cache.get_many(list(wanted.values()))  # one round trip, whatever the number of chunks
    missing = [chunk_id for chunk_id, key in wanted.items() if cached[key] is None]
    if not missing:
        trace.add("extraction_jobs", batches=0, reason="every chunk's extraction is cached")
        report = _reporter(rt, doc.id, job_id, None)
        return finish_version(rt, topic, doc, job_id, version, trace, report, None)
    documents.check_current(rt.metadata, doc.id, job_id)
    queue: Queue = queue_for(rt)
    limit = rate_limit_for(rt, setup.method)
    size = rt.settings.extraction_batch_chunks
    batches = [missing[i : i + size] for i in range(0, len(missing), size)]
    trace.add(
        "extraction_jobs",
        batches=len(batches),
        chunks=len(missing),
        method=setup.method,
        concurrency=limit.concurrency,
        rate_limit_key=limit.key,
    )
    key = parked_key(topic.id, job_id)
    pipe = rt.redis.pipeline(transaction=True)
    pipe.set(key, pickle.dumps({"version": version, "trace": trace, "total": len(missing)}), ex=PARK_TTL_S)
    pipe.delete(extracted_key(topic.id, job_id), _failed_key(topic.id, job_id), _events_key(topic.id, job_id))
    note_keys(pipe, topic.id, _parked_keys(topic.id, job_id), PARK_TTL_S)  # a Topic delete finds them there
    pipe.execute()
    meta = {"topic_id": topic.id, "document_id": doc.id}
    jobs = [
        queue.enqueue_call(
            "ragtopics.worker.jobs.extract_batch",
            args=(topic.id, doc.id, job_id, batch),
            job_id=f"{job_id}-x{n}",
            description=f"extract {len(batch)} chunk(s) of {doc.file_name}",
            result_ttl=24 * 3600,
            failure_ttl=7 * 24 * 3600,
            meta=meta,
            rate_limit=limit,
            retry=Retry(max=BATCH_RETRIES),
        )
        for n, batch in enumerate(batches)
    ]
    finisher = queue.enqueue_call(
        "ragtopics.worker.jobs.finish_graph",
        args=(topic.id, doc.id, job_id),
        job_id=finish_job_id(job_id),
        description=f"finish {doc.file_name}",
        result_ttl=24 * 3600,
        failure_ttl=7 * 24 * 3600,
        depends_on=Dependency(jobs=jobs, allow_failure=True),
        meta={**meta, "phase": "extracting", "done": 0, "total": len(missing)},
    )
    log.info("%s: %d chunk(s) to extract in %d job(s), finished by %s", doc.file_name, len(missing), len(batches), finisher.id)
    return IngestResult(doc.id, "extracting", len(version.records), 0, trace.to_list(), continued_in=finisher.id)


def extract_batch(rt: Runtime, topic_id: str, document_id: str, job_id: str, chunk_ids: list[str]) -> dict:
    """Extract the given chunks of a parked version into the cache (an ``extract_batch`` job).

    A chunk already in the cache is not extracted again (a retried batch, a re-upload);
    a failed extraction is recorded for the finishing job. Stops quietly when the
    version became obsolete.

    Returns:
        ``{"status": "done"|"superseded"|"gone", "extracted": n, "cached": n, "failed": n}``.
    """
    raw = rt.redis.get(parked_key(topic_id, job_id))
    if raw is None:
        return {"status": "gone", "extracted": 0, "cached": 0, "failed": 0}
    version = _unpickled(raw)["version"]
    wanted = set(chunk_ids)
    setup = extraction_setup(rt, get_topic(rt, topic_id))
    trace = Trace("upload", f"extraction of {document_id}", get_topic(rt, topic_id).settings.role_models)
    counts: dict[str, Any] = {"status": "done", "extracted": 0, "cached": 0, "failed": 0}
    try:
        for record in (r for r in version.records if r.chunk_id in wanted):
            documents.check_current(rt.metadata, document_id, job_id)
            extraction, now, error = extract_cached(rt, setup, record, trace)
            if extraction is None:
                rt.redis.hset(_failed_key(topic_id, job_id), record.chunk_id, error)
                counts["failed"] += 1
            else:
                counts["extracted" if now else "cached"] += 1
            rt.redis.sadd(extracted_key(topic_id, job_id), record.chunk_id)
            rt.redis.expire(extracted_key(topic_id, job_id), PARK_TTL_S)
    except SupersededError as exc:
        counts["status"] = "superseded"
        log.info("extraction of %s stopped: %s", document_id, exc)
    finally:
        if trace.events:
            rt.redis.rpush(_events_key(topic_id, job_id), pickle.dumps([(e.step, e.data) for e in trace.events]))
            rt.redis.expire(_events_key(topic_id, job_id), PARK_TTL_S)
    return counts


def finish_graph(rt: Runtime, topic_id: str, document_id: str, job_id: str, progress=None):
    """Finish a parked version (the ``finish_graph`` job): plan the graph from the cache and store everything.

    Chunks no extraction job finished (a batch that failed for good) are extracted here.

    Returns:
        The :class:`~ragtopics.ingest.pipeline.IngestResult`; status ``cancelled`` or
        ``superseded`` when the version became obsolete, ``gone`` when nothing was parked.
    """
    key = parked_key(topic_id, job_id)
    raw = rt.redis.get(key)
    if raw is None:
        return IngestResult(document_id, "gone", 0, 0, [], reason="the prepared version expired or was removed")
    parked = _unpickled(raw)
    version, trace = parked["version"], parked["trace"]
    events_key = _events_key(topic_id, job_id)
    for start in range(0, int(rt.redis.llen(events_key)), EVENT_PAGE):  # a page at a time: the trace bounds its text
        for batch in rt.redis.lrange(events_key, start, start + EVENT_PAGE - 1):
            for step, data in _unpickled(batch):
                trace.add(step, **data)
    failures = {_text(k): _text(v) for k, v in rt.redis.hgetall(_failed_key(topic_id, job_id)).items()}
    fresh = {_text(c) for c in rt.redis.smembers(extracted_key(topic_id, job_id))} - set(failures)
    doc = documents.get_document(rt.metadata, document_id)
    try:
        if doc is None:
            raise SupersededError(documents.SUPERSEDED_BY_DELETE)
        report = _reporter(rt, document_id, job_id, progress)
        return finish_version(
            rt,
            get_topic(rt, topic_id),
            doc,
            job_id,
            version,
            trace,
            report,
            progress,
            graph_failures=failures,
            extracted_elsewhere=fresh,
        )
    except SupersededError as exc:
        return _stopped(document_id, exc, trace)
    finally:
        pipe = rt.redis.pipeline(transaction=True)
        pipe.delete(*_parked_keys(topic_id, job_id))
        forget_keys(pipe, topic_id, _parked_keys(topic_id, job_id))
        pipe.execute()


def _reporter(rt: Runtime, document_id: str, job_id: str, progress):
    def report(phase: str, done: int, total: int) -> None:
        documents.check_current(rt.metadata, document_id, job_id)
        if progress is not None:
            progress(phase, done, total)

    return report


def _unpickled(raw: bytes | str) -> Any:
    """A value pickled into Redis, read back (the client does not decode responses, so it gives bytes).

    Raises:
        TypeError: when the client gave text, i.e. it was set up to decode responses.
    """
    if not isinstance(raw, bytes):
        raise TypeError(f"a pickled value came back from Redis as {type(raw).__name__}; the client must not decode responses")
    return pickle.loads(raw)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
