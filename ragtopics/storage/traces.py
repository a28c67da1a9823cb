"""The trace store: step trees of chat turns and upload jobs, bounded in size and number.

A trace is written once, when its turn or job ends. Two bounds keep the store from
growing without limit: one trace keeps at most :data:`MAX_TRACE_BYTES` of JSON (the
largest values are cut first), and each kind keeps its newest :data:`KEEP_PER_KIND`
traces (older ones are deleted as new ones arrive).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import insert
from sqlmodel import col, delete, select

from ragtopics.storage.metadata import MetadataStore, TraceRow, utcnow
from ragtopics.text.clip import clip

log = logging.getLogger(__name__)

#: Largest JSON size of one stored trace, in bytes.
MAX_TRACE_BYTES = 2_000_000
#: Traces kept per kind (``chat``, ``upload``); the oldest beyond this are deleted.
KEEP_PER_KIND = 2_000
#: Longest string kept in an event's data when a trace is over :data:`MAX_TRACE_BYTES`.
SHRUNK_VALUE_CHARS = 500


def save_trace(
    store: MetadataStore, *, kind: str, owner: str, subject: str, events: list[dict[str, Any]], topic_id: str = ""
) -> int:
    """Store a trace's events (JSON-ready dicts, as :meth:`Trace.to_list` gives them).

    Args:
        store: the SQL metadata store.
        kind: ``"chat"`` or ``"upload"``.
        owner: what the trace explains: ``turn:<id>`` or ``document:<id>``.
        subject: the question or file name.
        events: the trace's events.
        topic_id: the Topic it belongs to.

    Returns:
        The stored trace's id.
    """
    return save_traces(store, [(kind, owner, subject, events, topic_id)])[0]


def save_traces(store: MetadataStore, traces: list[tuple[str, str, str, list[dict[str, Any]], str]]) -> list[int]:
    """:func:`save_trace` for several traces in one transaction: ``(kind, owner, subject, events, topic_id)`` each.

    One Core ``INSERT ... RETURNING`` call for all of them (a batch of small uploads stores a trace
    per file: ORM objects flushed one by one cost more than the rest of storing them).

    Returns:
        The stored traces' ids, in order.
    """
    if not traces:
        return []
    now = utcnow()
    rows = []
    for kind, owner, subject, events, topic_id in traces:
        events, size = _bounded(events)
        rows.append(
            {
                "kind": kind,
                "owner": owner,
                "topic_id": topic_id,
                "subject": subject[:300],
                "size_bytes": size,
                "events": events,
                "created_at": now,
            }
        )
    with store.session() as s:
        inserted = s.execute(insert(TraceRow).returning(col(TraceRow.id), sort_by_parameter_order=True), rows)
        ids = [row[0] for row in inserted]
        for kind in {t[0] for t in traces}:
            cutoff = s.exec(
                select(TraceRow.id)
                .where(col(TraceRow.kind) == kind)
                .order_by(col(TraceRow.id).desc())
                .offset(KEEP_PER_KIND)
                .limit(1)
            ).first()
            if cutoff is not None:
                s.exec(delete(TraceRow).where(col(TraceRow.kind) == kind, col(TraceRow.id) <= cutoff))
    return ids


def load_trace(store: MetadataStore, owner: str) -> list[dict[str, Any]]:
    """The events of the newest trace of ``owner`` (``[]`` when none is kept)."""
    with store.session() as s:
        row = s.exec(select(TraceRow).where(col(TraceRow.owner) == owner).order_by(col(TraceRow.id).desc())).first()
    return list(row.events) if row else []


def recent_traces(store: MetadataStore, *, topic_id: str, limit: int = 20, kind: str | None = None) -> list[TraceRow]:
    """A Topic's newest traces, newest first (``kind``: only ``upload``, ``chat`` or ``communities``)."""
    query = select(TraceRow).where(col(TraceRow.topic_id) == topic_id).order_by(col(TraceRow.id).desc()).limit(limit)
    if kind:
        query = query.where(col(TraceRow.kind) == kind)
    with store.session() as s:
        return list(s.exec(query))


def delete_traces(store: MetadataStore, *, topic_id: str) -> int:
    """Delete every trace of a Topic; returns how many were deleted."""
    with store.session() as s:
        result = s.exec(delete(TraceRow).where(col(TraceRow.topic_id) == topic_id))
        return result.rowcount or 0


def delete_owner_traces(store: MetadataStore, owner: str) -> int:
    """Delete every trace of ``owner`` (e.g. ``document:<id>``); returns how many were deleted."""
    with store.session() as s:
        result = s.exec(delete(TraceRow).where(col(TraceRow.owner) == owner))
        return result.rowcount or 0


def _bounded(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The events, long strings cut when their JSON is over :data:`MAX_TRACE_BYTES`; and the JSON size."""
    size = len(json.dumps(events, ensure_ascii=False, default=str))
    if size <= MAX_TRACE_BYTES:
        return events, size
    shrunk = [{**e, "data": clip(e.get("data", {}), SHRUNK_VALUE_CHARS, 50), "shrunk": True} for e in events]
    size = len(json.dumps(shrunk, ensure_ascii=False, default=str))
    if size > MAX_TRACE_BYTES:  # still too big: keep the step skeleton only
        shrunk = [{k: v for k, v in e.items() if k != "data"} | {"data": {}, "shrunk": True} for e in events]
        size = len(json.dumps(shrunk, ensure_ascii=False, default=str))
    log.info("trace cut to %d bytes", size)
    return shrunk, size
