"""SQL queries and state changes of documents (and their pictures): the one owner of a document's state.

A document moves through :class:`DocumentStatus`::

    (new) ─► queued ─► processing ─► indexed | empty | failed
               ▲  │         │              │
               └──┴─────────┴──────────────┘   a new upload queues a new version
    any state ─► deleting ─► (row removed: gone)

Every version to index has its own job id (``DocumentRow.job_id``), written in the
same SQL transaction as the version's blob path (``pending_blob_path``). A job
passes its id to :func:`start_processing`, :func:`check_current`, :func:`finish`
and :func:`fail`; a job whose id is no longer the row's is *superseded* (a newer
upload replaced its version, or the document is being deleted) and changes nothing.

Each change reads the row and writes it back. SQLite has no row locks, so two
writers could interleave there (a lost update); callers hold the document's lock
(:func:`ragtopics.storage.locks.document_lock`) around every change, and the rows are
also read ``FOR UPDATE`` for databases that have row locks.

The functions here touch SQL only: blob files they make obsolete are returned for
the caller to remove after the change is committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import func, or_
from sqlmodel import col, delete, select

from ragtopics.errors import StateTransitionError, SupersededError
from ragtopics.storage.metadata import DocumentRow, MetadataStore, PictureRow, TopicRow, utcnow


class DocumentStatus(StrEnum):
    """The states of a document (the values stored in ``DocumentRow.status``)."""

    QUEUED = "queued"
    PROCESSING = "processing"
    INDEXED = "indexed"
    EMPTY = "empty"
    FAILED = "failed"
    DELETING = "deleting"


_S = DocumentStatus
#: Allowed changes. A new upload (or a re-embed) may queue a new version from any state but ``deleting``.
TRANSITIONS: dict[DocumentStatus, frozenset[DocumentStatus]] = {
    _S.QUEUED: frozenset({_S.QUEUED, _S.PROCESSING, _S.FAILED, _S.DELETING}),
    _S.PROCESSING: frozenset({_S.QUEUED, _S.INDEXED, _S.EMPTY, _S.FAILED, _S.DELETING}),
    _S.INDEXED: frozenset({_S.QUEUED, _S.DELETING}),
    _S.EMPTY: frozenset({_S.QUEUED, _S.DELETING}),
    _S.FAILED: frozenset({_S.QUEUED, _S.DELETING}),
    _S.DELETING: frozenset({_S.DELETING}),
}

#: Why a job stops early.
SUPERSEDED_BY_UPLOAD = "superseded by a newer upload"
SUPERSEDED_BY_DELETE = "cancelled: the document was deleted"


def _move(row: DocumentRow, to: DocumentStatus) -> None:
    """Change a row's status, checking the change against :data:`TRANSITIONS`.

    Raises:
        StateTransitionError: for a change the state machine does not allow.
    """
    current = DocumentStatus(row.status)
    if to not in TRANSITIONS[current]:
        raise StateTransitionError(f"{row.file_name}: a document cannot go from {current} to {to}")
    row.status = to.value
    row.updated_at = utcnow()


def new_job_id() -> str:
    """A fresh job id (32 hex digits), chosen before the job is enqueued."""
    return uuid.uuid4().hex


def _current(row: DocumentRow | None, job_id: str) -> DocumentRow:
    """The row, when ``job_id`` is still the job of its pending version.

    Raises:
        SupersededError: when the document is gone or deleting, or a newer upload replaced the job's version.
    """
    if row is None or row.status == _S.DELETING:
        raise SupersededError(SUPERSEDED_BY_DELETE)
    if row.job_id != job_id:
        raise SupersededError(SUPERSEDED_BY_UPLOAD)
    return row


def _locked(s, document_id: str) -> DocumentRow | None:
    """A document row read for a change (``SELECT ... FOR UPDATE`` where the database has row locks)."""
    return s.get(DocumentRow, document_id, with_for_update=True)


def _locked_rows(s, document_ids: list[str]) -> dict[str, DocumentRow]:
    """Several document rows read for a change in one query (see :func:`_locked`), by id."""
    query = select(DocumentRow).where(col(DocumentRow.id).in_(sorted(set(document_ids)))).with_for_update()
    return {row.id: row for row in s.exec(query).all()}


def get_document(store: MetadataStore, document_id: str) -> DocumentRow | None:
    """A document row, or None."""
    with store.session() as s:
        return s.get(DocumentRow, document_id)


def topic_documents(store: MetadataStore, topic_id: str) -> list[DocumentRow]:
    """The document rows of a Topic, by file name."""
    with store.session() as s:
        return list(
            s.exec(select(DocumentRow).where(DocumentRow.topic_id == topic_id).order_by(col(DocumentRow.file_name))).all()
        )


#: The columns of a document that its Topic's list shows (:func:`document_list`).
LIST_COLUMNS = (
    "id",
    "file_name",
    "status",
    "chunk_count",
    "size_bytes",
    "error",
    "warning",
    "job_id",
    "indexed_with",
    "content_sha256",
    "pending_sha256",
    "updated_at",
)


def document_list(store: MetadataStore, topic_id: str) -> list[Any]:
    """The :data:`LIST_COLUMNS` of every document of a Topic, by file name: rows read as tuples (with the
    columns as attributes), not as ORM objects, for lists read often (the Upload tab's)."""
    columns = [getattr(DocumentRow, name) for name in LIST_COLUMNS]
    with store.session() as s:
        return list(s.exec(select(*columns).where(DocumentRow.topic_id == topic_id).order_by(col(DocumentRow.file_name))).all())


def documents_stamp(store: MetadataStore, name_or_id: str) -> tuple[str, int, str] | None:
    """What changes whenever the document rows of a Topic change: ``(topic id, number of rows, latest
    updated_at)``, read in one aggregate query (no row is loaded); None when there is no such Topic.

    Every change of a row goes through this module and sets ``updated_at`` to now (:func:`_move`,
    :func:`stage_upload`), a removed row lowers the count; so a list read with the same stamp is still
    current, except when a writer's clock is behind the latest row's (callers re-read now and then).
    """
    with store.session() as s:
        topic_id = s.exec(
            select(TopicRow.id)
            .where(or_(col(TopicRow.id) == name_or_id, col(TopicRow.name) == name_or_id))
            .order_by(col(TopicRow.id) != name_or_id)
        ).first()
        if topic_id is None:
            return None
        count, latest = s.exec(
            select(func.count(col(DocumentRow.id)), func.max(DocumentRow.updated_at)).where(DocumentRow.topic_id == topic_id)
        ).one()
    return topic_id, int(count or 0), str(latest or "")


def stage_upload(
    store: MetadataStore, *, document_id: str, topic_id: str, file_name: str, sha256: str, blob_path: str, size_bytes: int
) -> tuple[DocumentRow, str]:
    """Record a received file as the document's pending version with a new job id, status ``queued``.

    A job still working on an older pending version is superseded from now on.

    Returns:
        The row (its ``job_id`` is the id to enqueue the job under), and the blob path of
        an older pending version it replaces ("" when none), which the caller removes.

    Raises:
        SupersededError: when the document is being deleted (upload it again once it is gone).
    """
    obsolete = ""
    with store.session() as s:
        row = _locked(s, document_id)
        if row is None:
            row = DocumentRow(id=document_id, topic_id=topic_id, file_name=file_name, status=_S.QUEUED.value)
        else:
            if row.status == _S.DELETING:
                raise SupersededError(f"{file_name} is being deleted; upload it again when the delete has finished")
            if row.pending_blob_path and row.pending_blob_path not in (blob_path, row.blob_path):
                obsolete = row.pending_blob_path
            _move(row, _S.QUEUED)
        row.pending_sha256, row.pending_blob_path, row.job_id = sha256, blob_path, new_job_id()
        row.size_bytes, row.error, row.updated_at = size_bytes, "", utcnow()
        s.add(row)
    return row, obsolete


def start_processing(store: MetadataStore, document_id: str, job_id: str) -> DocumentRow:
    """Mark a document ``processing`` for the job of its pending version.

    Raises:
        SupersededError: when the job's version was replaced or the document deleted.
    """
    row = start_many(store, [(document_id, job_id)])[job_id]
    if isinstance(row, str):
        raise SupersededError(row)
    return row


def start_many(store: MetadataStore, pairs: list[tuple[str, str]]) -> dict[str, DocumentRow | str]:
    """:func:`start_processing` for several ``(document id, job id)`` pairs in one transaction (a batch of uploads).

    Returns:
        ``{job id: the document's row}`` for each version marked ``processing``, ``{job id: reason}``
        (:data:`SUPERSEDED_BY_UPLOAD` or :data:`SUPERSEDED_BY_DELETE`) for each one no longer wanted.
    """
    out: dict[str, DocumentRow | str] = {}
    with store.session() as s:
        rows = _locked_rows(s, [document_id for document_id, _ in pairs])
        for document_id, job_id in pairs:
            try:
                row = _current(rows.get(document_id), job_id)
            except SupersededError as exc:
                out[job_id] = str(exc)
                continue
            _move(row, _S.PROCESSING)
            s.add(row)
            out[job_id] = row
    return out


def check_current(store: MetadataStore, document_id: str, job_id: str) -> None:
    """Check, between two steps of a job, that its version is still the one wanted.

    Raises:
        SupersededError: when a newer upload replaced it or the document is being deleted.
    """
    with store.session() as s:
        _current(s.get(DocumentRow, document_id), job_id)


def finish(
    store: MetadataStore,
    document_id: str,
    job_id: str,
    *,
    status: DocumentStatus,
    chunk_count: int,
    warning: str,
    indexed_with: dict[str, Any],
    pictures: list[PictureRow],
    before_commit: Callable[[], None] | None = None,
) -> tuple[DocumentRow, list[str]]:
    """Make the job's pending version the searchable one (``indexed`` or ``empty``) and replace its pictures.

    ``before_commit``: as in :func:`finish_many` (the chunk swap, run inside the transaction).

    Returns:
        The row, and the blob paths no longer used (the previous file, its pictures not kept).

    Raises:
        SupersededError: when the job's version was replaced or the document deleted (nothing changes).
    """
    outcome = Outcome(document_id, job_id, status, chunk_count, warning, indexed_with, pictures)
    return finish_many(store, [outcome], before_commit)[0]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a job stored for a document's pending version (see :func:`finish`, same arguments)."""

    document_id: str
    job_id: str
    status: DocumentStatus
    chunk_count: int
    warning: str
    indexed_with: dict[str, Any]
    pictures: list[PictureRow]


def finish_many(
    store: MetadataStore, outcomes: list[Outcome], before_commit: Callable[[], None] | None = None
) -> list[tuple[DocumentRow, list[str]]]:
    """:func:`finish` for several documents in one transaction (a batch of uploads); all or none change.

    Args:
        before_commit: called once the rows are written to the open transaction (and any SQL error
            has surfaced), right before it commits: the chunk swap that makes these versions
            searchable. If it raises, the transaction rolls back, so the rows and the index change
            together or not at all (a commit that fails after the swap is undone by the caller, which
            parked the previous chunks: :func:`ragtopics.documents.versions.store_versions`).

    Returns:
        Per outcome, in order: the row and the blob paths no longer used.

    Raises:
        SupersededError: when one of the versions was replaced or its document deleted (nothing changes).
        Whatever ``before_commit`` raises (nothing changes in SQL).
    """
    out = []
    with store.session() as s:
        ids = [o.document_id for o in outcomes]
        docs = _locked_rows(s, ids)
        stored: dict[str, list[PictureRow]] = {}
        for row in s.exec(select(PictureRow).where(col(PictureRow.document_id).in_(ids))).all():
            stored.setdefault(row.document_id, []).append(row)
        for o in outcomes:
            doc = _current(docs.get(o.document_id), o.job_id)
            old_pictures = stored.get(o.document_id, [])
            for row in old_pictures:
                s.delete(row)
            if old_pictures:
                s.flush()  # a picture kept from the previous version is written again under the same id
            s.add_all(o.pictures)
            old_blob = doc.blob_path
            doc.content_sha256, doc.blob_path = doc.pending_sha256, doc.pending_blob_path
            doc.pending_sha256, doc.pending_blob_path = "", ""
            _move(doc, DocumentStatus(o.status))
            doc.chunk_count, doc.warning, doc.error = o.chunk_count, o.warning, ""
            doc.indexed_with = dict(o.indexed_with)
            s.add(doc)
            kept = {row.blob_path for row in o.pictures}
            obsolete = [old_blob] if old_blob and old_blob != doc.blob_path else []
            obsolete += [row.blob_path for row in old_pictures if row.blob_path not in kept]
            out.append((doc, obsolete))
        if before_commit is not None:
            s.flush()  # constraint and lock errors surface here, before the swap
            before_commit()
    return out


def current_jobs(store: MetadataStore, pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Which ``(document id, job id)`` pairs are still current (:func:`check_current` for many, one query).

    Returns:
        ``{job id: ""}`` for the current ones, ``{job id: reason}`` for the others
        (:data:`SUPERSEDED_BY_UPLOAD` or :data:`SUPERSEDED_BY_DELETE`).
    """
    with store.session() as s:
        ids = sorted({document_id for document_id, _ in pairs})
        rows = {r.id: r for r in s.exec(select(DocumentRow).where(col(DocumentRow.id).in_(ids))).all()}
    out = {}
    for document_id, job_id in pairs:
        try:
            _current(rows.get(document_id), job_id)
            out[job_id] = ""
        except SupersededError as exc:
            out[job_id] = str(exc)
    return out


def picture_blobs(store: MetadataStore, document_id: str) -> set[str]:
    """Blob paths of the stored pictures of a document's searchable version."""
    with store.session() as s:
        return {row.blob_path for row in s.exec(select(PictureRow).where(col(PictureRow.document_id) == document_id)).all()}


def fail(
    store: MetadataStore, document_id: str, job_id: str, error: str, before_commit: Callable[[], None] | None = None
) -> tuple[DocumentRow | None, list[str]]:
    """Mark a document ``failed`` for its current job, dropping the pending version; the searchable version, if any, stays.

    A superseded job changes nothing (the newer upload, or the delete, owns the row).

    Args:
        before_commit: run inside the transaction, the row locked and changed, right before the commit; if it
            raises, nothing is written (the document lock's :meth:`~ragtopics.storage.locks.Fence.check`, so
            that a holder that lost the lock cannot mark the row failed).

    Returns:
        The row (None when the job was superseded), and the pending blob path to remove (if any).
    """
    with store.session() as s:
        try:
            doc = _current(_locked(s, document_id), job_id)
        except SupersededError:
            return None, []
        obsolete = [doc.pending_blob_path] if doc.pending_blob_path and doc.pending_blob_path != doc.blob_path else []
        doc.pending_sha256, doc.pending_blob_path = "", ""
        _move(doc, _S.FAILED)
        doc.error = error + (" (the previous version is still searchable)" if doc.content_sha256 else "")
        s.add(doc)
        if before_commit is not None:
            s.flush()
            before_commit()
    return doc, obsolete


def begin_delete(store: MetadataStore, document_id: str) -> DocumentRow | None:
    """Mark a document ``deleting`` and clear its job id, so a job still working on it stops at its next step.

    Returns:
        The row, or None when there is no such document. Deleting twice is allowed (a
        delete that stopped half-way is finished by the next one).
    """
    with store.session() as s:
        row = _locked(s, document_id)
        if row is None:
            return None
        _move(row, _S.DELETING)
        row.job_id = ""
        s.add(row)
        return row


def remove(store: MetadataStore, document_id: str) -> list[str]:
    """Delete a ``deleting`` document's row and its picture rows: the document is gone.

    Returns:
        Every blob path the rows named (file versions and pictures), for the caller to remove.

    Raises:
        StateTransitionError: when the document was not marked ``deleting`` first.
    """
    with store.session() as s:
        row = _locked(s, document_id)
        if row is None:
            return []
        if row.status != _S.DELETING:
            raise StateTransitionError(f"{row.file_name}: a document is removed only after it is marked deleting")
        pictures = s.exec(select(PictureRow).where(PictureRow.document_id == document_id)).all()
        blobs = [p for p in (row.blob_path, row.pending_blob_path) if p] + [p.blob_path for p in pictures if p.blob_path]
        s.exec(delete(PictureRow).where(col(PictureRow.document_id) == document_id))
        s.delete(row)
    return blobs


def job_ids(store: MetadataStore, topic_id: str) -> list[str]:
    """The job ids the document rows of a Topic name (the latest job of each document)."""
    with store.session() as s:
        return [j for j in s.exec(select(DocumentRow.job_id).where(DocumentRow.topic_id == topic_id)).all() if j]


def fail_enqueue(store: MetadataStore, document_id: str, job_id: str, reason: str) -> list[str]:
    """Mark a document ``failed`` whose job could not be enqueued, so it does not stay ``queued`` forever.

    Returns:
        The pending blob path to remove (if any).
    """
    _, obsolete = fail(store, document_id, job_id, f"the upload could not be queued for indexing ({reason}); upload it again")
    return obsolete


def stored_documents(store: MetadataStore, topic_id: str) -> list[str]:
    """Ids of the documents of a Topic that have a stored, searchable file (not being deleted)."""
    with store.session() as s:
        query = select(DocumentRow.id).where(
            DocumentRow.topic_id == topic_id, DocumentRow.blob_path != "", DocumentRow.status != _S.DELETING.value
        )
        return list(s.exec(query).all())


def requeue_stored(store: MetadataStore, document_id: str) -> DocumentRow | None:
    """Queue a document's stored file for indexing again (re-embedding), with a new job id.

    A newer upload already waiting is indexed instead of the stored file.

    Returns:
        The queued row (its ``job_id`` is the id to enqueue under), or None when the
        document is gone, being deleted, or has no stored file.
    """
    with store.session() as s:
        row = _locked(s, document_id)
        if row is None or row.status == _S.DELETING or not row.blob_path:
            return None
        if not row.pending_blob_path:
            row.pending_sha256, row.pending_blob_path = row.content_sha256, row.blob_path
        _move(row, _S.QUEUED)
        row.job_id, row.error = new_job_id(), ""
        s.add(row)
        return row


def requeue_lost(store: MetadataStore, document_id: str, job_id: str) -> DocumentRow | None:
    """Put a document whose job chain was lost back to ``queued`` for the same job (the same pending version).

    Returns:
        The row, or None when the job was superseded meanwhile (a newer upload or a delete owns the row).
    """
    with store.session() as s:
        try:
            row = _current(_locked(s, document_id), job_id)
        except SupersededError:
            return None
        _move(row, _S.QUEUED)
        s.add(row)
        return row
