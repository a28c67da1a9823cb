"""DEV Reports: while a switch is on, every upload, chat answer or community rebuild writes a full report.

Every job and turn already keeps a bounded trace (:mod:`ragtopics.storage.traces`). A DEV
report is the same step tree *unbounded*: the text read, each chunk, entities and
relationships found, dedup merges and why, the router's way, confidence and reason, the
evidence with scores and fused ranks, the rerank order, the exact prompts, the answer
before and after the source check, and every model call with its tokens and time. A report
is a JSON file under ``dev-reports/`` of the file store (``FILE_STORE``: the data dir's ``files/``
folder or the object store, so that the console shows what a worker on another machine wrote);
an index row (:class:`DevReportRow`) makes reports browsable by Topic, kind and time. Reports
older than ``DEV_REPORT_RETENTION_DAYS`` are deleted.

The three switches (:data:`KINDS`) live in Redis, so the console turns them on for the
workers too; :func:`reset_switches` turns them all off, and the console calls it at every
start.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from ragtopics.errors import NotFoundError
from ragtopics.runtime import Runtime
from ragtopics.storage.metadata import DevReportRow, TopicRow, utcnow
from ragtopics.storage.traces import save_traces
from ragtopics.tracing.otel import export_traces
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: What can be reported, and the switch that names it in the console.
KINDS = {"upload": "Report uploads", "chat": "Report chat answers", "communities": "Report community rebuilds"}
#: The Redis set of kinds whose switch is on.
SWITCHES_KEY = "rt:dev-reports:on"
#: Folder of the report files, under the data directory.
FOLDER = "dev-reports"


def switches(rt: Runtime) -> dict[str, bool]:
    """Each kind's switch: ``{"upload": False, "chat": True, "communities": False}``."""
    on = {m.decode() if isinstance(m, bytes) else m for m in rt.redis.smembers(SWITCHES_KEY)}
    return {kind: kind in on for kind in KINDS}


def set_switch(rt: Runtime, kind: str, on: bool) -> None:
    """Turn reporting of ``kind`` on or off (for every process at once).

    Raises:
        NotFoundError: an unknown kind.
    """
    if kind not in KINDS:
        raise NotFoundError(f"no DEV report kind {kind!r}; kinds: {', '.join(KINDS)}")
    (rt.redis.sadd if on else rt.redis.srem)(SWITCHES_KEY, kind)


def reset_switches(rt: Runtime) -> None:
    """Turn every switch off (called at every start)."""
    rt.redis.delete(SWITCHES_KEY)


def record_trace(rt: Runtime, trace: Trace, *, kind: str, owner: str, subject: str, topic_id: str = "") -> int:
    """Store a finished trace and, while ``kind``'s switch is on, its DEV report; export it as OpenTelemetry
    spans when an exporter is set (:mod:`ragtopics.tracing.otel`).

    A report that cannot be written is logged, never raised: reporting must not fail the job
    or the answer it describes.

    Returns:
        The stored trace's id.
    """
    return record_traces(rt, [(trace, kind, owner, subject, topic_id)])[0]


def record_traces(
    rt: Runtime, traces: list[tuple[Trace, str, str, str, str]], events: list[list[dict[str, Any]]] | None = None
) -> list[int]:
    """:func:`record_trace` for several finished traces (a batch of uploads): stored in one transaction.

    Args:
        traces: ``(trace, kind, owner, subject, topic_id)`` each.
        events: each trace's :meth:`~ragtopics.tracing.trace.Trace.to_list`, when the caller has it already.

    Returns:
        The stored traces' ids, in order.
    """
    events = events if events is not None else [entry[0].to_list() for entry in traces]
    ids = save_traces(
        rt.metadata,
        [
            (kind, owner, subject, listed, topic_id)
            for (_, kind, owner, subject, topic_id), listed in zip(traces, events, strict=True)
        ],
    )
    export_traces(rt.settings, traces)  # OpenTelemetry spans, when OTEL_EXPORTER_OTLP_ENDPOINT is set
    try:
        on = switches(rt)
        for trace, kind, owner, subject, topic_id in traces:
            if on.get(kind):
                write_report(rt, trace, kind=kind, owner=owner, subject=subject, topic_id=topic_id)
    except Exception as exc:
        log.warning("DEV reports of %d trace(s) not written: %s", len(traces), exc)
    return ids


