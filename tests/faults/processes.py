"""What the fault tests share: a real worker process to start and kill, and waiting for a condition."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rq.worker import Worker
from sqlmodel import select

from ragtopics.settings.env import Settings
from ragtopics.storage.metadata import DocumentRow

ROOT = Path(__file__).resolve().parents[2]


def start_worker(
    settings: Settings, llm_base_url: str, log: Path | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``ragtopics worker`` on the settings' Redis, data folder and queue, the model at ``llm_base_url``.

    The process started is the worker launcher (:mod:`ragtopics.worker.launcher`); the worker process rq
    lists is its child (:func:`worker_processes`). It runs in a session of its own, so :func:`kill` takes
    the worker process and rq's scheduler process with it, as a container stop would; its output goes to
    ``log`` (appended) or nowhere. Its rq heartbeat comes every second,
    so a killed worker's job is abandoned, in rq's terms, three seconds after the kill and queued again by
    the next maintenance pass. ``extra_env`` adds or overrides variables (another store, say).
    """
    env = {
        **os.environ,
        "REDIS_URL": settings.effective_redis_url,
        "RAGTOPICS_DATA_DIR": str(settings.data_dir),
        "RQ_QUEUE": settings.queue_name,
        "LOG_LEVEL": "WARNING",
        "LLM_BASE_URL": llm_base_url,
        "LLM_MODEL": "scripted",
        "WORKER_HEARTBEAT_S": "1",
        **(extra_env or {}),
    }
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        [sys.executable, "-m", "ragtopics.ui.cli", "worker"], cwd=ROOT, env=env, start_new_session=True, stdout=out, stderr=out
    )


def session_processes(session: int) -> dict[int, int]:
    """The live processes (not zombies) of a session, as ``{pid: parent pid}``, read from ``/proc`` (Linux)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while being read
            continue
        state, ppid, _group, sid = stat[stat.rindex(")") + 2 :].split()[:4]
        if int(sid) == session and state != "Z":
            found[int(entry.name)] = int(ppid)
    return found


def kill(worker: subprocess.Popen) -> None:
    """SIGKILL the worker's whole session (its launcher, the worker process it forked, rq's scheduler) and reap it.

    A cold stop, as a container's or a machine's: nothing of it gets to finish its job.
    """
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except ProcessLookupError:  # the launcher had exited; what it forked may still run
        pass
    worker.wait(timeout=30)
    for _ in range(100):
        left = session_processes(worker.pid)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    raise AssertionError(f"processes of the worker's session outlived SIGKILL: {session_processes(worker.pid)}")


def worker_processes(rt, launcher: subprocess.Popen) -> list[int]:
    """The worker processes rq lists (by process id) that ``launcher`` (from :func:`start_worker`) forked and that still run."""
    mine = session_processes(launcher.pid)
    return [w.pid for w in Worker.all(connection=rt.redis) if w.pid in mine and mine[w.pid] == launcher.pid]


def wait_for(condition, timeout_s: float) -> bool:
    """Poll ``condition()`` every 20 ms until it is true (True) or ``timeout_s`` passed (False); an error
    while asking (Redis down or restarting) counts as not yet."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except Exception:
            pass
        time.sleep(0.02)
    return False


def document_rows(rt, topic_id: str) -> list[DocumentRow]:
    """A Topic's document rows as stored (with the hash of the version each has indexed)."""
    with rt.metadata.session() as s:
        return list(s.exec(select(DocumentRow).where(DocumentRow.topic_id == topic_id)).all())
