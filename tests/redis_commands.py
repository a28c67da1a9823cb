"""The commands a block of code sends to the real test Redis, as the server's MONITOR reports them.

A test counts what the code does (round trips, keys read) instead of timing it::

    with CommandLog(rt.redis) as log:
        jobs_html(rt, jobs)
    assert log.count("GRAPH.RO_QUERY") == 1 and not log.on_key(parked_key(topic.id, job_id))
"""

from __future__ import annotations

import re
import uuid

import redis

_LINE = re.compile(r"\[(\d+) (.*?)\] (.*)", re.DOTALL)
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)


class CommandLog:
    """Every command the server runs between entering and leaving the block (any client of this server).

    The MONITOR reply is read after the block ends, up to a marker command sent last, so
    nothing is lost and no thread is needed.

    Attributes:
        commands: ``[(NAME, arg, ...)]`` in the order the server ran them; NAME upper case, arguments as
            MONITOR quotes them (the marker and the MONITOR reply itself left out).
    """

    def __init__(self, client: redis.Redis):
        self.client = client
        self.commands: list[tuple[str, ...]] = []
        self._monitor = None

    def __enter__(self) -> CommandLog:
        self._monitor = self.client.monitor()
        self._monitor.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        marker = f"command-log-end-{uuid.uuid4().hex}"
        self.client.echo(marker)
        try:
            while True:
                line = self._monitor.connection.read_response()
                line = line.decode() if isinstance(line, bytes) else str(line)
                match = _LINE.match(line.split(" ", 1)[1]) if " " in line else None
                if match is None:
                    continue
                args = tuple(a.encode().decode("unicode_escape") for a in _ARG.findall(match.group(3)))
                if args and args[0].upper() == "ECHO" and marker in args[1:]:
                    break
                if args:
                    self.commands.append((args[0].upper(), *args[1:]))
        finally:
            self._monitor.__exit__(*exc)

    def count(self, *names: str) -> int:
        """How many commands named any of ``names`` (case-insensitive) ran."""
        wanted = {n.upper() for n in names}
        return sum(c[0] in wanted for c in self.commands)

    def on_key(self, key: str, *names: str) -> list[tuple[str, ...]]:
        """The commands (of ``names``, or any) whose first argument is ``key``."""
        wanted = {n.upper() for n in names}
        return [c for c in self.commands if len(c) > 1 and c[1] == key and (not wanted or c[0] in wanted)]


class RoundTrips:
    """How many requests the real test Redis read from its clients during the block (``INFO stats``
    ``total_reads_processed``, less the ``INFO`` that reads it): a pipeline sent at once is one read, so
    this counts round trips, not commands::

        with RoundTrips(rt.redis) as trips:
            retrieve(...)
        assert trips.count == 2

    Attributes:
        count: the reads counted (set when the block ends).
    """

    def __init__(self, client: redis.Redis):
        self.client = client
        self.count = 0
        self._before = 0

    def _reads(self) -> int:
        return int(self.client.info("stats")["total_reads_processed"])

    def __enter__(self) -> RoundTrips:
        self._before = self._reads()
        return self

    def __exit__(self, *exc) -> None:
        self.count = self._reads() - self._before - 1  # the INFO that read the second figure
