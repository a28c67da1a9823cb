"""OpenTelemetry export of finished traces: each :class:`~ragtopics.tracing.trace.Trace` as a span tree.

Every upload, chat turn and community rebuild already keeps a step tree (:mod:`ragtopics.tracing.trace`).
When it ends, :func:`export_traces` sends the same tree as OpenTelemetry spans: one root span per trace
(``ragtopics.upload``, ``ragtopics.chat``, ``ragtopics.communities``) and a span per step under its
parent step, a ``model_call`` span for every model call. The spans are built from the finished events
with their recorded start times and durations, so the code that runs the steps needs no change, a step
that ran in several parts (:meth:`Trace.resume`) or in a worker thread's trace merged back later is
still one span in its place, and nothing happens at all while ``OTEL_EXPORTER_OTLP_ENDPOINT`` is unset
(one check per finished trace).

What a span holds: a step's numbers and flags, ids and a few fixed words (role, model, route, method);
every other string only as its size (``<key>.chars``) and every list or dict only as its length
(``<key>.count``). With ``OTEL_RECORD_CONTENT=true`` the text itself goes in too (questions, answers,
chunk text, model messages and responses, error messages), cut to :data:`MAX_ATTRIBUTE_CHARS`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

from ragtopics.settings.env import Settings
from ragtopics.tracing.trace import Trace, TraceEvent

log = logging.getLogger(__name__)

#: Prefix of the product's own span attributes.
ATTRIBUTE_PREFIX = "ragtopics."
#: Longest text attribute (with content recording on), in characters.
MAX_ATTRIBUTE_CHARS = 8_000
#: Longest list of numbers kept as a sequence attribute.
MAX_SEQUENCE_ITEMS = 64
#: String fields that never hold prompt or document text: kept as they are even with content recording off.
SAFE_STRING_KEYS = frozenset(
    {
        "role",
        "prompt_name",
        "model",
        "route",
        "method",
        "kind",
        "strategy",
        "format",
        "enrichment",
        "planned",
        "taken",
        "topic",
        "session_id",
        "community_id",
        "skipped",
        "route_method",
    }
)
#: Instrumentation scope of the spans.
SCOPE = "ragtopics"

_lock = threading.Lock()
_provider: Any = None  # the TracerProvider of OTEL_EXPORTER_OTLP_ENDPOINT, made on first use
_provider_key: tuple[str, str] | None = None
_override: Any = None  # a provider set by use_tracer_provider (tests, an embedding application)


def use_tracer_provider(provider: Any) -> None:
    """Export to ``provider`` (an SDK ``TracerProvider``) whatever the environment says; None: back to the environment.

    Tests give a provider with an ``InMemorySpanExporter``; an application that embeds ragtopics may give its own.
    """
    global _override
    _override = provider


def tracer_provider(settings: Settings) -> Any:
    """The provider finished traces go to: the one set by :func:`use_tracer_provider`, else an OTLP/HTTP
    exporter to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (made once per endpoint), else None (nothing is exported)."""
    global _provider, _provider_key
    if _override is not None:
        return _override
    endpoint = settings.otel_exporter_otlp_endpoint
    if not endpoint:
        return None
    key = (endpoint, settings.otel_service_name)
    with _lock:
        if _provider_key != key:
            if _provider is not None:
                _provider.shutdown()
            _provider, _provider_key = _otlp_provider(endpoint, settings.otel_service_name), key
        return _provider


def _otlp_provider(endpoint: str, service_name: str) -> Any:
    """A provider that batches spans to ``<endpoint>/v1/traces`` (the path the OTLP/HTTP spec adds to the
    generic endpoint variable)."""
    # deferred: the OpenTelemetry SDK loads only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
    log.info("OpenTelemetry traces go to %s/v1/traces", endpoint.rstrip("/"))
    return provider


def flush(settings: Settings, timeout_ms: int = 5_000) -> bool:
    """Send the spans still batched (before a process exits, or in a test); True when all went out in time."""
    provider = tracer_provider(settings)
    return True if provider is None else bool(provider.force_flush(timeout_ms))


def export_traces(settings: Settings, traces: Iterable[tuple[Trace, str, str, str, str]]) -> int:
    """Send finished traces as span trees, when an exporter is set (else nothing, at the cost of one check).

    Never raises: a collector that is down must not fail the upload or the answer it describes (logged).

    Args:
        settings: the process settings (``OTEL_*``).
        traces: ``(trace, kind, owner, subject, topic_id)`` each, as :func:`~ragtopics.tracing.reports.record_traces` takes them.

    Returns:
        The number of spans made (0 when nothing is exported).
    """
    if _override is None and not settings.otel_exporter_otlp_endpoint:
        return 0
    try:
        tracer = tracer_provider(settings).get_tracer(SCOPE)
        return sum(_export_one(tracer, *entry, record_content=settings.otel_record_content) for entry in traces)
    except Exception as exc:
        log.warning("OpenTelemetry spans not exported: %s", exc)
        return 0


def export_trace(settings: Settings, trace: Trace, *, kind: str, owner: str = "", subject: str = "", topic_id: str = "") -> int:
    """:func:`export_traces` for one trace (a chat turn that is not saved, so not recorded)."""
    return export_traces(settings, [(trace, kind, owner, subject, topic_id)])


def _export_one(tracer: Any, trace: Trace, kind: str, owner: str, subject: str, topic_id: str, *, record_content: bool) -> int:
    """One trace as a root span with its steps under it; returns the number of spans."""
    # deferred: the OpenTelemetry SDK loads only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Status, StatusCode

    if not trace.events:
        return 0
    spans = {e.id: _bounds_ns(e) for e in trace.events}
    start_ns = min(start for start, _ in spans.values())
    end_ns = max(end for _, end in spans.values())
    root_attributes = {
        f"{ATTRIBUTE_PREFIX}kind": kind,
        f"{ATTRIBUTE_PREFIX}owner": owner,
        f"{ATTRIBUTE_PREFIX}topic_id": topic_id,
        f"{ATTRIBUTE_PREFIX}steps": len(trace.events),
        f"{ATTRIBUTE_PREFIX}subject.chars": len(subject),
    }
    if record_content:
        root_attributes[f"{ATTRIBUTE_PREFIX}subject"] = subject[:MAX_ATTRIBUTE_CHARS]
    root = tracer.start_span(f"{ATTRIBUTE_PREFIX}{kind}", start_time=start_ns, attributes=root_attributes)
    opened: dict[int | None, otel_trace.Span] = {None: root}
    failed = False
    for event in trace.events:  # a step starts after the step it runs in, so its parent is made first
        parent = opened.get(event.parent, root)
        start, end = spans[event.id]
        span = tracer.start_span(
            event.step,
            context=otel_trace.set_span_in_context(parent),
            start_time=start,
            attributes=span_attributes(event.data, record_content=record_content),
        )
        if event.error:
            failed = True
            error_type = event.error.split(":", 1)[0]
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, event.error[:MAX_ATTRIBUTE_CHARS] if record_content else error_type))
        span.end(end_time=end)
        opened[event.id] = span
    if failed:
        root.set_status(Status(StatusCode.ERROR))
    root.end(end_time=end_ns)
    return len(trace.events) + 1


def _bounds_ns(event: TraceEvent) -> tuple[int, int]:
    """A step's start and end in nanoseconds since the epoch. A model call is recorded when it has ended,
    with its own duration in its data: it started that long before."""
    took_ms = float(event.data.get("duration_ms") or 0) if event.step == "model_call" else event.duration_ms
    if event.step == "model_call":
        end = int(event.started_at * 1e9)
        return end - int(took_ms * 1e6), end
    start = int(event.started_at * 1e9)
    return start, start + int(took_ms * 1e6)


def span_attributes(data: dict[str, Any], *, record_content: bool) -> dict[str, Any]:
    """A step's data as span attributes (keys prefixed :data:`ATTRIBUTE_PREFIX`).

    Numbers and flags are kept; strings of :data:`SAFE_STRING_KEYS` and ``*_id`` keys are kept; every other
    string becomes ``<key>.chars`` and every list or dict ``<key>.count`` (a list of numbers is kept as it
    is, up to :data:`MAX_SEQUENCE_ITEMS`). With ``record_content`` the strings, lists and dicts themselves are
    kept too (lists and dicts as JSON), each cut to :data:`MAX_ATTRIBUTE_CHARS`.
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{ATTRIBUTE_PREFIX}{key}"
        if value is None:
            continue
        if isinstance(value, (bool, int, float)):
            out[name] = value
        elif isinstance(value, str):
            if record_content or key in SAFE_STRING_KEYS or key.endswith("_id"):
                out[name] = value[:MAX_ATTRIBUTE_CHARS]
            else:
                out[f"{name}.chars"] = len(value)
        elif isinstance(value, (list, tuple, dict)):
            out[f"{name}.count"] = len(value)
            if _is_numbers(value):
                out[name] = list(value)
            elif record_content:
                out[name] = json.dumps(value, ensure_ascii=False, default=str)[:MAX_ATTRIBUTE_CHARS]
    return out


def _is_numbers(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and 0 < len(value) <= MAX_SEQUENCE_ITEMS
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        and len({type(v) for v in value}) == 1
    )
