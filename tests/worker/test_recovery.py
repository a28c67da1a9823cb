"""Documents whose job chain a crash cut are found and indexed after all; live chains are left alone.

The crash is reproduced on the real Redis as it leaves things: the job hash gone, a job ``started`` by a
worker that no longer runs, a finishing job ``deferred`` behind extraction jobs that are gone. With several
workers, recovery runs while others work: a job between two of rq's lists, or started by a worker whose
heartbeat rq still holds, is alive; a document finished while recovery looked at it is left as it is."""

from __future__ import annotations

import os
import signal
import threading
import time

from rq import SimpleWorker
from rq.job import Job

from ragtopics.documents.uploads import BatchedUploads, get_document, receive_upload, upload_file
from ragtopics.graph.ingest import graph_store
from ragtopics.jobs.queue import AWAITING_QUEUE, job_progress, queue_for
from ragtopics.topics.topics import create_topic
from ragtopics.worker.recovery import recover_stranded, stranded_reason
from tests.graph.test_upload import CURIE, NLP

TEXT = b"Pump P-7 is inspected every 90 days by the night shift."


def test_a_queued_job_is_alive_and_a_lost_one_is_queued_again(rt, run_jobs):
    topic = create_topic(rt, "Pumps")
    doc = upload_file(rt, topic, "pumps.txt", TEXT)
    assert stranded_reason(rt, doc.job_id) is None and recover_stranded(rt) == []

    queue_for(rt).remove(doc.job_id)  # what a crash between two writes leaves: the hash says queued, the queue lacks it
    assert stranded_reason(rt, doc.job_id) == f"job {doc.job_id} says queued but rq holds it nowhere"
    Job.fetch(doc.job_id, connection=rt.redis).delete()
    [recovered] = recover_stranded(rt)
    assert (recovered.file_name, recovered.why, recovered.action) == ("pumps.txt", f"job {doc.job_id} is gone", "requeued")
    run_jobs()
    row = get_document(rt, doc.id)
    assert (row.status, row.chunk_count) == ("indexed", 1)
    assert recover_stranded(rt) == []


def test_a_received_file_whose_job_waits_for_its_batch_is_left_alone_and_indexed_once(rt, run_jobs):
    """An upload holds small files until their shared job is full, and estimates each before: a worker's recovery
    pass meanwhile (one every heartbeat) must not queue them on their own, or each is indexed twice and the
    second run fails the file's job."""
    topic = create_topic(rt, "Waiting")
    with BatchedUploads(rt, topic) as uploads:
        row = uploads.add("pumps.txt", TEXT)
        assert queue_for(rt).get_job_ids() == []  # the batch is not full: no job yet
        assert stranded_reason(rt, row.job_id) is None and recover_stranded(rt) == []
    assert queue_for(rt).get_job_ids() == [row.job_id] and not rt.redis.exists(AWAITING_QUEUE.format(row.job_id))
    run_jobs()
    doc = get_document(rt, row.id)
    assert (doc.status, doc.chunk_count, doc.error) == ("indexed", 1, "")
    assert job_progress(rt, row.job_id).status == "finished"


def test_a_received_file_whose_uploader_died_before_queuing_it_is_queued_after_the_wait(rt, run_jobs):
    topic = create_topic(rt, "Died")
    row = receive_upload(rt, topic, "pumps.txt", TEXT)  # and no enqueue: the uploading process died here
    assert recover_stranded(rt) == [] and get_document(rt, row.id).status == "queued"
    rt.redis.delete(AWAITING_QUEUE.format(row.job_id))  # its wait ran out (the key's time to live)
    [recovered] = recover_stranded(rt)
    assert (recovered.why, recovered.action) == (f"job {row.job_id} is gone", "requeued")
    run_jobs()
    assert get_document(rt, row.id).status == "indexed"


def test_a_job_started_by_a_worker_that_no_longer_runs_is_queued_again(rt, run_jobs):
    topic = create_topic(rt, "Started")
    doc = upload_file(rt, topic, "pumps.txt", TEXT)
    queue_for(rt).remove(doc.job_id)
    job = Job.fetch(doc.job_id, connection=rt.redis)
    job.worker_name = "a-worker-that-crashed"
    job.set_status("started")
    job.save()
    assert stranded_reason(rt, doc.job_id) == f"job {doc.job_id} was started by a worker that no longer runs"
    assert [r.action for r in recover_stranded(rt)] == ["requeued"]
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed"


