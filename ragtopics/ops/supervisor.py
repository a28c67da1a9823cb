"""``ragtopics up``: start every component, serve the console, and stop them all on Ctrl-C.

Order: embedded Redis (unless ``REDIS_URL``), the bundled model server (unless
``LLM_BASE_URL``), one worker process, then the console. Each is stopped in reverse
order on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

from ragtopics.settings.env import get_settings
from ragtopics.errors import RagTopicsError
from ragtopics.runtime import Runtime, set_runtime
from ragtopics.ops.redis_server import EmbeddedRedis, RedisStartError

log = logging.getLogger(__name__)


def run_stack() -> int:
    """Run the whole product in the foreground; returns the exit status."""
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    stoppers: list = []
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if settings.is_redis_embedded:
            server = EmbeddedRedis(settings.data_dir / "redis", settings.embedded_redis_port,
                                   query_timeout_ms=settings.redis_query_timeout_ms).start()  # fmt: skip
            stoppers.append(server.stop)
        rt = Runtime(settings)
        rt.check_store()
        set_runtime(rt)
        if settings.is_llm_local:
            from ragtopics.llm.local_server import LocalModelServer

            model = LocalModelServer(settings).start()
            stoppers.append(model.stop)
        # Load the embedding model now, so the first question does not wait for it.
        threading.Thread(target=getattr(rt.gateway.embedder, "load", lambda: None), daemon=True).start()
        worker = [_start_worker()]  # a list, so the stopper sees a restarted worker too
        stoppers.append(lambda: _stop_process(worker[0]))
        from ragtopics.ui.app import launch_console

        app, local_url, share_url = launch_console(rt, host=settings.host, port=settings.port, share=settings.share)
        stoppers.append(app.close)
        print(f"ragtopics console: {local_url}" + (f"  (shared: {share_url})" if share_url else ""), flush=True)
        print(f"MCP server (every Topic as a tool): {local_url}gradio_api/mcp/", flush=True)
        print("Ctrl-C stops every component.", flush=True)
        while not stop.wait(1.0):
            if worker[0].poll() is not None:
                log.error("the worker exited with code %s; restarting it", worker[0].returncode)
                worker[0] = _start_worker()
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


def _start_worker() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ragtopics.ui.cli", "worker"], env=os.environ.copy())


def _stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
