"""Fault injection: Redis killed with SIGKILL while a worker indexes; after its restart nothing indexed is lost.

Redis syncs its append-only file once a second (``appendfsync everysec``), so a kill may take
the last second of writes with it: chunks of a document the metadata database already calls
indexed, or a job just queued. The worker that starts after the restart finds both
(:func:`~ragtopics.worker.recovery.recover_lost_chunks`, :func:`~ragtopics.worker.recovery.recover_stranded`)
and indexes those documents again. The kill is real: a Redis of the test's own, a real worker process.
"""

from __future__ import annotations

import signal

import pytest

from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.llm.gateway import ModelGateway
from ragtopics.ops.redis_server import EmbeddedRedis
from ragtopics.runtime import Runtime, set_runtime
from ragtopics.settings.env import Settings
from ragtopics.topics.topics import create_topic
from ragtopics.worker.recovery import recover_lost_chunks
from tests.conftest import free_port
from tests.faults.processes import document_rows, kill, start_worker, wait_for

DOCUMENTS = 24
KILLS = 3


def text(n: int) -> bytes:
    return "\n\n".join(
        f"Pump P-{n}{p} of line {n} is inspected every {10 + p} days; its seal kit is SK-{n}{p}." for p in range(5)
    ).encode()


def complete(rt, topic_id: str) -> bool:
    counts = rt.chunk_index(topic_id).chunk_counts()
    return all(r.status == "indexed" and counts.get(r.id, 0) == r.chunk_count > 0 for r in document_rows(rt, topic_id))


def test_chunks_lost_after_indexing_are_found_and_indexed_again(rt, run_jobs):
    topic = create_topic(rt, "Lost chunks", settings={"chunk_size": 120, "chunk_overlap": 0})
    docs = [upload_file(rt, topic, f"line-{n}.txt", text(n)) for n in range(3)]
    run_jobs()
    assert recover_lost_chunks(rt) == []
    index = rt.chunk_index(topic.id)
    victim = get_document(rt, docs[1].id)
    lost = index.document_chunk_ids(victim.id)[:2]
    rt.redis.delete(*[index.key(c) for c in lost])  # what a Redis restart without its last second leaves
    [recovered] = recover_lost_chunks(rt)
    assert (recovered.file_name, recovered.action) == ("line-1.txt", "requeued")
    assert recovered.why == f"the index holds {victim.chunk_count - 2} of its {victim.chunk_count} chunks"
    assert index.chunk_counts()[victim.id] == victim.chunk_count - 2  # what is left stays searchable meanwhile
    run_jobs()
    assert complete(rt, topic.id) and index.chunk_counts()[victim.id] == victim.chunk_count
    assert recover_lost_chunks(rt) == []


@pytest.fixture
def own_store(tmp_path, scripted_llm, embedder):
    """A Redis of the test's own (killable) and a runtime on it; the process-wide runtime while the test runs."""
    server = EmbeddedRedis(tmp_path / "redis", free_port()).start()
    settings = Settings(
        RAGTOPICS_DATA_DIR=tmp_path / "var",
        REDIS_URL=server.url,
        LLM_BASE_URL=scripted_llm.base_url,
        LLM_MODEL="scripted",
        RQ_QUEUE="faults",
        _env_file=None,
    )
    rt = Runtime(settings)
    rt._gateway = ModelGateway(settings, embedder=embedder)
    set_runtime(rt)
    yield rt, server
    set_runtime(None)
    server.stop()


def diagnose(rt, job_id: str) -> dict:
    """Where a job stands in Redis, for a failure message."""
    from rq.job import Job

    from ragtopics.jobs.queue import queue_for
    from ragtopics.worker.recovery import stranded_reason

    queue = queue_for(rt)
    try:
        job = Job.fetch(job_id, connection=rt.redis)
        status = job.get_status(refresh=True)
    except Exception as exc:
        status = repr(exc)
    try:
        result = Job.fetch(job_id, connection=rt.redis).latest_result()
        error = (result.exc_string or "")[-600:] if result else ""
    except Exception as exc:
        error = repr(exc)
    return {
        "error": error,
        "status": str(status),
        "in_queue": job_id in queue.get_job_ids(),
        "intermediate": job_id.encode() in rt.redis.lrange(f"{queue.key}:intermediate", 0, -1),
        "started": job_id in queue.started_job_registry,
        "stranded": stranded_reason(rt, job_id),
    }


