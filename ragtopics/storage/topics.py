"""SQL queries for Topics and their settings versions."""

from __future__ import annotations

from sqlmodel import col, select

from ragtopics.storage.metadata import MetadataStore, TopicRow, TopicSettingsVersion, utcnow


def find_topic(store: MetadataStore, name_or_id: str) -> TopicRow | None:
    """The Topic with id ``name_or_id``, else the one with that name, else None."""
    with store.session() as s:
        return s.get(TopicRow, name_or_id) or s.exec(select(TopicRow).where(TopicRow.name == name_or_id)).first()


def all_topics(store: MetadataStore) -> list[TopicRow]:
    """Every Topic row, by name."""
    with store.session() as s:
        return list(s.exec(select(TopicRow).order_by(col(TopicRow.name))).all())


def insert_topic(store: MetadataStore, *, topic_id: str, name: str, kind: str, description: str, settings_json: str) -> bool:
    """Store a new Topic with settings version 1; False (and nothing stored) when its id or name is taken."""
    with store.session() as s:
        if s.get(TopicRow, topic_id) is not None or s.exec(select(TopicRow).where(TopicRow.name == name)).first():
            return False
        s.add(TopicRow(id=topic_id, name=name, kind=kind, description=description, settings_json=settings_json))
        s.flush()
        s.add(TopicSettingsVersion(topic_id=topic_id, version=1, settings_json=settings_json))
    return True


def save_settings(store: MetadataStore, topic_id: str, settings_json: str) -> int:
    """Store a Topic's settings as its next version; returns the new version number."""
    with store.session() as s:
        row = s.get(TopicRow, topic_id)
        row.settings_json = settings_json
        row.settings_version += 1
        row.updated_at = utcnow()
        s.add(row)
        s.add(TopicSettingsVersion(topic_id=topic_id, version=row.settings_version, settings_json=settings_json))
        return row.settings_version
