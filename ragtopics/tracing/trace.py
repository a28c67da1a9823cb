"""Step tracing: every pipeline step writes a structured event to a :class:`Trace`.

A trace belongs to one upload job or one chat turn. Steps nest: a step opened while
another is open records it as its parent, so a trace is a tree of spans (a GLOBAL
map step under the answer, a connected Topic's search under its tool call). Events are
logged in short form as they happen and kept, bounded in size, in the trace store
(:mod:`ragtopics.storage.traces`), ready for DEV Reports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ragtopics.text.clip import clip

log = logging.getLogger(__name__)

#: Longest string kept in an event's data; longer ones are cut and marked.
MAX_VALUE_CHARS = 20_000
#: Model calls of one trace that keep their messages and response text (the first ones): later calls keep
#: their figures (model, tokens, time) and say how many characters of text were left out.
MAX_CALLS_WITH_TEXT = 50
#: Characters of messages and response text kept per model call (in message order, then the response).
MAX_CALL_TEXT_CHARS = MAX_VALUE_CHARS


@dataclass(slots=True)
class TraceEvent:
    """One step of a pipeline.

    Attributes:
        step: the step's name (``read``, ``chunk``, ``embed``, ``retrieve``, ``prompt``, ``answer``, ...).
        started_at: wall-clock start, seconds since the epoch.
        duration_ms: how long the step took, in milliseconds.
        data: what the step saw and produced (JSON-serialisable).
        error: the error message when the step failed, else "".
        id: the span's number within its trace (1, 2, ... in order of start).
        parent: the id of the step it ran inside, or None at the top level.
    """

    step: str
    started_at: float
    duration_ms: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    id: int = 0
    parent: int | None = None


class Trace:
    """The ordered events of one job or chat turn.

    Args:
        kind: ``"upload"`` or ``"chat"``.
        subject: what is traced (a file name, a question), for log lines.
        model_overrides: the Topic's LLM Overrides, role → model name; every model call of the run
            (the gateway reads them from the trace it is given) asks that model on the role's endpoint.
    """

    #: Model calls that kept their text, and the characters of text left out (class defaults: a trace
    #: pickled by an earlier version, such as a parked upload's, has neither).
    calls_with_text: int = 0
    text_chars_left_out: int = 0

    def __init__(self, kind: str, subject: str, model_overrides: dict[str, str] | None = None):
        self.kind = kind
        self.subject = subject
        self.model_overrides: dict[str, str] = dict(model_overrides or {})
        self.events: list[TraceEvent] = []
        self._open: list[int] = []
        self.calls_with_text = 0
        self.text_chars_left_out = 0

    def child(self, kind: str, subject: str) -> Trace:
        """A separate trace for work done in parallel (merged back by the caller), with the same LLM Overrides."""
        return Trace(kind, subject, self.model_overrides)

    @contextmanager
    def step(self, name: str, **data: Any) -> Iterator[TraceEvent]:
        """Time a step; the caller adds to ``event.data``. An exception is recorded and re-raised.

        Steps opened inside this one (before it ends) become its children. A ``model_call`` step's
        ``messages`` and ``response`` are bounded as they are recorded (:meth:`_bound_call_text`).
        """
        if name == "model_call" and ("messages" in data or "response" in data):
            data = self._bound_call_text(data)
        event = TraceEvent(
            step=name,
            started_at=time.time(),
            data=dict(data),
            id=len(self.events) + 1,
            parent=self._open[-1] if self._open else None,
        )
        self.events.append(event)
        with self._running(event):
            yield event

    @contextmanager
    def resume(self, event: TraceEvent) -> Iterator[TraceEvent]:
        """Continue a step that ended, as :meth:`step` runs it: its time grows by this part, steps opened
        meanwhile become its children, an exception is recorded on it and re-raised (a batch of files
        chunks each, counts all their tokens at once, then fits each file's chunks within its chunk step)."""
        with self._running(event):
            yield event

    @contextmanager
    def _running(self, event: TraceEvent) -> Iterator[None]:
        """Time ``event`` (adding to its duration) while it is the open step; record an exception on it."""
        self._open.append(event.id)
        t0 = time.perf_counter()
        try:
            yield
        except GeneratorExit:
            event.data["stopped"] = True  # the reader closed the stream (Stop): not an error
            raise
        except BaseException as exc:
            event.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            event.duration_ms = round(event.duration_ms + (time.perf_counter() - t0) * 1000, 3)
            if event.id in self._open:
                self._open.remove(event.id)
            log.info(
                "%s[%s] %s %.1f ms %s%s",
                self.kind,
                self.subject[:60],
                event.step,
                event.duration_ms,
                summary_line(event.data),
                f" ERROR {event.error}" if event.error else "",
            )

    def add(self, name: str, **data: Any) -> TraceEvent:
        """Record an instantaneous event."""
        with self.step(name, **data) as event:
            return event

    def _bound_call_text(self, data: dict[str, Any]) -> dict[str, Any]:
        """A model call's data with at most :data:`MAX_CALL_TEXT_CHARS` of text, and none at all once
        :data:`MAX_CALLS_WITH_TEXT` calls of this trace kept theirs, so a run of thousands of calls (an
        upload's extraction) holds a bounded amount of prompt text while it runs.

        Returns:
            A copy of ``data``; what was cut is counted in ``text_chars_left_out`` (of the event and the trace).
        """
        data = dict(data)
        text = {k: data.pop(k) for k in ("messages", "response") if k in data}
        budget = MAX_CALL_TEXT_CHARS if self.calls_with_text < MAX_CALLS_WITH_TEXT else 0
        if budget:
            self.calls_with_text += 1
        kept, left_out = _cut_strings(text, budget)
        if budget:
            data.update(kept)
        left_out += int(data.pop("text_chars_left_out", 0) or 0)  # cut already in a trace it was merged from
        if left_out:
            data["text_chars_left_out"] = left_out
            self.text_chars_left_out += left_out
        return data

    def timings_ms(self) -> dict[str, float]:
        """Duration of each step in milliseconds (summed when a step repeats).

        A nested step's time is also part of its parent's: ``retrieve`` includes
        ``embed_question`` and ``search``.
        """
        out: dict[str, float] = {}
        for e in self.events:
            out[e.step] = round(out.get(e.step, 0.0) + e.duration_ms, 3)
        return out

    def children(self, parent: int | None) -> list[TraceEvent]:
        """The steps directly under ``parent`` (None: the top level), in order of start."""
        return [e for e in self.events if e.parent == parent]

    def to_list(self) -> list[dict[str, Any]]:
        """The events as JSON-ready dicts, long strings cut to :data:`MAX_VALUE_CHARS`."""
        return [
            {
                "step": e.step,
                "started_at": e.started_at,
                "duration_ms": e.duration_ms,
                "data": clip(e.data, MAX_VALUE_CHARS),
                "error": clip(e.error, MAX_VALUE_CHARS),
                "id": e.id,
                "parent": e.parent,
            }
            for e in self.events
        ]


def summary_line(data: dict[str, Any]) -> str:
    """A step's data in one short line: scalars and short strings as ``key=value``, lists and dicts as ``key=<n>``."""
    parts = []
    for key, value in data.items():
        if isinstance(value, (int, float, bool)) or (isinstance(value, str) and len(value) <= 40):
            parts.append(f"{key}={value}")
        elif isinstance(value, (list, dict)):
            parts.append(f"{key}=<{len(value)}>")
    return " ".join(parts)


def _cut_strings(value: Any, budget: int) -> tuple[Any, int]:
    """``value`` (strings, lists, dicts) with its strings, in order, kept up to ``budget`` characters in all
    (a cut string is marked); returns it and the number of characters left out."""
    kept, _, left_out = _cut(value, budget)
    return kept, left_out


#: Fields of a chat message (or of a part of one) kept whole by :func:`_cut_strings`.
_MESSAGE_FIELDS = frozenset({"role", "type", "name", "id", "tool_call_id"})


def _cut(value: Any, budget: int) -> tuple[Any, int, int]:
    """:func:`_cut_strings`, also returning the characters used: ``(kept, used, left out)``."""
    if isinstance(value, str):
        if len(value) <= budget:
            return value, len(value), 0
        room = max(0, budget - len(f"… [{len(value)} more characters]"))  # the mark fits in the budget
        return value[:room] + f"… [{len(value) - room} more characters]", budget, len(value) - room
    if isinstance(value, dict | list | tuple):
        items, used, left_out = [], 0, 0
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(value, dict) and key in _MESSAGE_FIELDS:  # what a message is, not its text
                items.append(item)
                continue
            kept, n, cut = _cut(item, budget - used)
            items.append(kept)
            used, left_out = used + n, left_out + cut
        return (dict(zip(value, items, strict=True)) if isinstance(value, dict) else items), used, left_out
    return value, 0, 0
