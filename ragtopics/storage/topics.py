"""SQL queries for Topics and their settings versions."""

from __future__ import annotations

from sqlalchemy import ColumnElement, func
from sqlmodel import SQLModel, col, delete, select

from ragtopics.errors import NotFoundError
from ragtopics.storage.metadata import (
    ChatSessionRow,
    ChatTurnRow,
    DocumentRow,
    GraphCorrectionRow,
    MetadataStore,
    PictureRow,
    PromptOverrideRow,
    TopicRow,
    TopicSettingsVersion,
    TraceRow,
    utcnow,
)


def find_topic(store: MetadataStore, name_or_id: str) -> TopicRow | None:
    """The Topic with id ``name_or_id``, else the one with that name, else None."""
    with store.session() as s:
        return s.get(TopicRow, name_or_id) or s.exec(select(TopicRow).where(TopicRow.name == name_or_id)).first()


def all_topics(store: MetadataStore) -> list[TopicRow]:
    """Every Topic row, by name."""
    with store.session() as s:
        return list(s.exec(select(TopicRow).order_by(col(TopicRow.name))).all())


def insert_topic(
    store: MetadataStore, *, topic_id: str, name: str, kind: str, description: str, settings: dict[str, object]
) -> bool:
    """Store a new Topic with settings version 1 (a JSON-ready dict); False (and nothing stored) when its id or name is taken."""
    with store.session() as s:
        if s.get(TopicRow, topic_id) is not None or s.exec(select(TopicRow).where(TopicRow.name == name)).first():
            return False
        s.add(TopicRow(id=topic_id, name=name, kind=kind, description=description, settings=settings))
        s.flush()
        s.add(TopicSettingsVersion(topic_id=topic_id, version=1, settings=settings))
    return True


def save_settings(store: MetadataStore, topic_id: str, settings: dict[str, object]) -> int:
    """Store a Topic's whole new settings (a JSON-ready dict) as its next version; returns the new version number."""
    with store.session() as s:
        row = s.get(TopicRow, topic_id)
        if row is None:
            raise NotFoundError(f"no Topic with id {topic_id!r}")
        row.settings = settings
        row.settings_version += 1
        row.updated_at = utcnow()
        s.add(row)
        s.add(TopicSettingsVersion(topic_id=topic_id, version=row.settings_version, settings=settings))
        return row.settings_version


def _topic_tables(topic_id: str) -> list[tuple[type[SQLModel], ColumnElement[bool]]]:
    """Every table holding rows of a Topic, children before parents, with the condition that selects them."""
    return [
        (ChatTurnRow, col(ChatTurnRow.topic_id) == topic_id),
        (ChatSessionRow, col(ChatSessionRow.topic_id) == topic_id),
        (PictureRow, col(PictureRow.topic_id) == topic_id),
        (DocumentRow, col(DocumentRow.topic_id) == topic_id),
        (TraceRow, col(TraceRow.topic_id) == topic_id),
        (GraphCorrectionRow, col(GraphCorrectionRow.topic_id) == topic_id),
        (PromptOverrideRow, col(PromptOverrideRow.scope) == topic_id),
        (TopicSettingsVersion, col(TopicSettingsVersion.topic_id) == topic_id),
        (TopicRow, col(TopicRow.id) == topic_id),
    ]


def delete_topic_rows(store: MetadataStore, topic_id: str) -> dict[str, int]:
    """Delete a Topic and every row that belongs to it, in one transaction (children first).

    Returns:
        Rows deleted, by table name.
    """
    with store.session() as s:
        return {
            str(table.__tablename__): s.exec(delete(table).where(cond)).rowcount or 0 for table, cond in _topic_tables(topic_id)
        }


def count_topic_rows(store: MetadataStore, topic_id: str) -> dict[str, int]:
    """How many rows of each table belong to a Topic (for reports and tests)."""
    with store.session() as s:
        return {
            str(table.__tablename__): s.exec(select(func.count()).select_from(table).where(cond)).one()
            for table, cond in _topic_tables(topic_id)
        }
