"""``ragtopics up``: start every component, serve the console, and stop them all on Ctrl-C.

Order: embedded Redis (unless ``REDIS_URL``), the bundled model server (unless
``LLM_BASE_URL``), one worker process, then the console. Each is stopped in reverse
order on Ctrl-C or SIGTERM.

While the console serves, :func:`supervise` watches Redis and the worker. A stopped
component is restarted after an exponential, capped backoff (:class:`RestartPolicy`),
in dependency order (the worker only once Redis answers). An external Redis cannot
be restarted; it is re-checked on the same schedule. When a component fails
:attr:`RestartPolicy.max_restarts` times within :attr:`RestartPolicy.window_s`,
everything is stopped with one message instead of restarting forever against a
dead dependency.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import redis

import ragtopics
from ragtopics.errors import RagTopicsError, StoreUnavailableError
from ragtopics.llm.local_server import LocalModelServer
from ragtopics.ops.redis_server import EmbeddedRedis, RedisStartError
from ragtopics.runtime import Runtime, set_runtime
from ragtopics.settings.env import Settings, get_settings

log = logging.getLogger(__name__)

#: How often :func:`supervise` looks at the components, in seconds.
POLL_S = 1.0


@dataclass
class RestartPolicy:
    """Backoff and give-up rule for one supervised component.

    After the n-th failure within the window, the next restart waits
    ``initial_delay_s * 2**(n-1)`` seconds, at most ``max_delay_s``. Failures older than
    ``window_s`` are forgotten, so a component that crashes once a day is always restarted.

    Attributes:
        initial_delay_s: wait before the first restart, in seconds.
        max_delay_s: cap on one wait, in seconds.
        max_restarts: failures tolerated within the window; one more gives up.
        window_s: how far back failures count, in seconds.
        clock: monotonic seconds (a fake in tests).
    """

    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_restarts: int = 5
    window_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    _failures: list[float] = field(default_factory=list)

    def record_failure(self) -> None:
        """Note that the component stopped (or failed to start) now."""
        now = self.clock()
        self._failures = [t for t in self._failures if now - t < self.window_s] + [now]

    def recent_failures(self) -> int:
        """Failures within the window."""
        now = self.clock()
        return sum(1 for t in self._failures if now - t < self.window_s)

    def next_delay_s(self) -> float:
        """Seconds to wait before the next restart (0 when nothing failed recently)."""
        n = self.recent_failures()
        return 0.0 if n == 0 else min(self.max_delay_s, self.initial_delay_s * 2 ** (n - 1))

    def should_give_up(self) -> bool:
        """Whether the component failed more than ``max_restarts`` times within the window."""
        return self.recent_failures() > self.max_restarts


class Component(Protocol):
    """A supervised piece of the stack."""

    name: str

    def start(self) -> None:
        """Start (or, for what cannot be started, re-check) the component; raises RagTopicsError or RedisStartError."""

    def is_running(self) -> bool:
        """Whether the component is up now."""

    def describe_failure(self) -> str:
        """Why it stopped, for the operator (exit code, URL)."""

    def stop(self) -> None:
        """Stop it (a no-op when it is not running or not ours)."""


class EmbeddedRedisComponent:
    """The embedded Redis: restarted on the same port and data directory (AOF keeps the data)."""

    name = "the embedded Redis"

    def __init__(self, server: EmbeddedRedis):
        self.server = server

    def start(self) -> None:
        self.server.start()

    def is_running(self) -> bool:
        return self.server.process is not None and self.server.process.poll() is None

    def describe_failure(self) -> str:
        code = self.server.process.returncode if self.server.process is not None else None
        return f"exit code {code}; see {self.server.data_dir / 'redis.log'}"

    def stop(self) -> None:
        self.server.stop()


class ExternalRedisComponent:
    """A Redis at ``REDIS_URL``: not ours to restart, so ``start`` re-checks that it answers."""

    name = "Redis"

    def __init__(self, url: str):
        self.url = url
        self._client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)

    def start(self) -> None:
        if not self.is_running():
            raise StoreUnavailableError(f"Redis at {self.url} does not answer")

    def is_running(self) -> bool:
        try:
            return bool(self._client.ping())
        except redis.RedisError:
            return False

    def describe_failure(self) -> str:
        return f"{self.url} does not answer"

    def stop(self) -> None:
        pass


class WorkerComponent:
    """One ``ragtopics worker`` process running exactly this installation's code on this data directory.

    The process is the worker launcher (:mod:`ragtopics.worker.launcher`): it replaces a killed worker
    process by itself, in about a second, and exits when its worker process exits by itself (a stop, an
    error); that exit is what :func:`supervise` sees and restarts after its backoff.

    Args:
        settings: the supervisor's settings; the worker gets their data directory, Redis
            URL and queue explicitly in its environment.
        cwd: the worker's working directory (the supervisor's, captured at start, so it reads the same ``.env``).
        command: the command line; defaults to :func:`worker_command`.
    """

    name = "the worker"

    def __init__(self, settings: Settings, *, cwd: Path, command: Sequence[str] | None = None):
        self.env = worker_environment(settings)
        self.cwd = cwd
        self.command = list(command or worker_command())
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def describe_failure(self) -> str:
        return f"exit code {self.process.returncode if self.process is not None else None}"

    def stop(self) -> None:
        if self.process is not None:
            _stop_process(self.process)


def worker_command() -> list[str]:
    """``[sys.executable, "-m", "ragtopics.ui.cli", "worker"]``: this interpreter, this package."""
    return [sys.executable, "-m", "ragtopics.ui.cli", "worker"]


def worker_environment(settings: Settings) -> dict[str, str]:
    """The worker's environment: ours, plus this package first on ``PYTHONPATH`` and the settings that must match.

    ``RAGTOPICS_DATA_DIR`` is absolute and ``REDIS_URL`` explicit, so the worker uses
    the supervisor's data and Redis whatever its working directory or ``.env``.
    """
    package_root = str(Path(ragtopics.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": package_root + (os.pathsep + path if path else ""),
        "RAGTOPICS_DATA_DIR": str(settings.data_dir.resolve()),
        "REDIS_URL": settings.effective_redis_url,
        "RQ_QUEUE": settings.queue_name,
    }


def supervise(
    components: Sequence[Component],
    stop: threading.Event,
    *,
    policy: Callable[[], RestartPolicy] = RestartPolicy,
    poll_s: float = POLL_S,
) -> str | None:
    """Keep ``components`` running until ``stop`` is set or one keeps failing.

    Components are in dependency order: while one is down, those after it are left
    alone (a worker restarted against a dead Redis would only crash again).

    Args:
        components: the started components, dependencies first.
        stop: set to end supervision (Ctrl-C, SIGTERM).
        policy: makes one :class:`RestartPolicy` per component.
        poll_s: seconds between checks.

    Returns:
        None when ``stop`` was set; else the message saying which component failed too often.
    """
    policies = {c.name: policy() for c in components}
    due: dict[str, float] = {}  # component name → monotonic time of its next restart
    while not stop.wait(poll_s):
        for component in components:
            if component.is_running():
                due.pop(component.name, None)  # an external Redis may come back by itself
                continue
            gave_up = _restart_when_due(component, policies[component.name], due)
            if gave_up:
                return gave_up
            break  # the rest depend on this one: leave them until it runs again
    return None


def _restart_when_due(component: Component, policy: RestartPolicy, due: dict[str, float]) -> str | None:
    """One step for a component that is down: schedule its restart, or restart it when due; the give-up message."""
    now = time.monotonic()
    if component.name not in due:
        policy.record_failure()
        if policy.should_give_up():
            return _give_up_message(component, policy)
        due[component.name] = now + policy.next_delay_s()
        log.error("%s stopped (%s); restarting in %.0f s", component.name, component.describe_failure(), policy.next_delay_s())
        return None
    if now < due[component.name]:
        return None
    try:
        component.start()
        del due[component.name]
        log.warning("%s restarted", component.name)
    except (RagTopicsError, RedisStartError, OSError) as exc:
        policy.record_failure()
        if policy.should_give_up():
            return _give_up_message(component, policy, exc)
        due[component.name] = now + policy.next_delay_s()
        log.error("%s did not restart (%s); next try in %.0f s", component.name, exc, policy.next_delay_s())
    return None


def _give_up_message(component: Component, policy: RestartPolicy, exc: BaseException | None = None) -> str:
    reason = str(exc) if exc is not None else component.describe_failure()
    return (
        f"{component.name} stopped {policy.recent_failures()} times within {policy.window_s:.0f} s "
        f"(last: {reason}); stopping every component"
    )


def run_stack() -> int:
    """Run the whole product in the foreground; returns the exit status (1 when a component kept failing)."""
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    stoppers: list = []
    components: list[Component] = []
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if settings.is_redis_embedded:
            server = EmbeddedRedis(
                settings.data_dir / "redis", settings.embedded_redis_port, query_timeout_ms=settings.redis_query_timeout_ms
            ).start()
            components.append(EmbeddedRedisComponent(server))
            stoppers.append(server.stop)
        else:
            components.append(ExternalRedisComponent(settings.effective_redis_url))
        rt = Runtime(settings)
        rt.check_store()
        set_runtime(rt)
        if settings.is_llm_local:
            model = LocalModelServer(settings).start()
            stoppers.append(model.stop)
        # Load the embedding model now, so the first question does not wait for it.
        threading.Thread(target=getattr(rt.gateway.embedder, "load", lambda: None), daemon=True).start()
        worker = WorkerComponent(settings, cwd=Path.cwd().resolve())
        worker.start()
        components.append(worker)
        stoppers.append(worker.stop)
        # deferred: the console's API (api.health) imports ops.redis_server at module level
        from ragtopics.ui.app import launch_console

        app, local_url, share_url = launch_console(rt, host=settings.host, port=settings.port, share=settings.share, freeze=True)
        stoppers.append(app.close)
        print(f"ragtopics console: {local_url}" + (f"  (shared: {share_url})" if share_url else ""), flush=True)
        print(f"MCP server (every Topic as a tool): {local_url}gradio_api/mcp/", flush=True)
        print("Ctrl-C stops every component.", flush=True)
        gave_up = supervise(components, stop)
        if gave_up:
            log.error("%s", gave_up)
            print(f"error: {gave_up}", file=sys.stderr, flush=True)
            return 1
        return 0
    except KeyboardInterrupt:
        return 0
    except (RagTopicsError, RedisStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        for stop_fn in reversed(stoppers):
            try:
                stop_fn()
            except Exception:  # keep stopping the rest
                log.exception("while stopping")
        print("stopped.", flush=True)


def _stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
