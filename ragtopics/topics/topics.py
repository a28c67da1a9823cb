"""Topics: create, read and change settings (every change is a new settings version)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragtopics.errors import InvalidSettingError, NotFoundError
from ragtopics.kinds import kind_named, kind_of
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import TopicSettings, load_settings, validate_settings
from ragtopics.storage import documents as document_store
from ragtopics.storage import topics as topic_store
from ragtopics.storage.locks import document_lock
from ragtopics.storage.metadata import TopicRow

log = logging.getLogger(__name__)

MAX_NAME_CHARS = 80


@dataclass(frozen=True, slots=True)
class Topic:
    """A Topic with validated settings.

    Attributes:
        id: ``topic-<hex>``.
        name: unique display name.
        kind: ``"rag"`` or ``"graphrag"``.
        description: free text.
        settings: the current settings, of the model for ``kind``
            (:class:`RagTopicSettings` or :class:`GraphRagTopicSettings`).
        settings_version: increases by one with every change.
    """

    id: str
    name: str
    kind: str
    description: str
    settings: TopicSettings
    settings_version: int


def topic_id_for(name: str) -> str:
    """Content-hash id of a Topic name: ``topic-`` + 12 hex digits of SHA-1."""
    return "topic-" + hashlib.sha1(name.strip().casefold().encode()).hexdigest()[:12]


def create_topic(
    rt: Runtime, name: str, *, kind: str = "rag", description: str = "", settings: dict[str, Any] | None = None
) -> Topic:
    """Create a Topic.

    Raises:
        InvalidSettingError: for a bad name, an existing name, an unknown kind or a bad setting.
    """
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise InvalidSettingError(f"a Topic name must be 1 to {MAX_NAME_CHARS} printable characters")
    model = validate_settings(kind, settings or {})
    _check_runnable(model)
    kind_named(kind).check_settings(rt, None, model, None)
    topic_id = topic_id_for(name)
    _check_connected(rt, name, topic_id, model)
    payload = model.model_dump(mode="json")
    if not topic_store.insert_topic(
        rt.metadata, topic_id=topic_id, name=name, kind=kind, description=description, settings=payload
    ):
        existing = topic_store.find_topic(rt.metadata, topic_id)
        same = (
            f"{name!r}" if existing is None or existing.name == name else f"{existing.name!r} (names are compared ignoring case)"
        )
        raise InvalidSettingError(f"a Topic called {same} already exists")
    log.info("created %s Topic %r (%s)", kind, name, topic_id)
    topic = get_topic(rt, topic_id)
    kind_of(topic).settings_saved(rt, topic, None)
    return topic


def get_topic(rt: Runtime, name_or_id: str) -> Topic:
    """A Topic by id or by name.

    Raises:
        NotFoundError: when there is no such Topic.
    """
    row = topic_store.find_topic(rt.metadata, name_or_id)
    if row is None:
        raise NotFoundError(f"no Topic called {name_or_id!r}; create it first (`ragtopics topic create NAME`)")
    return _topic(row)


def list_topics(rt: Runtime) -> list[Topic]:
    """Every Topic, by name."""
    return [_topic(r) for r in topic_store.all_topics(rt.metadata)]


def update_settings(rt: Runtime, name_or_id: str, changes: dict[str, Any]) -> Topic:
    """Apply setting changes as a new settings version.

    Raises:
        InvalidSettingError: when a change is invalid; nothing is stored then.
        NotFoundError: when there is no such Topic.
    """
    topic = get_topic(rt, name_or_id)
    merged = {**topic.settings.model_dump(), **changes}
    model = validate_settings(topic.kind, merged)
    if {"docling_settings", "docling_server"} & set(changes):
        _check_runnable(model)
    if "mcp_interfaces" in changes:
        _check_connected(rt, topic.name, topic.id, model)
    kind = kind_of(topic)
    kind.check_settings(rt, topic, model, set(changes))
    payload = model.model_dump(mode="json")
    topic_store.save_settings(rt.metadata, topic.id, payload)
    topic = get_topic(rt, topic.id)
    kind.settings_saved(rt, topic, set(changes))
    return topic


def _check_connected(rt: Runtime, name: str, topic_id: str, model: TopicSettings) -> None:
    """Refuse MCP Interfaces that name no Topic, or the Topic itself.

    Raises:
        InvalidSettingError: naming the unknown Topics.
    """
    names = list(model.mcp_interfaces)
    if any(n in (name, topic_id) for n in names):
        raise InvalidSettingError(f"mcp_interfaces: Topic {name!r} cannot be connected to itself")
    unknown = [n for n in names if topic_store.find_topic(rt.metadata, n) is None]
    if unknown:
        raise InvalidSettingError(
            f"mcp_interfaces: no Topic called {', '.join(repr(n) for n in unknown)}; "
            "connect Topics that exist (see `ragtopics topic list`)"
        )


def _check_runnable(model: TopicSettings) -> None:
    """Refuse settings that validate but cannot run on this installation, with the reason.

    Raises:
        InvalidSettingError: OCR switched on where no OCR engine can run.
    """
    if model.docling_settings.ocr:
        # deferred: the ingest pipeline imports this module (get_topic) at module level
        from ragtopics.ingest.docling import ocr_unavailable_reason

        reason = ocr_unavailable_reason(model.docling_server)
        if reason:
            raise InvalidSettingError(
                f"docling_settings: OCR cannot be switched on here: {reason}. Keep ocr false, or set "
                "docling_server to a docling-serve URL that runs OCR"
            )


def _topic(row: TopicRow) -> Topic:
    return Topic(
        id=row.id,
        name=row.name,
        kind=row.kind,
        description=row.description,
        settings=load_settings(row.kind, row.settings),
        settings_version=row.settings_version,
    )


def reembed_topic(rt: Runtime, name_or_id: str, enqueue: Callable[[Runtime, Any], str]) -> list[str]:
    """Re-embed every stored document of a Topic with the configured embedding model.

    Drops the Topic's chunk index (and the record of the embedder it was built with), makes the kind's
    own vectors (a GraphRAG Topic's entity vectors) again with the configured model
    (:meth:`~ragtopics.kinds.TopicKind.reembed`), then queues each document's
    stored file for indexing again, as a re-upload would.
    Until the jobs have run, the Topic finds nothing.

    Args:
        rt: the runtime.
        name_or_id: the Topic.
        enqueue: ``enqueue(rt, document_row) -> job id``, enqueues the row's staged version
            (``ragtopics.documents.uploads.enqueue_document``).

    Returns:
        The ids of the queued jobs, one per document with a stored file.

    Raises:
        NotFoundError: when there is no such Topic.
    """
    topic = get_topic(rt, name_or_id)
    rt.chunk_index(topic.id).drop()
    kind_of(topic).reembed(rt, topic)
    jobs = []
    for document_id in document_store.stored_documents(rt.metadata, topic.id):
        with document_lock(rt.redis, document_id):
            row = document_store.requeue_stored(rt.metadata, document_id)
        if row is not None:
            jobs.append(enqueue(rt, row))
    log.info("re-embedding %d document(s) of Topic %r", len(jobs), topic.name)
    return jobs
