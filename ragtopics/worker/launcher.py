"""The worker launcher: import the heavy libraries once, fork the rq worker, fork a fresh one when it is killed.

A worker's start is mostly imports: sentence-transformers with torch, transformers and scikit-learn, and
the product's own modules, about 8 CPU seconds on 2 cores, against 0.2 for building the embedding model
from its files once they are imported. ``ragtopics worker`` therefore runs as two processes, as
gunicorn's ``--preload`` does for web workers:

- the **launcher** imports those libraries (:func:`preload`) and nothing else: it starts no thread of its
  own, opens no connection, loads no model and runs no torch operation (a torch/OpenMP thread pool
  started before a fork leaves the child's pool unusable; the BLAS pools numpy and scipy start at import
  are rebuilt by OpenBLAS's own fork handler);
- the **worker process** is forked from it: it loads the model, connects to Redis and the metadata
  store, runs the start-up recoveries and then rq's loop (:func:`~ragtopics.worker.main.run_worker`).
  rq lists this process, and the locks its jobs take name it.

When the worker process is killed (SIGKILL, the out-of-memory killer, a crash of native code), the
launcher forks a new one at once, which starts in about a second instead of a cold start's ten or more.
Nothing about exactly-once changes: the new process is a new rq worker, the dead one's job is abandoned
in rq's terms and queued again by the recoveries, as after any kill. When the worker process exits by
itself (a stop, a finished ``--burst``, an error such as Redis not answering), the launcher exits with
its status, so a supervisor (``ragtopics up``, a container's restart policy) sees the failure as before.
A worker process killed before it was ready (it had not started listening) is forked again after a
pause that doubles from :data:`FIRST_PAUSE_S` up to :data:`MAX_PAUSE_S`; after :data:`MAX_EARLY_DEATHS`
such deaths in a row the launcher gives up (exit status 1).

SIGINT and SIGTERM to the launcher are passed on to the worker process (rq's warm shutdown: it finishes
its job; a second one is rq's cold shutdown). The worker process has a process group of its own, so a
Ctrl-C in a terminal reaches it once, through the launcher. On Linux every process forked from the
launcher, and from the worker process (rq's scheduler), gets SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``), so a killed launcher leaves no worker behind and a killed worker no scheduler.

rq's own ``WorkerPool`` forks workers too, but forks a new one once a second whatever ended the last
(also an error that only a supervisor can act on), and builds plain rq workers; the product's worker
runs its recoveries first and is a :class:`~ragtopics.worker.main.ProductWorker`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import ragtopics.worker.jobs  # noqa: F401 - the job functions: imported once here, not in every worker process
from ragtopics.errors import RagTopicsError
from ragtopics.llm.gateway import build_embedder
from ragtopics.settings.env import Settings
from ragtopics.storage.migrate import head_revision
from ragtopics.worker.main import run_worker

log = logging.getLogger(__name__)

#: Pause before forking again after a worker process died before it was ready, in seconds (then doubled).
FIRST_PAUSE_S = 0.5
#: Longest pause between two such forks, in seconds.
MAX_PAUSE_S = 30.0
#: Worker processes in a row that may die before they are ready; one more and the launcher gives up.
MAX_EARLY_DEATHS = 5
#: ``prctl`` option that sets the signal a process gets when its parent dies (Linux, ``<linux/prctl.h>``).
_PR_SET_PDEATHSIG = 1

#: The worker process's body: gets a function to call once it is ready (listening), returns an exit status.
Target = Callable[[Callable[[], None]], int]


def preload(settings: Settings) -> None:
    """Import what every worker process needs, in the launcher, without starting anything.

    The product's worker and job modules are imported with this module; this adds Alembic and the newest
    revision among the migration scripts (:func:`~ragtopics.storage.migrate.head_revision`, read from the
    package's files, which every worker process compares with its database's at start: 3 s of a warm start
    at a load average of 16) and, when the embedder is the bundled model, the libraries it runs on and the
    class of its model (:meth:`~ragtopics.llm.embedding.Embedder.import_libraries`).

    Args:
        settings: the worker's settings (they say which embedder it uses).

    Raises:
        ModelUnavailableError: the bundled model's package is missing.
    """
    head_revision()
    build_embedder(settings).import_libraries()
    if threading.active_count() > 1:  # a Python thread would be lost in the fork with whatever lock it held
        log.warning("%d threads run in the worker launcher after its imports; a forked worker may hang", threading.active_count())


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the calling process get ``sig`` when its parent dies (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing).

    Called in a freshly forked child. When the parent died before the call, the signal is sent at once.

    Args:
        sig: the signal to get.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = _parent_at_fork
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            log.warning("no signal on the parent's death: prctl failed with errno %d", ctypes.get_errno())
            return
    except (OSError, AttributeError) as exc:
        log.warning("no signal on the parent's death: %s", exc)
        return
    if parent is not None and os.getppid() != parent:  # the parent died between the fork and prctl
        os.kill(os.getpid(), sig)


_parent_at_fork: int | None = None


def _remember_parent() -> None:
    global _parent_at_fork
    _parent_at_fork = os.getpid()


class Launcher:
    """Fork a worker process and fork a new one whenever it is killed (see the module docstring).

    Args:
        target: the worker process's body (see :data:`Target`); it runs in the forked process, whose
            exit status is its return value (2 for a :class:`~ragtopics.errors.RagTopicsError`, 1 for
            another exception, 130 for Ctrl-C).
        first_pause_s: pause after the first worker process that died before it was ready, in seconds.
        max_pause_s: longest such pause, in seconds.
        max_early_deaths: worker processes in a row that may die before they are ready.

    Attributes:
        pid: the current worker process's id (None before the first fork and after the end).
        restarts: worker processes forked after one was killed.
    """

    def __init__(
        self,
        target: Target,
        *,
        first_pause_s: float = FIRST_PAUSE_S,
        max_pause_s: float = MAX_PAUSE_S,
        max_early_deaths: int = MAX_EARLY_DEATHS,
    ):
        self.target = target
        self.first_pause_s, self.max_pause_s, self.max_early_deaths = first_pause_s, max_pause_s, max_early_deaths
        self.pid: int | None = None
        self.restarts = 0
        self._stopping = False

    def run(self) -> int:
        """Run worker processes until one exits by itself or the launcher is stopped; returns the exit status.

        Returns:
            The last worker process's exit status when it exited; 128 + the signal number when it was killed
            while the launcher was stopping; 1 when :attr:`max_early_deaths` were exceeded.
        """
        os.register_at_fork(before=_remember_parent, after_in_child=die_with_parent)
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop_signal, self._pass_on)
        early_deaths = 0
        while True:
            started = time.monotonic()
            pid, ready = self._fork()
            if self._stopping:  # a stop came before the worker process's id was known: pass it on now
                self._pass_on(signal.SIGTERM, None)
            status = self._wait(pid)
            was_ready = _read_ready(ready)
            self.pid = None
            if os.WIFEXITED(status):
                code = os.WEXITSTATUS(status)
                log.log(logging.INFO if code == 0 else logging.ERROR, "worker process %d exited with status %d", pid, code)
                return code
            sig = os.WTERMSIG(status)
            if self._stopping:
                return 128 + sig
            lived_s = time.monotonic() - started
            if was_ready:
                early_deaths = 0
                log.warning("worker process %d was killed (%s) after %.0f s; forking a new one", pid, _name(sig), lived_s)
            else:
                early_deaths += 1
                if early_deaths > self.max_early_deaths:
                    log.error(
                        "worker process %d was killed (%s) before it was ready, %d times in a row; giving up",
                        pid,
                        _name(sig),
                        early_deaths,
                    )
                    return 1
                pause_s = min(self.max_pause_s, self.first_pause_s * 2 ** (early_deaths - 1))
                log.warning(
                    "worker process %d was killed (%s) before it was ready; forking a new one in %.1f s", pid, _name(sig), pause_s
                )
                if not self._pause(pause_s):
                    return 128 + sig
            self.restarts += 1

    def _fork(self) -> tuple[int, int]:
        """Fork the worker process; returns its id and the read end of its readiness pipe."""
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker process: never returns
            os.close(ready_read)
            _run_child(self.target, ready_write)
        os.close(ready_write)
        self.pid = pid
        return pid, ready_read

    def _wait(self, pid: int) -> int:
        """Wait for the worker process to end; reaps any other child meanwhile (as process 1 of a container must)."""
        while True:
            ended, status = os.waitpid(-1, 0)
            if ended == pid:
                return status

    def _pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless a stop comes first; whether to go on."""
        deadline = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < deadline:
            time.sleep(min(0.1, deadline - time.monotonic()))
        return not self._stopping

    def _pass_on(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT/SIGTERM: stop forking and pass the signal on to the worker process."""
        self._stopping = True
        if self.pid is not None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # it ended meanwhile; the wait reaps it
                pass


def _run_child(target: Target, ready_write: int) -> None:
    """The worker process's side of a fork: run ``target`` and exit with its status (never returns)."""
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own: a terminal's Ctrl-C reaches it once, through the launcher
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

        def ready() -> None:
            try:
                os.write(ready_write, b"1")
            finally:
                os.close(ready_write)

        code = target(ready)
    except RagTopicsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        log.exception("the worker process failed")
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream: nothing more to say
                pass
        os._exit(code)


def _read_ready(ready_read: int) -> bool:
    """Whether the ended worker process said it was ready (a byte in its pipe); closes the pipe."""
    try:
        os.set_blocking(ready_read, False)
        return os.read(ready_read, 1) == b"1"
    except BlockingIOError:  # a grandchild still holds the write end and nothing was written
        return False
    finally:
        os.close(ready_read)


def _name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def run_launcher(settings: Settings, *, burst: bool = False) -> int:
    """``ragtopics worker``: preload, then run worker processes under a :class:`Launcher`; the exit status.

    Where ``os.fork`` does not exist, the worker runs in this process instead (no launcher).

    Args:
        settings: the worker's settings.
        burst: each worker process exits when the queue is empty (and the launcher with it).

    Raises:
        StoreUnavailableError: only without a launcher, when Redis is unreachable or lacks a module.
    """
    if not hasattr(os, "fork"):
        run_worker(burst=burst)
        return 0
    started = time.process_time()
    preload(settings)
    log.info("worker launcher %d: libraries imported in %.1f CPU s", os.getpid(), time.process_time() - started)

    def worker(ready: Callable[[], None]) -> int:
        run_worker(burst=burst, ready=ready)
        return 0

    return Launcher(worker).run()