def test_a_graph_upload_whose_extraction_jobs_were_lost_is_finished_after_all(rt, run_jobs):
    topic = create_topic(rt, "Graph", kind="graphrag", settings=NLP)
    doc = upload_file(rt, topic, "curie.txt", CURIE.encode())
    queue = queue_for(rt)
    # the ingest job alone: it parks the version and fans out extraction jobs; then "the crash" loses those
    SimpleWorker([queue], connection=rt.redis).work(burst=True, max_jobs=1, logging_level="WARNING")
    finisher = f"{doc.job_id}-graph"
    extraction = Job.fetch(finisher, connection=rt.redis).dependency_ids
    assert extraction and get_document(rt, doc.id).status == "processing"
    for job_id in extraction:
        queue.remove(job_id)
        Job.fetch(job_id, connection=rt.redis).delete()

    assert stranded_reason(rt, doc.job_id) == f"job {finisher} waits for jobs that will not run"
    assert [r.action for r in recover_stranded(rt)] == ["requeued"]
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and graph_store(rt, topic).entity_by_name("Marie Curie") is not None


def test_a_lost_job_whose_file_is_gone_fails_with_a_message(rt):
    topic = create_topic(rt, "Gone")
    doc = upload_file(rt, topic, "pumps.txt", TEXT)
    queue_for(rt).remove(doc.job_id)
    Job.fetch(doc.job_id, connection=rt.redis).delete()
    rt.blobs.remove(doc.pending_blob_path)
    [recovered] = recover_stranded(rt)
    row = get_document(rt, doc.id)
    assert recovered.action == "failed" and row.status == "failed"
    assert row.error.startswith(f"its indexing job was lost (job {doc.job_id} is gone)") and "upload it again" in row.error


def test_a_requeued_job_is_not_failed_later_by_what_the_dead_worker_left(rt, run_jobs):
    from rq.registry import StartedJobRegistry

    topic = create_topic(rt, "Leftovers")
    doc = upload_file(rt, topic, "pumps.txt", TEXT)
    queue = queue_for(rt)
    queue.remove(doc.job_id)
    job = Job.fetch(doc.job_id, connection=rt.redis)
    job.worker_name = "a-worker-that-crashed"
    job.set_status("started")
    job.save()
    registry = StartedJobRegistry(queue=queue)
    rt.redis.zadd(registry.key, {f"{doc.job_id}:dead-execution": 1})  # the dead run's execution, long expired
    rt.redis.rpush(f"{queue.key}:intermediate", doc.job_id)
    assert [r.action for r in recover_stranded(rt)] == ["requeued"]
    assert rt.redis.zcard(registry.key) == 0 and rt.redis.llen(f"{queue.key}:intermediate") == 0
    job = Job.fetch(doc.job_id, connection=rt.redis)
    job.set_status("started")  # the new run has begun when rq's clean-up comes by
    registry.cleanup()
    assert Job.fetch(doc.job_id, connection=rt.redis).get_status(refresh=True) == "started"  # not failed as abandoned
    job.set_status("queued")
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed"


def _started_by(rt, job_id: str, worker_name: str) -> Job:
    job = Job.fetch(job_id, connection=rt.redis)
    job.worker_name = worker_name
    job.set_status("started")
    job.save()
    return job


def test_a_job_a_worker_is_taking_or_running_is_never_queued_again(rt, run_jobs):
    from rq.registry import StartedJobRegistry

    topic = create_topic(rt, "Taking")
    doc = upload_file(rt, topic, "pumps.txt", TEXT)
    queue = queue_for(rt)
    # a worker took the job (rq's LMOVE into the intermediate list) and has not started it yet
    assert rt.redis.lmove(queue.key, queue.intermediate_queue_key) is not None
    assert stranded_reason(rt, doc.job_id) is None and recover_stranded(rt) == []
    # it started it; the worker's key has expired, but its execution is renewed in rq's started registry
    rt.redis.lrem(queue.intermediate_queue_key, 0, doc.job_id)
    _started_by(rt, doc.job_id, "a-worker-with-an-old-key")
    registry = StartedJobRegistry(queue=queue)
    rt.redis.zadd(registry.key, {f"{doc.job_id}:live-execution": time.time() + 60})
    assert stranded_reason(rt, doc.job_id) is None and recover_stranded(rt) == []
    assert get_document(rt, doc.id).status == "queued" and queue.count == 0  # nothing queued twice

    # its heartbeats stop: once the execution expires, rq's clean-up fails it as abandoned, and only then is it queued again
    rt.redis.zadd(registry.key, {f"{doc.job_id}:live-execution": time.time() - 1})
    registry.cleanup()  # rq's maintenance pass (recover_stranded runs it too)
    abandoned = Job.fetch(doc.job_id, connection=rt.redis)
    assert abandoned.get_status(refresh=True) == "failed" and "AbandonedJobError" in (abandoned.exc_info or "")
    [recovered] = recover_stranded(rt)
    assert recovered.action == "requeued" and recovered.why == f"job {doc.job_id} is failed"
    assert queue.count == 1 and recover_stranded(rt) == []  # a second pass (another worker) finds it queued
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed"


