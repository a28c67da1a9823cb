"""SQL queries for chat sessions and their saved turns."""

from __future__ import annotations

from typing import Any

from sqlmodel import col, select

from ragtopics.storage.metadata import ChatSessionRow, ChatTurnRow, DocumentRow, MetadataStore, PictureRow


def get_session(store: MetadataStore, session_id: str) -> ChatSessionRow | None:
    """The chat session ``session_id``, or None."""
    with store.session() as s:
        return s.get(ChatSessionRow, session_id)


def list_sessions(store: MetadataStore, topic_id: str, owner: str | None = None) -> list[ChatSessionRow]:
    """The chat sessions of a Topic, newest first (only ``owner``'s when given)."""
    with store.session() as s:
        query = select(ChatSessionRow).where(ChatSessionRow.topic_id == topic_id).order_by(col(ChatSessionRow.created_at).desc())
        if owner is not None:
            query = query.where(ChatSessionRow.owner == owner)
        return list(s.exec(query).all())


def session_turns(store: MetadataStore, session_id: str, *, last: int | None = None) -> list[ChatTurnRow]:
    """The saved turns of a session, oldest first (only the newest ``last`` when given)."""
    with store.session() as s:
        query = select(ChatTurnRow).where(ChatTurnRow.session_id == session_id).order_by(col(ChatTurnRow.id).desc())
        rows = list(s.exec(query.limit(last) if last is not None else query).all())
    return rows[::-1]


def add_turn(
    store: MetadataStore,
    *,
    session_id: str,
    topic_id: str,
    title: str,
    question: str,
    answer: str,
    sources: list[dict[str, Any]],
    route: str,
    route_confidence: float | None,
    timings_ms: dict[str, float],
    route_reason: str = "",
    route_method: str = "",
    route_planned: str = "",
    owner: str = "",
) -> int:
    """Save a turn, creating its session (owned by ``owner``) with the first one; returns the turn's id."""
    with store.session() as s:
        if s.get(ChatSessionRow, session_id) is None:
            s.add(ChatSessionRow(id=session_id, topic_id=topic_id, title=title[:80], owner=owner))
            s.flush()
        row = ChatTurnRow(
            session_id=session_id,
            topic_id=topic_id,
            question=question,
            answer=answer,
            sources=list(sources),
            route=route,
            route_confidence=route_confidence,
            route_reason=route_reason,
            route_method=route_method,
            route_planned=route_planned,
            timings=dict(timings_ms),
        )
        s.add(row)
        s.flush()
        assert row.id is not None  # the database assigns the id at flush
        return row.id


def pictures_by_id(store: MetadataStore, picture_ids: list[str]) -> dict[str, PictureRow]:
    """The stored pictures among ``picture_ids``, by id."""
    if not picture_ids:
        return {}
    with store.session() as s:
        return {r.id: r for r in s.exec(select(PictureRow).where(col(PictureRow.id).in_(picture_ids))).all()}


def documents_by_id(store: MetadataStore, document_ids: list[str]) -> dict[str, DocumentRow]:
    """The documents among ``document_ids`` that still exist (not gone, not being deleted), by id."""
    if not document_ids:
        return {}
    with store.session() as s:
        query = select(DocumentRow).where(col(DocumentRow.id).in_(document_ids), DocumentRow.status != "deleting")
        return {r.id: r for r in s.exec(query).all()}
