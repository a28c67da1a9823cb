"""What an open Upload tab costs the console: one tick of its progress bars, with many uploads tracked.

The tab re-renders its bars every second (``ui.upload_tab``: :func:`~ragtopics.ui.upload_tab.jobs_html`).
Here :data:`TRACKED` uploads of one Topic are tracked, :data:`RUNNING` of them running (their jobs
``started``, with progress in their meta) and the rest finished (an rq result each), as real rq jobs on
an embedded Redis. Figures, never asserted:

* console CPU per tick (``time.process_time``, mean over :data:`TICKS` ticks after a first one) and so
  its share of one core at one tick a second, keeping the finished jobs' progress as the tab does,
  against reading every tracked job at every tick (no kept progress);
* Redis commands per tick (``INFO commandstats``) and the server's CPU per tick, both ways;
* the Indexed Documents list the same tick also renders (its SQL read of the documents), apart;
* the whole tick as the tab runs it (:func:`~ragtopics.ui.upload_tab.poll`: the list read only when its
  stamp changed), with the list unchanged and with one document changing every tick, against reading
  the list at every tick.

``python -m bench.console_poll`` runs it alone.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from rq.job import Job, JobStatus
from rq.results import Result

from ragtopics.documents.uploads import receive_upload
from ragtopics.jobs.queue import RESULT_TTL_S, enqueue_ingest
from ragtopics.runtime import Runtime
from ragtopics.storage import documents as document_store
from ragtopics.storage.metadata import DocumentRow, utcnow
from ragtopics.topics.topics import create_topic
from ragtopics.ui.upload_tab import documents_table, jobs_html, poll

#: Uploads tracked by the tab (its most, ``MAX_TRACKED_JOBS``), and how many of them run.
TRACKED, RUNNING = 2000, 200
#: Ticks measured (after one that fills the kept progress).
TICKS = 20


def tracked_uploads(rt: Runtime) -> list[tuple[str, str, str]]:
    """:data:`TRACKED` uploads as the tab tracks them, ``(job_id, file_name, document_id)``; the first
    :data:`RUNNING` running, the others finished."""
    topic = create_topic(rt, "bench-console")
    jobs = []
    for n in range(TRACKED):
        row = receive_upload(rt, topic, f"note-{n:04d}.txt", f"Note {n}: pump P-{n} is checked.".encode())
        enqueue_ingest(rt, topic.id, row.id, job_id=row.job_id, blob_path=row.pending_blob_path)
        job = Job.fetch(row.job_id, connection=rt.redis)
        if n < RUNNING:
            job.set_status(JobStatus.STARTED)
            job.meta.update(phase="embedding", done=n % 7, total=7)
            job.save_meta()
        else:
            job.set_status(JobStatus.FINISHED)
            Result.create(job, Result.Type.SUCCESSFUL, RESULT_TTL_S, return_value={"status": "indexed", "chunk_count": 1})
        jobs.append((row.job_id, row.file_name, row.id))
    return jobs


def _redis_calls_and_cpu(rt: Runtime) -> tuple[int, float]:
    """Commands the server ran so far (all kinds) and its CPU seconds (user + system)."""
    stats = rt.redis.info("commandstats")
    cpu = rt.redis.info("cpu")
    return sum(v["calls"] for v in stats.values()), float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def measure_ticks(rt: Runtime, render, ticks: int = TICKS) -> dict[str, float]:
    """Mean console CPU ms, Redis commands and Redis CPU ms of one tick of ``render()``, after one first tick."""
    render()
    calls0, server0 = _redis_calls_and_cpu(rt)
    cpu0 = time.process_time()
    for _ in range(ticks):
        render()
    cpu = (time.process_time() - cpu0) / ticks
    calls1, server1 = _redis_calls_and_cpu(rt)
    # (the two INFO calls are counted too: 2 of them, not per tick)
    return {"cpu_ms": cpu * 1000, "commands": (calls1 - calls0 - 2) / ticks, "redis_cpu_ms": (server1 - server0) * 1000 / ticks}


def _ticking(rt: Runtime, topic_name: str, jobs: list, kept: dict, *, touch: bool = False):
    """A function that runs one tick of the tab (:func:`~ragtopics.ui.upload_tab.poll`) each call, keeping what
    it shows; ``touch``: first one document row changes (its ``updated_at``, one SQL UPDATE, counted in the tick),
    as when an upload finishes every second."""
    state: list = [None]
    rows = document_store.topic_documents(rt.metadata, rt.metadata.topic_by_name(topic_name).id)
    turn = iter(range(10**9))

    def tick() -> None:
        if touch:
            with rt.metadata.session() as s:
                row = s.get(DocumentRow, rows[next(turn) % len(rows)].id)
                row.updated_at = utcnow()
                s.add(row)
        state[0] = poll(rt, topic_name, jobs, kept, state[0])[2]

    return tick


def bench_console_poll(rt: Runtime, figure, versus) -> dict[str, float]:
    """Print the figures of the module docstring; returns the tick's ``{"cpu_ms", "commands", "redis_cpu_ms"}``."""
    jobs = tracked_uploads(rt)
    kept: dict = {}
    tab = measure_ticks(rt, lambda: jobs_html(rt, jobs, kept))
    every = measure_ticks(rt, lambda: jobs_html(rt, jobs))
    figure("tracked uploads / running", f"{TRACKED:,} / {RUNNING:,}")
    figure("progress bars: console CPU per tick", tab["cpu_ms"], "ms")
    versus(
        "Upload tab progress: share of one core",
        tab["cpu_ms"] / 10,
        "%",
        "every job read each tick",
        every["cpu_ms"] / 10,
        higher_is_better=False,
    )
    figure("progress bars: Redis commands per tick", tab["commands"])
    figure("  every job read each tick", every["commands"])
    figure("progress bars: Redis CPU per tick", tab["redis_cpu_ms"], "ms")
    figure("  every job read each tick", every["redis_cpu_ms"], "ms")
    topic_name = "bench-console"
    listing = measure_ticks(rt, lambda: documents_table(rt, topic_name))
    figure("document list read: console CPU", listing["cpu_ms"], "ms")
    # the whole tick as the tab runs it (:func:`poll`), against reading the list at every tick as it did before
    before = measure_ticks(rt, lambda: (jobs_html(rt, jobs, kept), hash(repr(documents_table(rt, topic_name)))))
    idle = measure_ticks(rt, _ticking(rt, topic_name, jobs, kept), ticks=TICKS * 2)
    busy = measure_ticks(rt, _ticking(rt, topic_name, jobs, kept, touch=True), ticks=TICKS * 2)
    versus(
        "whole tick, list unchanged: share of one core (goal < 5)",
        idle["cpu_ms"] / 10,
        "%",
        "the list read every tick",
        before["cpu_ms"] / 10,
        higher_is_better=False,
    )
    versus(
        "whole tick, a document changing every second (goal < 5)",
        busy["cpu_ms"] / 10,
        "%",
        "the list read every tick",
        before["cpu_ms"] / 10,
        higher_is_better=False,
    )
    return tab


def main(argv: list[str]) -> dict[str, float]:
    """Run the section alone on an embedded Redis of its own."""
    from bench.report import figure, section, versus
    from bench.run import build_runtime, free_port
    from ragtopics.ops.redis_server import EmbeddedRedis
    from ragtopics.runtime import set_runtime

    section(f"12. an open Upload tab, {TRACKED:,} uploads tracked, {RUNNING:,} running (bench.console_poll)")
    with tempfile.TemporaryDirectory(prefix="ragtopics-bench-console-") as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis", free_port()).start()
        try:
            return bench_console_poll(build_runtime(Path(tmp), server), figure, versus)
        finally:
            set_runtime(None)
            server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
