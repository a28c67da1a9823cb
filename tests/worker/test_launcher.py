"""The worker launcher (``ragtopics worker``): a killed worker process is replaced at once and the new one takes jobs.

Real processes on the test's Redis: the launcher is started as a supervisor or a container starts it
(:func:`~tests.faults.processes.start_worker`), the worker process it forks is the one rq lists.
The launcher's rules for a worker process that exits by itself or dies before it is ready run on a
small body of their own in a separate interpreter (a fork of the test process would copy pytest).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from rq.job import Job
from rq.worker import Worker

from ragtopics.documents.uploads import upload_file
from ragtopics.topics.topics import create_topic
from tests.conftest import free_port
from tests.faults.processes import ROOT, document_rows, kill, session_processes, start_worker, wait_for, worker_processes


def indexed(rt, topic_id: str, n: int) -> bool:
    rows = document_rows(rt, topic_id)
    return len(rows) == n and all(d.status == "indexed" for d in rows)


@pytest.mark.faults
def test_a_killed_worker_process_is_replaced_by_the_launcher_and_the_new_one_takes_jobs(rt, settings, scripted_llm, tmp_path):
    topic = create_topic(rt, "Launcher", settings={"chunk_size": 120, "chunk_overlap": 0})
    log = tmp_path / "worker.log"
    launcher = start_worker(settings, scripted_llm.base_url, log)
    try:
        assert wait_for(lambda: len(worker_processes(rt, launcher)) == 1, 300), log.read_text()
        (first,) = worker_processes(rt, launcher)
        upload_file(rt, topic, "first.txt", b"Pump P-1 at the Leeds plant is inspected every 30 days.")
        assert wait_for(lambda: indexed(rt, topic.id, 1), 120), log.read_text()
        scheduler = [pid for pid, parent in session_processes(launcher.pid).items() if parent == first]

        os.kill(first, signal.SIGKILL)  # the worker process alone, as the out-of-memory killer would
        assert wait_for(lambda: worker_processes(rt, launcher) not in ([], [first]), 120), log.read_text()
        (second,) = worker_processes(rt, launcher)
        assert second != first and launcher.poll() is None
        # rq's scheduler process, forked by the killed worker process, went with it
        assert wait_for(lambda: not set(scheduler) & set(session_processes(launcher.pid)), 60), scheduler

        document = upload_file(rt, topic, "second.txt", b"Valve V-2 at the Dover plant feeds pump P-2.")
        assert wait_for(lambda: indexed(rt, topic.id, 2), 120), log.read_text()
        row = next(d for d in document_rows(rt, topic.id) if d.id == document.id)
        assert row.chunk_count > 0 and rt.chunk_index(topic.id).chunk_counts()[row.id] == row.chunk_count
        worker_name = Job.fetch(row.job_id, connection=rt.redis).worker_name
        names = {w.pid: w.name for w in Worker.all(connection=rt.redis)}
        assert worker_name == names[second], "the job was not run by the worker process that replaced the killed one"
        assert "was killed (SIGKILL)" in log.read_text()

        launcher.send_signal(signal.SIGTERM)  # a stop: passed on to the worker process, which stops warm
        assert launcher.wait(timeout=120) == 0, log.read_text()
        assert wait_for(lambda: not session_processes(launcher.pid), 60), session_processes(launcher.pid)
    finally:
        kill(launcher)


@pytest.mark.faults
def test_a_killed_launcher_takes_its_worker_process_with_it(rt, settings, scripted_llm, tmp_path):
    log = tmp_path / "worker.log"
    launcher = start_worker(settings, scripted_llm.base_url, log)
    try:
        assert wait_for(lambda: len(worker_processes(rt, launcher)) == 1, 300), log.read_text()
        os.kill(launcher.pid, signal.SIGKILL)  # the launcher alone: its worker process gets SIGTERM and stops
        launcher.wait(timeout=30)
        assert wait_for(lambda: not session_processes(launcher.pid), 120), session_processes(launcher.pid)
    finally:
        kill(launcher)


def run_launcher_with(body: str, **options) -> subprocess.CompletedProcess:
    """Run a :class:`~ragtopics.worker.launcher.Launcher` whose worker process runs ``body`` (a function body
    of ``ready``) in a fresh interpreter; its output and exit status."""
    script = textwrap.dedent(
        """
        import logging, os, signal, sys
        from ragtopics.worker.launcher import Launcher
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        def target(ready):
        {body}
        launcher = Launcher(target, **{options!r})
        code = launcher.run()
        print("restarts", launcher.restarts, flush=True)
        sys.exit(code)
        """
    ).format(body=textwrap.indent(textwrap.dedent(body), "    "), options=options)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_worker_process_that_exits_by_itself_ends_the_launcher_with_its_status():
    result = run_launcher_with("return 3")
    assert result.returncode == 3, result.stderr
    assert "restarts 0" in result.stdout and "exited with status 3" in result.stderr


def test_a_worker_process_killed_after_it_was_ready_is_forked_again_at_once(tmp_path):
    # the first worker process says it is ready and is killed; the second exits by itself
    body = """
    if not os.path.exists(marker):
        open(marker, "w").close()
        ready()
        os.kill(os.getpid(), signal.SIGKILL)
    return 0
    """
    result = run_launcher_with(f"marker = {str(tmp_path / 'first')!r}\n" + textwrap.dedent(body))
    assert result.returncode == 0, result.stderr
    assert "restarts 1" in result.stdout
    assert "was killed (SIGKILL) after" in result.stderr and "before it was ready" not in result.stderr


def test_worker_processes_that_die_before_they_are_ready_make_the_launcher_give_up():
    result = run_launcher_with("os.kill(os.getpid(), signal.SIGKILL)", first_pause_s=0.01, max_early_deaths=3)
    assert result.returncode == 1, result.stderr
    assert "restarts 3" in result.stdout
    assert result.stderr.count("before it was ready; forking a new one in") == 3
    assert "before it was ready, 4 times in a row; giving up" in result.stderr


def test_a_worker_without_its_store_exits_with_an_error_for_its_supervisor(tmp_path, scripted_llm):
    env = {
        **os.environ,
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "RAGTOPICS_DATA_DIR": str(tmp_path / "var"),
        "LLM_BASE_URL": scripted_llm.base_url,
        "LLM_MODEL": "scripted",
    }
    result = subprocess.run(
        [sys.executable, "-m", "ragtopics.ui.cli", "worker"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "error:" in result.stderr and "exited with status 2" in result.stderr