@pytest.mark.faults
def test_redis_killed_mid_ingest_loses_no_indexed_document(own_store, tmp_path):
    rt, server = own_store
    log = tmp_path / "workers.log"
    topic = create_topic(rt, "Redis kill", settings={"chunk_size": 120, "chunk_overlap": 0})
    for n in range(DOCUMENTS):
        upload_file(rt, topic, f"line-{n:02d}.txt", text(n))
    indexed_at_kill = []
    for _ in range(KILLS):
        worker = start_worker(rt.settings, rt.settings.llm_base_url, log)
        before = sum(r.status == "indexed" for r in document_rows(rt, topic.id))
        assert wait_for(
            lambda: sum(r.status == "indexed" for r in document_rows(rt, topic.id)) >= min(before + 3, DOCUMENTS), 120
        )
        server.process.send_signal(signal.SIGKILL)  # mid-ingest: the worker is writing chunks
        server.process.wait(timeout=30)
        indexed_at_kill.append(sum(r.status == "indexed" for r in document_rows(rt, topic.id)))
        kill(worker)  # a worker without its store: the supervisor restarts both
        server.start()  # the same data folder: Redis replays its append-only file
        for r in document_rows(rt, topic.id):
            assert r.status != "failed", f"{r.file_name}: {r.error}"
    worker = start_worker(rt.settings, rt.settings.llm_base_url, log)
    try:
        done = wait_for(lambda: complete(rt, topic.id), 300)
    finally:
        kill(worker)
    final = document_rows(rt, topic.id)
    assert done, [
        (r.file_name, r.status, r.chunk_count, r.error, r.job_id, diagnose(rt, r.job_id)) for r in final if r.status != "indexed"
    ] + [log.read_text()[-3000:]]
    counts = rt.chunk_index(topic.id).chunk_counts()
    assert set(counts) == {r.id for r in final} and sum(counts.values()) == sum(r.chunk_count for r in final)
    print(
        f"\n[redis SIGKILL] kills {KILLS}, documents indexed at each kill {indexed_at_kill}; after the restarts "
        f"{len(final)} of {DOCUMENTS} documents indexed with all {sum(counts.values())} chunks; lost 0"
    )


@pytest.mark.faults
def test_the_console_says_storage_is_unavailable_and_recovers_without_a_restart(own_store, scripted_llm):
    from gradio_client import Client
    from rq import SimpleWorker

    from ragtopics.errors import STORE_DOWN_MESSAGE
    from ragtopics.jobs.queue import queue_for
    from ragtopics.ui.app import launch_console

    rt, server = own_store
    topic = create_topic(rt, "Outage", settings={"min_similarity_score": 0.0, "route_before_retrieval": False})
    upload_file(rt, topic, "pumps.txt", b"Pump P-7 is inspected every 90 days by the night shift.")
    SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, logging_level="WARNING")
    scripted_llm.replies["answer"] = "Every 90 days [S1]."
    scripted_llm.replies["source_check"] = '{"used": true}'
    port = free_port()
    app, url, _ = launch_console(rt, host="127.0.0.1", port=port)
    try:
        client = Client(url, verbose=False)
        question = "How often is pump P-7 inspected?"
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=30)
        history, _, kept_question, _ = client.predict("Outage", question, [], None, api_name="/ask")
        assert history[-1]["content"][0]["text"] == f"⚠️ {STORE_DOWN_MESSAGE}" and kept_question == question
        server.start()  # Redis is back, replaying its append-only file; the console was not restarted
        history, *_ = client.predict("Outage", question, [], None, api_name="/ask")
        assert history[-1]["content"][0]["text"].startswith("Every 90 days [pumps.txt].")
    finally:
        app.close()


