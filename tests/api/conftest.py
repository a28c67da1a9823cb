"""Fixtures of the HTTP API tests: the real console on a loopback port, its users, and a Topic with a file."""

from __future__ import annotations

import pytest

from ragtopics.topics.topics import create_topic
from ragtopics.ui.app import launch_console
from tests.conftest import free_port
from tests.ingest.test_ingest import upload
from tests.ui.test_access import PASSWORD, people  # noqa: F401 - the console's users (ada, otto, vic), a fixture


@pytest.fixture
def kettles(rt, run_jobs):
    """A RAG Topic "Kettles" with one indexed file, kettles.txt."""
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees. Descale it every month.")
    run_jobs()
    return topic


@pytest.fixture
def secured(people):
    """The console with login required, serving on a free loopback port: ``(server, base URL)``."""
    server, url, _ = launch_console(people, host="127.0.0.1", port=free_port(), mcp=False)
    yield server, url
    server.close()
