"""The JSON objects the HTTP API and the CLI both print: one definition each."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC
from typing import Any

from ragtopics.answer.context import Source
from ragtopics.answer.history import SavedTurn
from ragtopics.answer.turn import ChatUpdate
from ragtopics.documents.uploads import DocumentInfo
from ragtopics.settings.docs import settings_rows
from ragtopics.storage.metadata import ChatSessionRow
from ragtopics.topics.topics import Topic


def topic_summary(topic: Topic) -> dict[str, Any]:
    """A Topic in a list: ``{"id", "name", "kind", "description", "settings_version"}``."""
    return {
        "id": topic.id,
        "name": topic.name,
        "kind": topic.kind,
        "description": topic.description,
        "settings_version": topic.settings_version,
    }


def topic_detail(topic: Topic) -> dict[str, Any]:
    """A Topic shown whole (``ragtopics topic show``): ``{"id", "name", "kind", "settings_version", "settings",
    "reference"}``, ``reference`` one row per setting with its value, default and description."""
    return {
        "id": topic.id,
        "name": topic.name,
        "kind": topic.kind,
        "settings_version": topic.settings_version,
        "settings": topic.settings.model_dump(mode="json"),
        "reference": [asdict(row) for row in settings_rows(topic.settings)],
    }


def public_sources(sources: list[Source], base_url: str = "") -> list[dict[str, Any]]:
    """Sources as :meth:`~ragtopics.answer.context.Source.to_public` gives them; with ``base_url``
    (``http://host:7860/``) each ``link`` is made absolute."""
    out = []
    for source in sources:
        item = source.to_public()
        if base_url and item["link"].startswith("/"):
            item["link"] = base_url.rstrip("/") + item["link"]
        out.append(item)
    return out


def sources(final: ChatUpdate, base_url: str = "") -> list[dict[str, Any]]:
    """An answer's sources (:func:`public_sources`)."""
    return public_sources(final.sources, base_url)


def answer(final: ChatUpdate, base_url: str = "") -> dict[str, Any]:
    """A finished answer (``ragtopics ask --json``): ``{"answer", "sources", "route", "route_confidence",
    "route_reason", "route_method", "route_planned", "no_answer", "note", "rerank", "session_id", "timings_ms"}``;
    the sources as :func:`sources` gives them (links absolute with ``base_url``)."""
    return {
        "answer": final.text,
        "sources": sources(final, base_url),
        "route": final.route,
        "route_confidence": final.route_confidence,
        "route_reason": final.route_reason,
        "route_method": final.route_method,
        "route_planned": final.route_planned,
        "no_answer": final.no_answer,
        "note": final.note,
        "rerank": final.rerank,
        "session_id": final.session_id,
        "timings_ms": final.timings_ms,
    }


def utc_iso(moment) -> str:
    """A stored UTC time (naive) as ISO 8601 with its offset, e.g. ``2026-12-01T20:42:33.120000+00:00``; "" for None."""
    return moment.replace(tzinfo=UTC).isoformat() if moment else ""


def document(info: DocumentInfo) -> dict[str, Any]:
    """A row of a Topic's Indexed Documents (``ragtopics docs --json``): the fields of
    :class:`~ragtopics.documents.uploads.DocumentInfo`, ``updated_at`` as ISO 8601 UTC."""
    return {**asdict(info), "updated_at": utc_iso(info.updated_at)}


def chat(session: ChatSessionRow) -> dict[str, Any]:
    """A saved chat in a list: ``{"id", "title", "created_at"}`` (``created_at`` ISO 8601 UTC)."""
    return {"id": session.id, "title": session.title, "created_at": utc_iso(session.created_at)}


def saved_turn(turn: SavedTurn, base_url: str = "") -> dict[str, Any]:
    """A saved turn shown again: ``{"id", "question", "answer", "sources", "route", "route_confidence",
    "route_reason", "route_method", "route_planned", "timings_ms"}``; each source with its ``status`` now
    (``current``, ``changed``, ``removed``) and a fresh link (absolute with ``base_url``)."""
    return {
        "id": turn.id,
        "question": turn.question,
        "answer": turn.answer,
        "sources": public_sources(turn.sources, base_url),
        "route": turn.route,
        "route_confidence": turn.route_confidence,
        "route_reason": turn.route_reason,
        "route_method": turn.route_method,
        "route_planned": turn.route_planned,
        "timings_ms": turn.timings_ms,
    }


def job(progress) -> dict[str, Any]:
    """A job's status (``GET /api/v1/jobs/{id}``): the fields of :class:`~ragtopics.jobs.queue.JobProgress`."""
    return asdict(progress)


def topic_deletion(deletion) -> dict[str, Any]:
    """A deleted Topic (:class:`~ragtopics.topics.delete.TopicDeletion`): ``{"deleted", "id", "removed", "notes"}``,
    ``removed`` counting what went by kind, ``notes`` what the operator should know."""
    return {
        "deleted": deletion.topic.name,
        "id": deletion.topic.id,
        "removed": dict(deletion.removed),
        "notes": list(deletion.notes),
    }


def eval_run(info, questions: list[dict[str, Any]], progress=None) -> dict[str, Any]:
    """An evaluation run (:class:`~ragtopics.quality.runs.RunInfo`): ``{"run_id", "topic", "created", "questions",
    "route", "retrieval_only", "settings_changed", "summary", "error", "results", "job"}``; ``summary`` and
    ``results`` (one row per question) once it has finished, ``job`` its job's status (None once forgotten)."""
    return {**asdict(info), "results": questions, "job": job(progress) if progress is not None else None}
