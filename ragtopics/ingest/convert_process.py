"""A long-lived child process that runs document conversions, so that one which overruns is really stopped.

Python can not stop a thread, so a conversion that runs past its timeout in a thread
keeps the worker's CPU and memory until it ends on its own. Here it runs in a child
process instead: on a timeout the child gets SIGTERM, then SIGKILL, and is gone.

Starting the child costs what importing docling costs (~3-10 s: torch), so one child
is kept and fed conversion after conversion through a pipe; it is started ("warmed")
before a conversion's clock starts, and replaced lazily, on the next conversion,
after a timeout or a crash.

The child is a fresh interpreter (``python -c``, with the parent's ``sys.path``),
talking to the parent over a socket pair with ``multiprocessing.connection``: forking
the worker, which holds Redis connections and torch threads, is not safe, and
``multiprocessing``'s own ``spawn`` re-runs the caller's ``__main__`` script, which
breaks any script without an ``if __name__ == "__main__"`` guard. The child leaves when
its end of the pipe closes (the parent exited or stopped it); an ``atexit`` hook stops
it when the parent exits normally.

The function to run and its arguments go to the child pickled, so the function must
be importable by name (a module-level function); its result and exceptions come back
pickled. Log records the child makes (``ragtopics.*`` at INFO and above, others at
WARNING and above) are logged again in the calling thread, so the pipeline's
per-document warning collector sees them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ragtopics.errors import ReadError

log = logging.getLogger(__name__)

#: How long the child may take to start and run its warm-up (import docling: ~3-10 s here;
#: a cold disk or a small machine can take much longer); not counted against any timeout_s.
START_TIMEOUT_S = 300.0
#: After SIGTERM, how long the child gets to exit before SIGKILL.
TERM_GRACE_S = 3.0

#: A log record as it crosses the pipe: (logger name, level number, formatted message).
_Record = tuple[str, int, str]


class ConverterProcess:
    """One child process that runs functions with a timeout, started on first use and replaced after a failure.

    Calls are serialised (one conversion at a time); a call waiting for its turn has
    not started its clock yet.

    Args:
        name: the child's name, in logs.
        label: what the child does, for the timeout message (``"Docling conversion"``).
        warm_up: a module-level function the child runs once before it takes work
            (e.g. importing docling), so its cost is never counted against a timeout.
        start_timeout_s: how long starting and warming up may take, in seconds.
    """

    def __init__(self, *, name: str, label: str, warm_up: Callable[[], None], start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.name = name
        self.label = label
        self._warm_up = warm_up
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None  # the parent's end of the pipe
        self._owner_pid = os.getpid()
        atexit.register(self.stop)

    @property
    def pid(self) -> int | None:
        """The child's process id while one is running, else None."""
        process = self._own_process()
        return process.pid if process is not None and process.poll() is None else None

    def run(self, function: Callable[..., Any], *args: Any, timeout_s: float, file_name: str) -> Any:
        """Run ``function(*args)`` in the child and return its result, waiting at most timeout_s.

        The child is started (and warmed up) first if none is running; that time is
        not counted. An exception raised by the function is raised here again (with
        the child's traceback as a note).

        Args:
            function: a module-level function (pickled by name).
            *args: its arguments (pickled).
            timeout_s: the longest the function may run, in seconds.
            file_name: what is being converted, for the error messages.

        Returns:
            What the function returned.

        Raises:
            ReadError: when the function runs longer than timeout_s (the child is
                killed: ``X: <label> took longer than N s and was stopped ...``), when
                the child dies while running it (``the converter process died (signal
                9, SIGKILL) while converting X``), or when the child can not start.
            Exception: whatever the function raised.
        """
        with self._lock:
            connection = self._send(function, args, file_name)
            try:
                answered = connection.poll(timeout_s)
                reply = connection.recv() if answered else None
            except (EOFError, OSError):
                raise ReadError(self._death_message(file_name)) from None
            except BaseException:  # e.g. RQ's job timeout or Ctrl-C while waiting: the child's state is unknown
                self.stop()
                raise
            if reply is None:
                self.stop()
                raise ReadError(
                    f"{file_name}: {self.label} took longer than {timeout_s:g} s and was stopped (its process was killed)"
                )
        kind, payload, records = reply
        _log_again(records)
        if kind == "error":
            raise payload
        return payload

    def stop(self) -> None:
        """End the child if one runs: SIGTERM, then SIGKILL after TERM_GRACE_S; wait until it is gone."""
        process, connection = self._own_process(), self._connection
        self._process = self._connection = None
        if connection is not None:
            connection.close()
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(TERM_GRACE_S)
        if process.poll() is None:
            log.warning("Converter process %s ignored SIGTERM; killing it", process.pid)
            process.kill()
        process.wait()

    def _send(self, function: Callable[..., Any], args: tuple, file_name: str) -> Any:
        """Hand the work to a warm child (starting one first when needed); returns the pipe to wait on."""
        for attempt in (1, 2):
            connection = self._started(file_name)
            try:
                connection.send((function, args))
                return connection
            except (BrokenPipeError, ConnectionError, EOFError) as exc:  # the child died while idle (OOM killer, kill)
                log.info("%s; starting a new one", self._death_message(file_name, while_doing="before converting"))
                self.stop()
                if attempt == 2:
                    raise ReadError(f"{file_name}: the converter process could not take the work: {exc}") from exc
        raise AssertionError("unreachable")

    def _started(self, file_name: str) -> Connection:
        """The pipe to a running, warmed-up child, starting one when none runs."""
        process = self._own_process()
        if process is not None and self._connection is not None and process.poll() is None:
            return self._connection
        self.stop()
        parent_socket, child_socket = socket.socketpair()
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _CHILD_MAIN, str(child_socket.fileno()), json.dumps(sys.path)],
                stdin=subprocess.DEVNULL,
                pass_fds=(child_socket.fileno(),),
                close_fds=True,
            )
        finally:
            child_socket.close()
        parent_end = Connection(parent_socket.detach())
        self._process, self._connection, self._owner_pid = process, parent_end, os.getpid()
        try:
            parent_end.send(self._warm_up)
            reply = parent_end.recv() if parent_end.poll(self._start_timeout_s) else None
        except (EOFError, OSError):  # OSError: BrokenPipeError when it died before reading
            message = self._death_message(file_name, while_doing="while starting")
            self.stop()
            raise ReadError(f"{file_name}: {message}") from None
        if reply is None:
            self.stop()
            raise ReadError(f"{file_name}: the converter process did not start within {self._start_timeout_s:g} s")
        kind, payload, records = reply
        _log_again(records)
        if kind == "error":
            self.stop()
            raise ReadError(f"{file_name}: the converter process could not start: {payload}")
        log.info("Converter process %s (pid %s) ready in %.1f s", self.name, process.pid, time.monotonic() - started)
        return parent_end

    def _own_process(self) -> subprocess.Popen | None:
        """The child, unless this object was inherited by a forked process (whose child it is not)."""
        if self._owner_pid != os.getpid():
            self._process = self._connection = None
            self._owner_pid = os.getpid()
        return self._process

    def _death_message(self, file_name: str, *, while_doing: str = "") -> str:
        """Reap the dead child and say how it died: ``the converter process died (signal 9, SIGKILL) while converting X``."""
        process = self._own_process()
        exitcode = None
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(TERM_GRACE_S)
            exitcode = process.returncode
        self.stop()
        if exitcode is not None and exitcode < 0:
            how = f"signal {-exitcode}, {_signal_name(-exitcode)}"
            if -exitcode == signal.SIGKILL:
                how += ": killed, often by the kernel when memory runs out"
        else:
            how = f"exit code {exitcode}"
        return f"the converter process died ({how}) {while_doing or 'while converting'} {file_name}".rstrip()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def _log_again(records: list[_Record]) -> None:
    """Log the child's records again in this thread, under their own logger names."""
    for name, level, message in records:
        logging.getLogger(name).log(level, "%s", message)


