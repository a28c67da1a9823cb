"""What the fault tests share: a real worker process to start and kill, and waiting for a condition."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlmodel import select

from ragtopics.settings.env import Settings
from ragtopics.storage.metadata import DocumentRow

ROOT = Path(__file__).resolve().parents[2]


def start_worker(
    settings: Settings, llm_base_url: str, log: Path | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``ragtopics worker`` on the settings' Redis, data folder and queue, the model at ``llm_base_url``.

    It runs in a session of its own, so a kill takes rq's scheduler process with it, as a container
    stop would; its output goes to ``log`` (appended) or nowhere. Its rq heartbeat comes every second,
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


def kill(worker: subprocess.Popen) -> None:
    """SIGKILL the worker's whole session and reap it."""
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)


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