@pytest.mark.faults
def test_redis_killed_while_an_answer_streams_loses_no_turn_and_no_chunk(own_store, scripted_llm):
    """The answer already under way finishes (the model and the SQL store need no Redis), is saved whole,
    and after Redis comes back from its append-only file the Topic's chunks are all there."""
    from rq import SimpleWorker

    from ragtopics.answer.history import session_turns
    from ragtopics.answer.turn import ask
    from ragtopics.jobs.queue import queue_for

    rt, server = own_store
    topic = create_topic(rt, "Mid-chat", settings={"min_similarity_score": 0.0})
    upload_file(rt, topic, "pumps.txt", b"Pump P-7 is inspected every 90 days by the night shift.")
    SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, logging_level="WARNING")
    chunks_before = rt.chunk_index(topic.id).count()
    scripted_llm.replies["answer"] = "The night shift inspects pump P-7 every 90 days, as the log says [S1]."
    scripted_llm.delay_s = 0.05
    try:
        stream = ask(rt, topic, "How often is pump P-7 inspected?")
        first = next(u for u in stream if u.text)  # the answer is streaming
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=30)
        *_, final = stream
    finally:
        scripted_llm.delay_s = 0
    assert first.text and final.done and final.text.startswith("The night shift inspects pump P-7 every 90 days")
    assert [t.answer for t in session_turns(rt, final.session_id)] == [final.text]  # saved whole, once
    server.start()
    assert wait_for(lambda: rt.chunk_index(topic.id).count() == chunks_before, 30)
    print(f"\n[redis mid-chat] answer finished and saved after the kill; chunks {chunks_before} before and after the restart")


@pytest.mark.faults
def test_graphs_summaries_chats_and_queued_jobs_survive_a_redis_kill(own_store, scripted_llm):
    """A GraphRAG Topic's graph, its community summaries, a saved chat and a queued job, all written more than a
    second before Redis is killed (``appendfsync everysec``), are all there after it restarts."""
    import time

    from ragtopics.answer.history import session_turns
    from ragtopics.answer.turn import ask
    from ragtopics.graph.community_index import CommunityIndex
    from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
    from ragtopics.graph.ingest import graph_store
    from ragtopics.graph.refresh import enqueue_rebuild, run_rebuild
    from ragtopics.jobs.queue import job_progress
    from tests.graph.test_graph_ingestion import LLM, people

    rt, server = own_store
    topic = create_topic(rt, "Kept graph", kind="graphrag", settings=LLM)
    ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))
    run_rebuild(rt, topic.id)
    scripted_llm.replies["answer"] = "Marie Curie married Pierre Curie [S1]."
    *_, final = ask(rt, topic, "Whom did Marie Curie marry?", route="LOCAL")
    job_id = enqueue_rebuild(rt, topic, reason="queued before the crash")
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims)
    before = (
        sorted(e.name for e in graph_store(rt, topic).all_entities()),
        len(list(graph_store(rt, topic).all_relationships())),
        sorted(index.get_hashes()),
        rt.chunk_index(topic.id).count(),
    )
    time.sleep(1.5)  # past the append-only file's one-second sync
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(timeout=30)
    server.start()
    after = (
        sorted(e.name for e in graph_store(rt, topic).all_entities()),
        len(list(graph_store(rt, topic).all_relationships())),
        sorted(index.get_hashes()),
        rt.chunk_index(topic.id).count(),
    )
    assert after == before and before[0] and before[2]
    assert job_progress(rt, job_id).status == "queued" and [t.answer for t in session_turns(rt, final.session_id)] == [final.text]
    print(
        f"\n[redis kill, graph] {len(before[0])} entities, {before[1]} relationships, {len(before[2])} summaries, "
        f"{before[3]} chunks, 1 chat turn and 1 queued job: all there after the restart"
    )
