"""``ragtopics up`` supervision: backoff, restarts in dependency order, one clear stop instead of a restart loop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis

from ragtopics.errors import StoreUnavailableError
from ragtopics.ops.redis_server import EmbeddedRedis
from ragtopics.ops.supervisor import (
    EmbeddedRedisComponent,
    ExternalRedisComponent,
    RestartPolicy,
    WorkerComponent,
    supervise,
    worker_environment,
)
from ragtopics.settings.env import Settings
from tests.conftest import free_port


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_restart_delays_double_up_to_the_cap():
    clock = FakeClock()
    policy = RestartPolicy(initial_delay_s=1, max_delay_s=10, max_restarts=10, window_s=600, clock=clock)
    delays = []
    for _ in range(6):
        policy.record_failure()
        delays.append(policy.next_delay_s())
    assert delays == [1, 2, 4, 8, 10, 10]


def test_too_many_failures_within_the_window_give_up_but_old_ones_are_forgotten():
    clock = FakeClock()
    policy = RestartPolicy(max_restarts=3, window_s=60, clock=clock)
    for _ in range(3):
        policy.record_failure()
        clock.now += 5
    assert not policy.should_give_up()
    clock.now += 60  # all three are now older than the window
    policy.record_failure()
    assert not policy.should_give_up() and policy.next_delay_s() == policy.initial_delay_s
    for _ in range(3):
        policy.record_failure()
    assert policy.should_give_up()


class Flaky:
    """A component that is down and whose start always fails (or works after ``fails`` tries)."""

    def __init__(self, name: str, fails: int = 10**6, running: bool = False):
        self.name, self.fails, self.running, self.starts = name, fails, running, 0

    def start(self) -> None:
        self.starts += 1
        if self.starts <= self.fails:
            raise StoreUnavailableError(f"{self.name} will not start")
        self.running = True

    def is_running(self) -> bool:
        return self.running

    def describe_failure(self) -> str:
        return "down"

    def stop(self) -> None:
        self.running = False


def fast() -> RestartPolicy:
    return RestartPolicy(initial_delay_s=0.01, max_delay_s=0.05, max_restarts=3, window_s=60)


def test_a_component_that_keeps_failing_stops_supervision_with_one_message():
    store, worker = Flaky("Redis"), Flaky("the worker", running=True)
    t0 = time.monotonic()
    message = supervise([store, worker], threading.Event(), policy=fast, poll_s=0.01)
    assert time.monotonic() - t0 < 5
    assert message.startswith("Redis stopped 4 times within 60 s") and "stopping every component" in message
    assert worker.starts == 0  # never restarted against a dead dependency


def test_a_component_that_comes_back_is_supervised_on():
    store = Flaky("Redis", fails=2)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    assert supervise([store], stop, policy=fast, poll_s=0.01) is None
    assert store.running and store.starts == 3


@pytest.fixture
def stack(tmp_path):
    """An embedded Redis and a real worker process started the way ``ragtopics up`` starts them."""
    server = EmbeddedRedis(tmp_path / "redis", free_port()).start()
    settings = Settings(
        RAGTOPICS_DATA_DIR=tmp_path / "var",
        EMBEDDED_REDIS_PORT=server.port,
        RQ_QUEUE="supervised",
        LOG_LEVEL="WARNING",
        _env_file=None,
    )
    worker = WorkerComponent(settings, cwd=tmp_path)
    worker.start()
    yield server, worker
    worker.stop()
    server.stop()


def test_a_killed_embedded_redis_is_restarted_within_bounded_time(stack):
    server, worker = stack
    stop = threading.Event()
    result: list = []
    thread = threading.Thread(
        target=lambda: result.append(supervise([EmbeddedRedisComponent(server), worker], stop, policy=fast, poll_s=0.1)),
        daemon=True,
    )
    thread.start()
    client = redis.Redis(host="127.0.0.1", port=server.port, socket_connect_timeout=0.5)
    client.execute_command("CONFIG", "SET", "appendfsync", "always")
    client.set("kept", "yes")
    killed = server.process.pid
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (server.process.pid != killed and _answers(client)):
        time.sleep(0.1)
    try:
        assert server.process.pid != killed and _answers(client), "the embedded Redis was not restarted within 30 s"
        assert client.get("kept") == b"yes"  # same data directory
        time.sleep(0.5)
        assert thread.is_alive() and not result  # still supervising, not given up
    finally:
        stop.set()
        thread.join(timeout=10)
    assert result == [None]


def test_a_dead_external_redis_stops_everything_with_one_message(tmp_path):
    dead = ExternalRedisComponent(f"redis://127.0.0.1:{free_port()}/0")
    worker = Flaky("the worker", running=True)
    t0 = time.monotonic()
    message = supervise([dead, worker], threading.Event(), policy=fast, poll_s=0.05)
    assert time.monotonic() - t0 < 30
    assert message.startswith("Redis stopped") and "does not answer" in message and worker.starts == 0


def test_the_worker_runs_this_code_on_this_data_whatever_its_directory(tmp_path, redis_server):
    settings = Settings(RAGTOPICS_DATA_DIR=tmp_path / "var", REDIS_URL=redis_server.url, _env_file=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".env").write_text("RAGTOPICS_DATA_DIR=/nonexistent\nREDIS_URL=redis://10.0.0.1:1/0\n")
    probe = (
        "import ragtopics; from ragtopics.settings.env import Settings; s = Settings(); "
        "print(ragtopics.__file__); print(s.data_dir.resolve()); print(s.effective_redis_url)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=elsewhere, env=worker_environment(settings), capture_output=True, text=True, check=True
    ).stdout.split("\n")
    import ragtopics

    assert out[:3] == [ragtopics.__file__, str((tmp_path / "var").resolve()), redis_server.url]


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
