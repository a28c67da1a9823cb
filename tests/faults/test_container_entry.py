"""The container's entry point (``ragtopics up``, the Dockerfile's CMD) as a plain process with the container's
environment: every component starts, the console listens on all interfaces with login required, and Ctrl-C
(SIGINT, what ``docker stop`` sends first as SIGTERM's gentle twin) stops everything cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from tests.conftest import free_port
from tests.faults.processes import wait_for

pytestmark = pytest.mark.faults


def test_ragtopics_up_serves_all_interfaces_with_login_and_stops_on_ctrl_c(tmp_path, scripted_llm):
    port = free_port()
    env = {
        **os.environ,
        "RAGTOPICS_DATA_DIR": str(tmp_path / "data"),
        "HOST": "0.0.0.0",
        "PORT": str(port),
        "EMBEDDED_REDIS_PORT": str(free_port()),
        "LLM_BASE_URL": scripted_llm.base_url,
        "LLM_MODEL": "scripted",
        "ADMIN_USERNAME": "admin",
        "ADMIN_PASSWORD": "a long password",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("REDIS_URL", None)
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ragtopics.ui.cli", "up"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        assert wait_for(lambda: "ragtopics console:" in log.read_text(), 180), log.read_text()
        text = log.read_text()
        assert "Created the admin 'admin' from ADMIN_USERNAME." in text and "MCP server" in text
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/config", timeout=30).status_code == 401  # all interfaces, so login is required
        with httpx.Client(base_url=url, timeout=30) as client:
            assert (
                client.post("/login", data={"username": "admin", "password": "a long password", "next": "/"}).status_code == 303
            )
            assert client.get("/config").status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=90)
    assert code == 0 and log.read_text().rstrip().endswith("stopped."), log.read_text()[-2000:]
    assert (tmp_path / "data" / "ragtopics.db").exists() and (tmp_path / "data" / "redis").is_dir()  # data on the volume
