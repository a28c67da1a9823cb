"""SQL queries and state changes of documents (and their pictures).

A document's row moves ``queued → processing → indexed | empty | failed``; the
functions here are the only writers of those changes. They touch SQL only: blob files
they make obsolete are returned for the caller to remove after the change is committed.
"""

from __future__ import annotations

import json
from typing import Any

from sqlmodel import col, select

from ragtopics.storage.metadata import DocumentRow, MetadataStore, PictureRow, utcnow


def get_document(store: MetadataStore, document_id: str) -> DocumentRow | None:
    """A document row, or None."""
    with store.session() as s:
        return s.get(DocumentRow, document_id)


def topic_documents(store: MetadataStore, topic_id: str) -> list[DocumentRow]:
    """The document rows of a Topic, by file name."""
    with store.session() as s:
        return list(s.exec(select(DocumentRow).where(DocumentRow.topic_id == topic_id).order_by(col(DocumentRow.file_name))).all())


def stage_upload(store: MetadataStore, *, document_id: str, topic_id: str, file_name: str, sha256: str, blob_path: str,
                 size_bytes: int) -> tuple[DocumentRow, str]:  # fmt: skip
    """Record a received file as the document's pending version, status ``queued``.

    Returns:
        The row, and the blob path of an older pending version it replaces ("" when none),
        which the caller removes.
    """
    obsolete = ""
    with store.session() as s:
        row = s.get(DocumentRow, document_id)
        if row is None:
            row = DocumentRow(id=document_id, topic_id=topic_id, file_name=file_name)
        elif row.pending_blob_path and row.pending_blob_path not in (blob_path, row.blob_path):
            obsolete = row.pending_blob_path
        row.pending_sha256, row.pending_blob_path = sha256, blob_path
        row.size_bytes, row.status, row.error, row.updated_at = size_bytes, "queued", "", utcnow()
        s.add(row)
    return row, obsolete


def set_job(store: MetadataStore, document_id: str, job_id: str) -> None:
    """Remember the job that indexes a document."""
    with store.session() as s:
        row = s.get(DocumentRow, document_id)
        row.job_id = job_id
        s.add(row)


def start_processing(store: MetadataStore, document_id: str) -> DocumentRow | None:
    """Mark a document ``processing``; None when it does not exist."""
    with store.session() as s:
        row = s.get(DocumentRow, document_id)
        if row is not None:
            row.status = "processing"
            s.add(row)
        return row


def finish(store: MetadataStore, document_id: str, *, status: str, chunk_count: int, warning: str,
           indexed_with: dict[str, Any], pictures: list[PictureRow]) -> tuple[DocumentRow, list[str]]:  # fmt: skip
    """Make the pending version the searchable one (``indexed`` or ``empty``) and replace its pictures.

    Returns:
        The row, and the blob paths no longer used (the previous file, its pictures not kept).
    """
    with store.session() as s:
        old_pictures = s.exec(select(PictureRow).where(PictureRow.document_id == document_id)).all()
        for row in old_pictures:
            s.delete(row)
        s.flush()  # a picture kept from the previous version is written again under the same id
        s.add_all(pictures)
        doc = s.get(DocumentRow, document_id)
        old_blob = doc.blob_path
        doc.content_sha256, doc.blob_path = doc.pending_sha256, doc.pending_blob_path
        doc.pending_sha256, doc.pending_blob_path = "", ""
        doc.status, doc.chunk_count, doc.warning, doc.error = status, chunk_count, warning, ""
        doc.indexed_with_json = json.dumps(indexed_with)
        doc.trace_json = "[]"
        doc.updated_at = utcnow()
        s.add(doc)
    kept = {row.blob_path for row in pictures}
    obsolete = [old_blob] if old_blob and old_blob != doc.blob_path else []
    obsolete += [row.blob_path for row in old_pictures if row.blob_path not in kept]
    return doc, obsolete


def picture_blobs(store: MetadataStore, document_id: str) -> set[str]:
    """Blob paths of the stored pictures of a document's searchable version."""
    with store.session() as s:
        return {row.blob_path for row in s.exec(select(PictureRow).where(PictureRow.document_id == document_id)).all()}


def fail(store: MetadataStore, document_id: str, error: str) -> tuple[DocumentRow | None, list[str]]:
    """Mark a document ``failed``, dropping its pending version; the searchable version, if any, stays.

    Returns:
        The row (None when it is gone), and the pending blob path to remove (if any).
    """
    with store.session() as s:
        doc = s.get(DocumentRow, document_id)
        if doc is None:
            return None, []
        obsolete = [doc.pending_blob_path] if doc.pending_blob_path and doc.pending_blob_path != doc.blob_path else []
        doc.pending_sha256, doc.pending_blob_path = "", ""
        doc.status = "failed"
        doc.error = error + (" (the previous version is still searchable)" if doc.content_sha256 else "")
        doc.trace_json = "[]"
        doc.updated_at = utcnow()
        s.add(doc)
    return doc, obsolete


def requeue_stored(store: MetadataStore, topic_id: str) -> list[str]:
    """Queue every stored file of a Topic for indexing again (re-embedding); returns the document ids."""
    with store.session() as s:
        rows = s.exec(select(DocumentRow).where(DocumentRow.topic_id == topic_id, DocumentRow.blob_path != "")).all()
        for row in rows:
            if not row.pending_blob_path:  # a newer upload already waiting is indexed instead
                row.pending_sha256, row.pending_blob_path = row.content_sha256, row.blob_path
            row.status, row.error, row.updated_at = "queued", "", utcnow()
            s.add(row)
        return [row.id for row in rows]
