"""Receiving uploads (phase A step 1) and listing a Topic's documents."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx
import redis

from ragtopics.documents.sniff import check_content, check_zip_archive
from ragtopics.errors import NotFoundError, ReadError, RefusedFileError, StoreUnavailableError, SupersededError
from ragtopics.jobs.queue import enqueue_ingest, enqueue_ingest_batch, mark_awaiting_queue
from ragtopics.kinds import kind_of
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import RagTopicSettings
from ragtopics.storage import documents as document_store
from ragtopics.storage.locks import document_lock
from ragtopics.storage.metadata import DocumentRow
from ragtopics.storage.traces import load_trace
from ragtopics.text.file_types import DOCUMENT_TYPES, IMAGE_TYPES, extension_of

if TYPE_CHECKING:
    from ragtopics.ingest.cost import Figures
    from ragtopics.topics.topics import Topic

log = logging.getLogger(__name__)

MAX_FILE_NAME_BYTES = 255
#: File names Windows reserves for devices, whatever their extension (the documentation of CreateFile, "Naming Files").
RESERVED_NAMES = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))})
#: Office files are zip archives: checked for zip bombs when received.
ZIP_CONTAINER_TYPES: frozenset[str] = frozenset({"docx", "xlsx", "pptx"})


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """A row of the Indexed Documents list.

    Attributes:
        id, file_name, status, chunk_count, size_bytes, error, warning: as stored.
        indexed_with: the settings the searchable version was indexed with.
        job_id: the RQ job of the latest upload.
        content_sha256: SHA-256 (hex) of the searchable version ("" while none is).
        pending_sha256: SHA-256 (hex) of the version queued or processing ("" when none is).
        updated_at: when the row last changed (UTC, naive), or None.
    """

    id: str
    file_name: str
    status: str
    chunk_count: int
    size_bytes: int
    error: str
    warning: str
    job_id: str
    indexed_with: dict[str, Any] = field(default_factory=dict)
    content_sha256: str = ""
    pending_sha256: str = ""
    updated_at: datetime | None = None


def clean_file_name(raw: str) -> str:
    """A safe file name: the last path component, NFC, no control characters, at most 255 bytes, ``_`` before a
    name Windows reserves (``CON.txt`` → ``_CON.txt``).

    Raises:
        RefusedFileError: when nothing usable is left (empty, ``.`` or ``..``).
    """
    name = unicodedata.normalize("NFC", raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C").strip()
    if not name.strip("."):
        raise RefusedFileError(f"the file name {raw!r} is not usable; rename the file and upload it again")
    stem, dot, ext = name.partition(".")
    if stem.strip().upper() in RESERVED_NAMES:  # CON, NUL, COM1...: a file that cannot be saved under Windows
        name = f"_{name}"
    while len(name.encode()) > MAX_FILE_NAME_BYTES:
        stem, dot, ext = name.rpartition(".")
        name = (stem[:-1] + dot + ext) if dot and stem else name[:-1]
    return name


def is_docling_available(docling_server: str) -> bool:
    """Whether documents can be converted: the docling library is installed (``embedded``), or a
    docling-serve URL answers its health check within 3 s."""
    if docling_server == "embedded":
        return importlib.util.find_spec("docling") is not None
    if not docling_server.startswith(("http://", "https://")):
        return False

    try:
        return httpx.get(docling_server.rstrip("/") + "/health", timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return False


def describe_types(extensions: list[str], *, limit: int = 16) -> str:
    """A readable list of file types: all of them when few, else the first ``limit`` and a count."""
    if len(extensions) <= limit:
        return ", ".join(extensions)
    shown: list[str] = [
        e for e in ("pdf", "docx", "xlsx", "pptx", "txt", "md", "csv", "json", "xml", "yaml", "html", "py") if e in extensions
    ]
    shown += [e for e in extensions if e not in shown][: limit - len(shown)]
    return f"{', '.join(shown)} and {len(extensions) - len(shown)} more (see the Topic's File Types)"


def document_id_for(topic_id: str, file_name: str) -> str:
    """Content-hash id of a file name within a Topic: ``doc-`` + 16 hex digits of SHA-1."""
    return "doc-" + hashlib.sha1(f"{topic_id}\0{file_name}".encode()).hexdigest()[:16]


def receive_upload(rt: Runtime, topic: Topic, file_name: str, data: bytes) -> DocumentRow:
    """Check an upload and store the original file as the document's pending version.

    Every check runs before anything is stored: the name, the type, the Topic's size
    limit and, for Office files (zip archives), the archive itself (zip bombs). A file
    with a name already stored keeps its searchable version until the new one has been
    indexed; a job still indexing an older upload of it is superseded. The caller then
    enqueues the returned row's job (:func:`upload_file` does both); until then the crash recovery leaves
    the version alone (:func:`~ragtopics.jobs.queue.mark_awaiting_queue`, for 10 minutes at most).

    Raises:
        RefusedFileError: for an unusable name, a type the Topic does not accept, a file
            over the Topic's size limit, or an archive that is corrupt or a zip bomb.
            Nothing is stored then.
        SupersededError: when a document of that name is being deleted right now.
    """
    name = clean_file_name(file_name)
    ext = extension_of(name)
    accepted = topic.settings.file_types
    if ext not in accepted:
        raise RefusedFileError(
            f"{name} was refused: Topic {topic.name!r} accepts only these file types: {describe_types(accepted)}"
        )
    if ext in DOCUMENT_TYPES and not is_docling_available(topic.settings.docling_server):
        raise RefusedFileError(
            f"{name} was refused: it is a document, and Docling is needed to read it. The Docling Server of Topic "
            f"{topic.name!r} ({topic.settings.docling_server!r}) is not available; set it to 'embedded' or to a "
            "docling-serve URL that answers."
        )
    limit = int(topic.settings.max_file_size_mb * 1024 * 1024)
    if len(data) > limit:
        raise RefusedFileError(
            f"{name} was refused: it is {len(data) / 1048576:.1f} MB, the limit of this Topic is {topic.settings.max_file_size_mb:g} MB"
        )
    try:
        check_content(name, ext, data)
        if ext in ZIP_CONTAINER_TYPES:
            check_zip_archive(data, file_name=name)
    except ReadError as exc:
        raise RefusedFileError(f"{name} was refused: {exc}") from exc
    doc_id = document_id_for(topic.id, name)
    with document_lock(rt.redis, doc_id):  # waits while a job swaps in an older version, or a delete runs
        rel, digest = rt.blobs.put(topic.id, doc_id, name, data)
        try:
            row, obsolete = document_store.stage_upload(
                rt.metadata,
                document_id=doc_id,
                topic_id=topic.id,
                file_name=name,
                sha256=digest,
                blob_path=rel,
                size_bytes=len(data),
            )
        except SupersededError:
            current = document_store.get_document(rt.metadata, doc_id)
            if rel not in ((current.blob_path, current.pending_blob_path) if current else ()):
                rt.blobs.remove(rel)
            raise
        # under the lock, where the crash recovery reads the row again: its job is not queued yet, and not lost
        mark_awaiting_queue(rt, row.job_id)
        if obsolete:
            rt.blobs.remove(obsolete)
    log.info("received %s (%d bytes) for Topic %s", name, len(data), topic.name)
    return row


def enqueue_document(rt: Runtime, row: DocumentRow) -> str:
    """Enqueue the indexing job of a staged version (``row.job_id``, ``row.pending_blob_path``).

    Returns:
        The job id.

    Raises:
        StoreUnavailableError: when the job cannot be enqueued; the document is then
            marked ``failed`` with the reason (never left ``queued``) and its pending file removed.
    """
    try:
        return enqueue_ingest(rt, row.topic_id, row.id, job_id=row.job_id, blob_path=row.pending_blob_path)
    except (redis.RedisError, OSError) as exc:
        raise _not_queued(rt, [row], exc) from exc


def enqueue_documents(rt: Runtime, rows: list[DocumentRow]) -> str:
    """Enqueue one shared indexing job for several staged versions of one Topic (see :class:`BatchedUploads`).

    Returns:
        The shared job's id.

    Raises:
        StoreUnavailableError: as :func:`enqueue_document`, for every one of the documents.
    """
    try:
        return enqueue_ingest_batch(rt, rows[0].topic_id, rows)
    except (redis.RedisError, OSError) as exc:
        raise _not_queued(rt, rows, exc) from exc


def _not_queued(rt: Runtime, rows: list[DocumentRow], exc: Exception) -> StoreUnavailableError:
    """Mark documents whose job could not be enqueued ``failed`` (never left ``queued``); the error to raise."""
    names = ", ".join(row.file_name for row in rows)
    log.error("could not enqueue %s: %s", names, exc)
    reason = f"the job queue in Redis is not reachable: {exc}"
    for row in rows:
        try:
            with document_lock(rt.redis, row.id, wait_s=5):
                obsolete = document_store.fail_enqueue(rt.metadata, row.id, row.job_id, reason)
        except (redis.RedisError, StoreUnavailableError):  # Redis is down: the SQL row still must not stay queued
            obsolete = document_store.fail_enqueue(rt.metadata, row.id, row.job_id, reason)
        for path in obsolete:
            rt.blobs.remove(path)
    return StoreUnavailableError(
        f"{names} {'was' if len(rows) == 1 else 'were'} stored but could not be queued for "
        f"indexing ({reason}); upload {'it' if len(rows) == 1 else 'them'} again when Redis is back"
    )


#: Largest file (bytes) indexed in a job shared with other files of the same upload.
BATCH_FILE_BYTES = 256 * 1024
#: Most files in one shared indexing job. The more chunks are embedded together, the better they
#: pack into length-sorted batches: ``make bench`` measured one-passage files at 0.84x the embedding
#: model's raw speed with 32 files a job, 0.89x with 64 and 0.93x with 150.
BATCH_FILES = 128
#: Most bytes of files in one shared indexing job (about a thousand chunks at the default Chunk Size).
BATCH_BYTES = 1024 * 1024


def batchable(topic: Topic, file_name: str, size_bytes: int) -> bool:
    """Whether a file may share its indexing job: a RAG Topic's small file read without conversion
    (not a Docling document, not a picture), at most :data:`BATCH_FILE_BYTES`, in a Topic whose upload
    makes no model call per chunk (SEMANTIC chunking, LLM keyword enrichment, NARRATE): such calls
    take far longer than embedding, and alone each file shows its own progress through them."""
    if not kind_of(topic).indexes_in_batches or size_bytes > BATCH_FILE_BYTES:
        return False
    ext = extension_of(file_name)
    cfg = topic.settings
    if not isinstance(cfg, RagTopicSettings):  # a RAG Topic always has them
        return False
    calls_models = (
        cfg.chunking_strategy == "SEMANTIC"
        or cfg.import_strategy == "NARRATE"
        or (cfg.retrieval_strategy == "HYBRID" and cfg.keyword_enrichment == "LLM")
    )
    return not calls_models and ext not in DOCUMENT_TYPES and ext not in IMAGE_TYPES


class JobGroups:
    """Files grouped into shared indexing jobs as they come, in order: a group closes when it holds
    ``batch_files`` files, or before a file that would take it over ``batch_bytes``.

    The one rule :class:`BatchedUploads` queues jobs by (and ``make bench`` times them by).
    """

    def __init__(self, *, batch_files: int = BATCH_FILES, batch_bytes: int = BATCH_BYTES):
        self.batch_files, self.batch_bytes = batch_files, batch_bytes
        self._waiting: list = []
        self._bytes = 0

    def add(self, item, size_bytes: int) -> list[list]:
        """Add a file (any item) of ``size_bytes``; returns the groups this closed (none, one or two)."""
        closed = [self.close()] if self._waiting and self._bytes + size_bytes > self.batch_bytes else []
        self._waiting.append(item)
        self._bytes += size_bytes
        if len(self._waiting) >= self.batch_files:
            closed.append(self.close())
        return closed

    def close(self) -> list:
        """The files that wait, as a group (``[]`` when none); the next file starts a new one."""
        group, self._waiting, self._bytes = self._waiting, [], 0
        return group


class BatchedUploads:
    """Receive the files of one upload and enqueue their indexing, small ones in shared jobs.

    Indexing many small files one job each wastes most of the embedding model's speed (each
    file is embedded alone) and pays a job's bookkeeping per file. Here each small file
    (:func:`batchable`) waits for others, and every :data:`BATCH_FILES` of them (at most
    :data:`BATCH_BYTES` together) go to one job
    (:func:`~ragtopics.ingest.pipeline.ingest_documents`); other files get their own job at once.
    Every file keeps its own job id, progress, status and failure (see
    :func:`~ragtopics.jobs.queue.job_progress`). Use as a context manager: leaving the block
    enqueues what still waits. A shared job that cannot be enqueued does not raise: its files
    are marked ``failed`` and listed in :attr:`not_queued` with the message.

    Example::

        with BatchedUploads(rt, topic) as uploads:
            for name, data in files:
                row = uploads.add(name, data)
        for row, message in uploads.not_queued: ...
    """

    def __init__(
        self, rt: Runtime, topic: Topic, *, batch_files: int = BATCH_FILES, batch_bytes: int = BATCH_BYTES, estimate: bool = True
    ):
        self.rt, self.topic = rt, topic
        self._figures: Figures | None = None
        #: Characters of chunk text of the files estimated so far, for a GraphRAG Topic's next estimate.
        self._graph_chars = 0.0
        #: Whether each file's cost estimate is kept with its job (:func:`~ragtopics.ingest.cost.estimate_and_store`).
        self.estimate = estimate
        self._groups = JobGroups(batch_files=batch_files, batch_bytes=batch_bytes)
        #: ``(row, message)`` of each file whose shared job could not be enqueued.
        self.not_queued: list[tuple[DocumentRow, str]] = []

    def add(self, file_name: str, data: bytes) -> DocumentRow:
        """Receive one file (:func:`receive_upload`), keep its cost estimate, and enqueue it now or with the next full batch.

        Returns:
            The document row; its ``job_id`` is the version's job id.

        Raises:
            RefusedFileError: see :func:`receive_upload` (nothing stored).
            StoreUnavailableError: the file's own job could not be enqueued (it says ``failed``).
        """
        row = receive_upload(self.rt, self.topic, file_name, data)
        if self.estimate:  # before the job is queued, so a fast worker finds the estimate to put its counts beside
            # deferred: ingest.cost imports this module at module level
            from ragtopics.ingest.cost import estimate_and_store, load_figures

            self._figures = self._figures or load_figures(self.rt)
            # each file as the next into the graph the earlier ones of this upload will have grown, as the preview
            self._graph_chars += estimate_and_store(
                self.rt, self.topic, row, data, self._figures, pending_chars=self._graph_chars
            )
        if not batchable(self.topic, row.file_name, len(data)):
            enqueue_document(self.rt, row)
            return row
        for group in self._groups.add(row, len(data)):
            self._enqueue(group)
        return row

    def flush(self) -> None:
        """Enqueue the files that wait: one shared job, or the file's own job when it is alone.

        A job that cannot be enqueued leaves its files ``failed`` and in :attr:`not_queued`.
        """
        self._enqueue(self._groups.close())

    def _enqueue(self, rows: list[DocumentRow]) -> None:
        """Enqueue one group of files; see :meth:`flush`."""
        if not rows:
            return
        try:
            enqueue_document(self.rt, rows[0]) if len(rows) == 1 else enqueue_documents(self.rt, rows)
        except StoreUnavailableError as exc:
            self.not_queued += [(row, str(exc)) for row in rows]

    def __enter__(self) -> BatchedUploads:
        return self

    def __exit__(self, *exc_info) -> None:
        self.flush()


def upload_file(rt: Runtime, topic: Topic, file_name: str, data: bytes) -> DocumentRow:
    """Receive a file (:func:`receive_upload`) and enqueue its indexing job (:func:`enqueue_document`).

    Returns:
        The document row; its ``job_id`` is the enqueued job.

    Raises:
        RefusedFileError: see :func:`receive_upload` (nothing stored).
        StoreUnavailableError: the job could not be enqueued (the document says ``failed``).
    """
    row = receive_upload(rt, topic, file_name, data)
    enqueue_document(rt, row)
    return row


def get_document(rt: Runtime, document_id: str) -> DocumentRow:
    """A document row.

    Raises:
        NotFoundError: when it does not exist.
    """
    row = document_store.get_document(rt.metadata, document_id)
    if row is None:
        raise NotFoundError(f"no document {document_id}")
    return row


def list_documents(rt: Runtime, topic: Topic | str) -> list[DocumentInfo]:
    """The Indexed Documents list of a Topic (or of the Topic with that id), by file name."""
    rows = document_store.document_list(rt.metadata, topic if isinstance(topic, str) else topic.id)
    return [
        DocumentInfo(
            r.id,
            r.file_name,
            r.status,
            r.chunk_count,
            r.size_bytes,
            r.error,
            r.warning,
            r.job_id,
            dict(r.indexed_with or {}),
            r.content_sha256,
            r.pending_sha256,
            r.updated_at,
        )
        for r in rows
    ]


def document_trace(rt: Runtime, document_id: str) -> list[dict[str, Any]]:
    """The stored trace of a document's latest upload job (events with ``id``/``parent``; ``[]`` when none is kept)."""
    return load_trace(rt.metadata, f"document:{document_id}")


def source_link(rt: Runtime, document_id: str) -> str:
    """A signed download link (about 10 minutes) to a document's original file; "" when it is gone."""
    doc = document_store.get_document(rt.metadata, document_id)
    if doc is None or not doc.blob_path:
        return ""
    return rt.signer.sign(doc.blob_path)