def test_a_document_finished_while_recovery_waits_for_its_lock_is_not_queued_again(rt):
    from ragtopics.storage.locks import document_lock
    from ragtopics.storage.metadata import DocumentRow

    topic = create_topic(rt, "Finished meanwhile")
    doc = upload_file(rt, topic, "pumps.txt", TEXT)
    queue_for(rt).remove(doc.job_id)
    _started_by(rt, doc.job_id, "a-worker-about-to-finish")
    assert stranded_reason(rt, doc.job_id) == f"job {doc.job_id} was started by a worker that no longer runs"
    results = []
    with document_lock(rt.redis, doc.id):  # the job's finish holds the lock: recovery waits for it
        recovery = threading.Thread(target=lambda: results.append(recover_stranded(rt)))
        recovery.start()
        time.sleep(0.5)
        with rt.metadata.session() as s:  # what the finish writes under the lock: the row says indexed
            row = s.get(DocumentRow, doc.id)
            row.status = "indexed"
            s.add(row)
            s.commit()
    recovery.join(timeout=30)
    assert results == [[]]
    assert get_document(rt, doc.id).status == "indexed" and queue_for(rt).count == 0


def test_a_worker_keeps_a_long_job_alive_in_rqs_eyes_and_rq_abandons_it_once_the_heartbeats_stop(rt):
    from rq.registry import StartedJobRegistry

    from ragtopics.worker.main import ProductWorker

    queue = queue_for(rt)
    job = queue.enqueue(time.sleep, 4.5)  # longer than three heartbeats of one second
    registry = StartedJobRegistry(queue=queue)
    seen = []

    def cleanup_midway() -> None:
        time.sleep(3.5)
        registry.cleanup()  # what another worker's maintenance pass does meanwhile
        seen.append(job.get_status(refresh=True))

    cleaner = threading.Thread(target=cleanup_midway)
    cleaner.start()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        ProductWorker([queue], rt=rt, heartbeat_s=1).work(burst=True, logging_level="WARNING")
    finally:  # rq leaves its stop handlers installed: the test process gets its own back
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    cleaner.join()
    assert seen == ["started"] and job.get_status(refresh=True) == "finished"

    # a worker that stops sending heartbeats (killed): its execution expires three heartbeats later
    stalled = queue.enqueue(time.sleep, 0)
    stalled.set_status("started")
    rt.redis.zadd(registry.key, {f"{stalled.id}:killed": time.time() + 3})
    registry.cleanup()
    assert stalled.get_status(refresh=True) == "started"
    registry.cleanup(timestamp=time.time() + 3.5)
    assert stalled.get_status(refresh=True) == "failed"


def test_a_stop_signal_that_comes_during_a_recovery_pass_stops_the_worker_and_its_scheduler(rt, monkeypatch):
    # rq's handler raises StopRequested wherever the idle worker is; the recovery pass logs and swallows
    # what it raises, so the stop was lost there and the worker (and its scheduler process) kept running.
    from rq.worker import Worker

    from ragtopics.worker import main

    passes: list[int] = []

    def a_pass_the_stop_comes_in(rt, *, lost_chunks=False):
        passes.append(len(passes))
        if len(passes) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # a supervisor's stop, or the launcher's death (PR_SET_PDEATHSIG)
            time.sleep(0.5)  # the handler runs here, inside the pass
        return [], []

    def end_a_worker_that_missed_it() -> None:  # so that the test fails instead of waiting for ever
        worker._stop_requested = True
        queue.enqueue(len, "wake")  # the worker waits for a job: give it one

    monkeypatch.setattr(main, "_recovery_pass", a_pass_the_stop_comes_in)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a worker process the launcher forks (and so in its scheduler)
    queue = queue_for(rt)
    worker = main.ProductWorker([queue], rt=rt, heartbeat_s=1)
    guard = threading.Timer(30, end_a_worker_that_missed_it)
    guard.start()
    try:
        worker.work(burst=False, logging_level="WARNING", with_scheduler=True)
    finally:
        guard.cancel()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert passes == [0], "the worker went on listening after the stop"
    assert worker.scheduler is not None and worker.scheduler._process is not None  # it had started one
    assert worker.scheduler._process.exitcode is not None  # and it ended with the worker
    assert worker.name not in {w.name for w in Worker.all(connection=rt.redis)}


def test_a_job_waiting_for_a_rate_limit_slot_is_alive(rt):
    from rq.rate_limit import RateLimit

    queue = queue_for(rt)
    limit = RateLimit(key="extraction-test", concurrency=1)
    first = queue.enqueue_call(time.sleep, args=(0,), rate_limit=limit)
    waiting = queue.enqueue_call(time.sleep, args=(0,), rate_limit=limit)  # behind the first for the one slot
    assert first.get_status(refresh=True) == "queued" and waiting.get_status(refresh=True) == "rate_limited"
    assert stranded_reason(rt, waiting.id) is None