class _Capture(logging.Handler):
    """In the child: keep the records for the parent instead of printing them."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.records: list[_Record] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING or record.name.startswith("ragtopics"):
            with contextlib.suppress(Exception):  # a record whose arguments do not format is dropped, not fatal
                self.records.append((record.name, record.levelno, record.getMessage()))

    def take(self) -> list[_Record]:
        records, self.records = self.records, []
        return records


#: The child's program: take the parent's sys.path, then serve on the inherited socket.
_CHILD_MAIN = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "from ragtopics.ingest.convert_process import serve_on_fd; serve_on_fd(int(sys.argv[1]))"
)


def serve_on_fd(fd: int) -> None:
    """The child's entry point: serve conversions on the socket inherited as file descriptor fd."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops this process
    _serve(Connection(fd))


def _serve(connection: Connection) -> None:
    """The child's loop: receive and run the warm-up, say so, then run each ``(function, args)`` received.

    Replies are ``(kind, payload, records)``: ``("ok", result, ...)``, ``("error",
    exception, ...)`` or, after the warm-up, ``("ready", None, ...)``. The loop ends
    when the parent's end of the pipe closes.
    """
    capture = _Capture()
    logging.getLogger().addHandler(capture)
    logging.getLogger("ragtopics").setLevel(logging.INFO)
    try:
        warm_up = connection.recv()
        warm_up()
    except BaseException as exc:
        connection.send(("error", f"{type(exc).__name__}: {exc}", capture.take()))
        return
    connection.send(("ready", None, capture.take()))
    _run_forever(connection, capture)


def _run_forever(connection: Connection, capture: _Capture) -> None:
    """Run each ``(function, args)`` the parent sends until its end of the pipe closes."""
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", function(*args), capture.take())
        except Exception as exc:
            reply = ("error", _picklable(exc), capture.take())
        try:
            connection.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:  # a result that does not pickle
            connection.send(("error", ReadError(f"the converter's result could not be sent back: {exc}"), reply[2]))


def _picklable(exc: Exception) -> Exception:
    """The exception with the child's traceback as a note, or a RuntimeError in its words when it does not pickle."""
    note = "in the converter process:\n" + "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    exc.add_note(note)
    return exc