def summary_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of a report: steps, model calls, tokens (prompt + completion) and the top-level time in ms."""
    calls = [e for e in events if e["step"] == "model_call"]
    tokens = sum(int(e["data"].get("prompt_tokens") or 0) + int(e["data"].get("completion_tokens") or 0) for e in calls)
    top = sum(float(e.get("duration_ms") or 0) for e in events if e.get("parent") is None)
    return {"steps": len(events), "model_calls": len(calls), "tokens": tokens, "duration_ms": round(top, 3)}


def write_report(rt: Runtime, trace: Trace, *, kind: str, owner: str, subject: str, topic_id: str = "") -> int:
    """Write one report file and its index row; returns the report's id. Old reports are purged first."""
    purge_expired(rt)
    events = [asdict(e) for e in trace.events]  # unclipped: the whole of every value
    stats = summary_of(events)
    created = utcnow()
    with rt.metadata.session() as s:
        topic = s.get(TopicRow, topic_id) if topic_id else None
        row = DevReportRow(
            kind=kind,
            topic_id=topic_id,
            topic_name=topic.name if topic else "",
            subject=subject[:300],
            owner=owner,
            path="",
            created_at=created,
            **stats,
        )
        s.add(row)
        s.flush()
        if row.id is None:
            raise RuntimeError(f"the database gave the DEV report row of {subject[:80]!r} no id")
        report_id = row.id
        relative = f"{FOLDER}/{created:%Y-%m-%d}/{report_id}.json"
        body = {
            "id": report_id,
            "kind": kind,
            "topic": row.topic_name,
            "topic_id": topic_id,
            "subject": subject,
            "owner": owner,
            "created_at": created.isoformat(),
            "summary": stats,
            "events": events,
        }
        data = json.dumps(body, ensure_ascii=False, default=str, indent=1).encode("utf-8")
        rt.blobs.write(relative, data)
        row.path, row.size_bytes = relative, len(data)
        s.add(row)
    return report_id


def list_reports(
    rt: Runtime, *, topic_id: str | None = None, kind: str | None = None, since: datetime | None = None, limit: int = 200
) -> list[DevReportRow]:
    """The newest reports first, filtered by Topic id, kind and creation time (UTC)."""
    query = select(DevReportRow).order_by(col(DevReportRow.id).desc()).limit(limit)
    if topic_id:
        query = query.where(DevReportRow.topic_id == topic_id)
    if kind:
        query = query.where(DevReportRow.kind == kind)
    if since is not None:
        query = query.where(DevReportRow.created_at >= since)
    with rt.metadata.session() as s:
        return list(s.exec(query))


def report_bytes(rt: Runtime, report_id: int) -> bytes:
    """The JSON file of a report, as written.

    Raises:
        NotFoundError: no such report, or its file is gone.
    """
    with rt.metadata.session() as s:
        row = s.get(DevReportRow, report_id)
    if row is not None and row.path:
        try:
            return rt.blobs.read(row.path)
        except (FileNotFoundError, ValueError):
            local = Path(rt.settings.data_dir) / row.path  # written by an earlier version, into the data dir
            if local.is_file():
                return local.read_bytes()
    raise NotFoundError(f"no DEV report {report_id} (it may have passed its retention period)")


def load_report(rt: Runtime, report_id: int) -> dict[str, Any]:
    """A report as written. Raises NotFoundError like :func:`report_bytes`."""
    return json.loads(report_bytes(rt, report_id).decode("utf-8"))


def purge_expired(rt: Runtime, now: datetime | None = None) -> int:
    """Delete reports older than ``DEV_REPORT_RETENTION_DAYS``; returns how many were deleted."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=rt.settings.dev_report_retention_days)
    with rt.metadata.session() as s:
        old = list(s.exec(select(DevReportRow).where(DevReportRow.created_at < cutoff)))
        for row in old:
            if row.path:
                rt.blobs.remove(row.path)
                (Path(rt.settings.data_dir) / row.path).unlink(missing_ok=True)  # an earlier version's, in the data dir
            s.delete(row)
    return len(old)
