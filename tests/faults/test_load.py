"""Load: 50 people chat with the console at once while an ingest runs; nobody gets someone else's answer.

Each of 50 threads is a separate client of the console's HTTP API (``gradio_client``), asking about its
own pump; the scripted model streams at a realistic rate (20 tokens/s) and answers with the pump named
in the question it was given. A worker thread indexes 40 uploads meanwhile. Every answer must name the
asker's pump, every chat must be saved in its own session, and no request may fail. p50/p95 latency and
throughput are printed, not asserted.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from gradio_client import Client
from rq import SimpleWorker

from ragtopics.answer.history import list_sessions, session_turns
from ragtopics.documents.uploads import upload_file
from ragtopics.jobs.queue import queue_for
from ragtopics.topics.topics import create_topic
from ragtopics.ui.app import launch_console
from tests.conftest import free_port
from tests.faults.processes import document_rows, kill, start_worker, wait_for

SESSIONS = 50
PUMPS = 60
UPLOADS = 40


def answer_for(body: dict) -> str:
    """The scripted model names the pump of the question it was sent (the text after "Question:")."""
    asked = body["messages"][-1]["content"]
    asked = asked if isinstance(asked, str) else " ".join(p.get("text", "") for p in asked)
    match = re.findall(r"pump P-(\d+)", asked.split("Question:")[-1])
    return f"Pump P-{match[-1]} is inspected every {match[-1]} days [S1]." if match else "Not in the documents."


@pytest.mark.faults
def test_fifty_concurrent_chats_during_an_ingest(rt, settings, scripted_llm):
    topic = create_topic(rt, "Load", settings={"min_similarity_score": 0.0, "route_before_retrieval": False})
    for n in range(PUMPS):
        upload_file(rt, topic, f"pump-{n}.txt", f"Pump P-{n} is inspected every {n} days.".encode())
    SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, logging_level="WARNING")
    scripted_llm.replies["answer"] = answer_for
    scripted_llm.replies["source_check"] = '{"used": true}'
    scripted_llm.delay_s = 0.05  # 20 tokens per second per answer

    port = free_port()
    app, url, _ = launch_console(rt, host="127.0.0.1", port=port)
    for n in range(UPLOADS):  # an ingest runs while people chat
        upload_file(rt, topic, f"manual-{n}.txt", f"Manual {n}: valve V-{n} is serviced every {n + 1} weeks.".encode())
    worker = start_worker(settings, scripted_llm.base_url)

    def chat(n: int) -> tuple[int, str, float]:
        # A browser waits for the page as long as it takes; gradio_client's own 5 s would fail the page load of
        # 50 clients arriving at once on two busy cores before a single chat is asked.
        client = Client(url, verbose=False, httpx_kwargs={"timeout": 60})
        t0 = time.perf_counter()
        history, *_ = client.predict("Load", f"How often is pump P-{n} inspected?", [], None, api_name="/ask")
        return n, history[-1]["content"][0]["text"], time.perf_counter() - t0

    try:
        started = time.perf_counter()
        with ThreadPoolExecutor(SESSIONS) as pool:
            results = list(pool.map(chat, range(SESSIONS)))
        elapsed = time.perf_counter() - started
        indexed_during = sum(r.status == "indexed" for r in document_rows(rt, topic.id)) - PUMPS
        assert wait_for(lambda: all(r.status == "indexed" for r in document_rows(rt, topic.id)), 300)
    finally:
        kill(worker)
        app.close()
    wrong = [(n, text) for n, text, _ in results if not text.startswith(f"Pump P-{n} is inspected every {n} days")]
    assert wrong == []
    saved = [session_turns(rt, s.id) for s in list_sessions(rt, topic)]
    assert len(saved) == SESSIONS and all(len(turns) == 1 for turns in saved)  # one chat each, none merged
    for [turn] in saved:
        n = re.search(r"pump P-(\d+)", turn.question).group(1)
        assert turn.answer.startswith(f"Pump P-{n} is inspected every {n} days")
    latencies = np.array([r[2] for r in results])
    print(
        f"\n[load] {SESSIONS} concurrent chats during an ingest of {UPLOADS} files: 0 errors, 0 answers to the wrong "
        f"session; latency p50 {np.percentile(latencies, 50):.2f} s, p95 {np.percentile(latencies, 95):.2f} s; "
        f"throughput {SESSIONS / elapsed:.1f} answers/s; {indexed_during} of {UPLOADS} uploads indexed meanwhile"
    )


BURST = 1000


@pytest.mark.faults
def test_a_burst_of_a_thousand_uploads_queues_and_finishes_with_live_progress(rt, settings, scripted_llm):
    from ragtopics.ui.upload_tab import jobs_html

    topic = create_topic(rt, "Burst")
    t0 = time.perf_counter()
    jobs = [
        (
            upload_file(rt, topic, f"note-{n:04d}.txt", f"Note {n}: part N-{n} ships from bay {n % 40}.".encode()).job_id,
            f"note-{n:04d}.txt",
        )
        for n in range(BURST)
    ]
    queued_s = time.perf_counter() - t0
    worker = start_worker(settings, scripted_llm.base_url)
    renders, started = [], time.perf_counter()
    try:
        while True:
            t1 = time.perf_counter()
            jobs_html(rt, jobs)  # what the Upload tab redraws every second
            renders.append(time.perf_counter() - t1)
            if all(r.status == "indexed" for r in document_rows(rt, topic.id)):
                break
            assert time.perf_counter() - started < 600, "the burst did not finish in 10 minutes"
            time.sleep(0.5)
    finally:
        kill(worker)
    indexing_s = time.perf_counter() - started
    assert f"{BURST} indexed" in jobs_html(rt, jobs) and rt.chunk_index(topic.id).count() == BURST
    print(
        f"\n[burst] {BURST} uploads queued in {queued_s:.1f} s ({BURST / queued_s:.0f}/s), indexed by one worker in "
        f"{indexing_s:.1f} s ({BURST / indexing_s:.1f} files/s); progress redraw of all {BURST} jobs p50 "
        f"{np.percentile(renders, 50) * 1000:.0f} ms, p95 {np.percentile(renders, 95) * 1000:.0f} ms ({len(renders)} redraws)"
    )
