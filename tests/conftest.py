"""Shared fixtures: a throwaway embedded Redis, the scripted model server, a runtime per test."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from pathlib import Path

import pytest
from rq import SimpleWorker

from ragtopics.jobs.queue import queue_for
from ragtopics.llm.embedding import LocalEmbedder
from ragtopics.llm.gateway import ModelGateway
from ragtopics.ops.redis_server import EmbeddedRedis
from ragtopics.runtime import Runtime, set_runtime
from ragtopics.settings.env import Settings
from tests.scripted_llm import ScriptedLLM

EVAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "eval" / "hotpotqa"
if not EVAL_DIR.exists():  # a clone next to shared/, or shared/ inside the repository
    EVAL_DIR = Path(__file__).resolve().parents[1] / "shared" / "eval" / "hotpotqa"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), free_port()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def scripted_llm():
    server = ScriptedLLM().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def embedder():
    model = LocalEmbedder()
    model.load()
    return model


@pytest.fixture(autouse=True)
def _redis_alive(request):
    """Restart the session's Redis if an earlier test left it dead (a crash in a module), so that one crash
    fails the test it happened in, not every test after it. The restart is said in the log, not hidden."""
    if "redis_server" not in request.fixturenames:
        return
    server = request.getfixturevalue("redis_server")
    if server.process is not None and server.process.poll() is not None:
        logging.getLogger(__name__).error(
            "the test Redis had died (exit %s; see %s); restarting it", server.process.returncode, server.data_dir / "redis.log"
        )
        server.start()


@pytest.fixture
def settings(tmp_path, redis_server, scripted_llm) -> Settings:
    return Settings(
        RAGTOPICS_DATA_DIR=tmp_path / "var",
        REDIS_URL=redis_server.url,
        LLM_BASE_URL=scripted_llm.base_url,
        LLM_MODEL="scripted",
        LLM_TIMEOUT_S=10,
        RQ_QUEUE=f"test-{tmp_path.name}",
        _env_file=None,
    )


@contextlib.contextmanager
def active_runtime(settings, embedder, scripted_llm):
    """A runtime on ``settings`` with Redis flushed, the shared embedder and a reset scripted model, made the
    process-wide runtime for the block."""
    runtime = Runtime(settings)
    runtime.redis.flushall()
    runtime._gateway = ModelGateway(settings, embedder=embedder)
    scripted_llm.reset()
    set_runtime(runtime)
    try:
        yield runtime
    finally:
        set_runtime(None)


@pytest.fixture
def rt(settings, embedder, redis_server, scripted_llm):
    """A runtime on a flushed Redis and a fresh data dir; also the process-wide runtime."""
    with active_runtime(settings, embedder, scripted_llm) as runtime:
        yield runtime


@pytest.fixture
def reconfigure(rt, settings, embedder):
    """``reconfigure(LLM_SUPPORTS_TOOLS=True, ...)``: the runtime with changed environment settings."""

    def apply(**changes) -> Runtime:
        new = Settings(**{**settings.model_dump(by_alias=True), **changes}, _env_file=None)
        rt.settings = new
        rt._gateway = ModelGateway(new, embedder=embedder)
        return rt

    return apply


@pytest.fixture
def run_jobs(rt):
    """Run every queued job through a real RQ worker (in this process), then return."""

    def run() -> None:
        SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, logging_level="WARNING")

    return run


@pytest.fixture(scope="session")
def hotpot():
    corpus = json.loads((EVAL_DIR / "corpus.json").read_text())
    questions = json.loads((EVAL_DIR / "questions.json").read_text())
    return corpus, questions
