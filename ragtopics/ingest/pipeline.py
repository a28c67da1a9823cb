"""Phase A orchestrator: read → (describe pictures) → chunk → embed → link pictures → store, for one uploaded document.

Thin by design: each step is a function elsewhere; this module calls them in order,
reports progress, traces each step, and writes once at the end: new picture blobs,
then the version through its one owner (:mod:`ragtopics.documents.versions`): the graph
share (GraphRAG), then one SQL transaction that makes the version the searchable one
(and swaps the picture rows) with the chunk swap, a single Redis transaction, run inside
it right before it commits. A failure anywhere before that commit leaves the previous
version of the file whole: searchable, with its graph share, pictures, row and file.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace

from ragtopics.documents.versions import Version, store_version, store_versions
from ragtopics.errors import (
    ConfigurationError,
    NotFoundError,
    RefusedFileError,
    StoreUnavailableError,
    SupersededError,
    is_store_outage,
)
from ragtopics.ingest.chunking import Piece, split_recursive
from ragtopics.ingest.docling import DoclingOptions
from ragtopics.ingest.pictures import describe_pictures, link_pictures, picture_id_for, text_with_descriptions
from ragtopics.ingest.readers import ReadResult, read_file
from ragtopics.ingest.structured import pack_records_counted, records_per_chunk
from ragtopics.ingest.token_cap import CONTEXT_LINE_TOKENS, CappedChunks, TokenCounter, cap_tokens, trim_to_tokens
from ragtopics.kinds import GraphShare, kind_of
from ragtopics.llm.gateway import ModelCall
from ragtopics.prompts.resolve import resolve_ingest_prompts
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings, RagTopicSettings, TopicSettings
from ragtopics.storage import documents
from ragtopics.storage.chunk_index import ChunkRecord
from ragtopics.storage.locks import WORKER_LOCK_WAIT_S, Fence, document_lock, document_locks
from ragtopics.storage.metadata import DocumentRow, PictureRow
from ragtopics.text.file_types import IMAGE_READER, SOURCE_CODE_EXTENSIONS, extension_of
from ragtopics.text.keywords import index_keywords
from ragtopics.topics.topics import get_topic
from ragtopics.tracing.reports import record_trace, record_traces
from ragtopics.tracing.trace import Trace, TraceEvent

log = logging.getLogger(__name__)

#: ``progress(phase, done, total)``; phases: reading, describing, chunking, embedding, keywords, storing, done.
ProgressFn = Callable[[str, int, int], None]

_EMBED_STEP = 64

#: How much of the document the context-line prompt shows, and how long a context line may be.
CONTEXT_DOCUMENT_CHARS = 6000
CONTEXT_LINE_CHARS = 300


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest stored.

    Attributes:
        document_id: the document.
        status: ``indexed`` or ``empty``; ``superseded`` or ``cancelled`` when a newer upload
            or a delete made the job's version obsolete before it was stored (nothing was changed);
            ``extracting`` when a GraphRAG upload's extraction continues in queued jobs.
        chunk_count: chunks now searchable.
        replaced: chunks of the previous version removed.
        trace: the step events.
        reason: why a job stopped early ("" otherwise).
        continued_in: for ``extracting``, the id of the job that finishes the upload.
    """

    document_id: str
    status: str
    chunk_count: int
    replaced: int
    trace: list[dict]
    reason: str = ""
    continued_in: str = ""


def chunk_id_for(document_id: str, text: str, occurrence: int = 0) -> str:
    """Content-hash chunk id: ``chunk-`` + 16 hex digits of SHA-1 over document, text and occurrence.

    The position is not part of it (it is stored as a field), so a chunk keeps its id when
    an edit elsewhere in the file moves it: a GraphRAG re-upload re-extracts only the
    chunks whose text changed. ``occurrence`` counts earlier chunks of the same document
    with the same text (0 for the first), so repeated texts still get distinct ids.
    """
    return "chunk-" + hashlib.sha1(f"{document_id}\0{occurrence}\0{text}".encode()).hexdigest()[:16]


def chunk_ids_for(document_id: str, texts: list[str]) -> list[str]:
    """:func:`chunk_id_for` of each chunk text of a document, in order."""
    seen: dict[str, int] = {}
    ids = []
    for text in texts:
        ids.append(chunk_id_for(document_id, text, seen.get(text, 0)))
        seen[text] = seen.get(text, 0) + 1
    return ids


def ingest_document(
    rt: Runtime,
    document_id: str,
    progress: ProgressFn | None = None,
    *,
    job_id: str | None = None,
    blob_path: str | None = None,
    fan_out: bool = False,
) -> IngestResult:
    """Index one version of a document: the one staged for ``job_id`` (by default the row's pending version).

    With ``fan_out`` (the worker's ingest job), a GraphRAG document's graph extraction
    continues in small queued jobs (:mod:`ragtopics.graph.fanout`) and the result's status
    is ``extracting``; without it (in-process callers) everything runs here.

    Between steps the job checks that its version is still the one wanted; a newer
    upload or a delete stops it with status ``superseded``/``cancelled`` and nothing
    changed. The final step (pictures, chunk swap, SQL row) runs under the document's
    lock (:mod:`ragtopics.storage.locks`), so chunks, row and file never disagree.

    Raises:
        ReadError: when the file cannot be read.
        ConfigurationError: Describe pictures is on and the image describer model can't see pictures.
        ModelUnavailableError: when the embedding model (or a model asked at upload) is unreachable.
        NotFoundError: when the document or Topic is gone.
        In every failure case the previous version stays searchable and the
        document row says ``failed`` with the message.
    """
    if job_id is None:  # called in-process (bench, older queued jobs): the row's pending version
        row = documents.get_document(rt.metadata, document_id)
        if row is None:
            raise NotFoundError(f"no document {document_id}")
        job_id, blob_path = row.job_id, row.pending_blob_path
    try:
        with document_lock(rt.redis, document_id, wait_s=WORKER_LOCK_WAIT_S):
            doc = documents.start_processing(rt.metadata, document_id, job_id)
    except SupersededError as exc:
        return _stopped(document_id, exc, Trace("upload", document_id))
    blob_path = blob_path or doc.pending_blob_path

    def report(phase: str, done: int, total: int) -> None:
        documents.check_current(rt.metadata, document_id, job_id)  # stop at the next step once superseded
        if progress is not None:
            progress(phase, done, total)

    topic = get_topic(rt, doc.topic_id)
    cfg = ingest_settings(topic.settings, rt)
    prompts = resolve_ingest_prompts(rt, topic.id)  # once per job: the Prompts tab's overrides for this Topic
    trace = Trace("upload", doc.file_name, topic.settings.role_models)
    new_blobs: list[str] = []
    try:
        draft = _draft(rt, doc, blob_path, cfg, prompts, trace, report)
        [vectors] = _embed_together(rt, [draft.embed_texts], [trace], report)
        version = _complete(rt, doc, draft, vectors, cfg, prompts, trace, report)
    except Exception as exc:
        return _stop_or_fail(rt, doc.id, job_id, exc, trace, new_blobs)
    kind = kind_of(topic)
    if kind.fans_out_extraction and fan_out and version.records:  # extraction continues in small jobs
        return _guarded(rt, doc.id, job_id, trace, new_blobs, lambda: kind.fan_out(rt, topic, doc, job_id, version, trace))
    return finish_version(rt, topic, doc, job_id, version, trace, report, progress)


@dataclass
class _Draft:
    """A document version read and chunked, not yet embedded (see :func:`_draft`)."""

    result: ReadResult
    descriptions: list[str]
    pieces: list[Piece]
    capped: CappedChunks
    contexts: list[str]
    embed_texts: list[str]
    read_warnings: list[str]


@dataclass
class _Chunked:
    """A document version read and chunked, its chunks not yet capped to the embedder's window (see :func:`_draft`)."""

    result: ReadResult
    descriptions: list[str]
    pieces: list[Piece]
    read_warnings: list[str]
    chunk_event: TraceEvent


def _draft(
    rt: Runtime, doc: DocumentRow, blob_path: str, cfg: RagTopicSettings, prompts, trace: Trace, report: ProgressFn
) -> _Draft:
    """Read, describe pictures, chunk, cap to the embedder's window and write context lines: all before embedding."""
    return _finish_draft(rt, doc, _read_and_chunk(rt, doc, blob_path, cfg, prompts, trace, report), cfg, prompts, trace, report)


def _read_and_chunk(
    rt: Runtime, doc: DocumentRow, blob_path: str, cfg: RagTopicSettings, prompts, trace: Trace, report: ProgressFn
) -> _Chunked:
    """The first half of :func:`_draft`: read, describe pictures, chunk."""
    report("reading", 0, 1)
    with trace.step("read", file_name=doc.file_name, bytes=doc.size_bytes) as ev, _reader_warnings() as read_warnings:
        result = read_file(
            rt.blobs.read(blob_path),
            file_name=doc.file_name,
            docling_server=cfg.docling_server,
            docling_options=_docling_options(cfg),
        )
        ev.data.update(
            warnings=read_warnings,
            reader=result.reader,
            encoding=result.encoding,
            chars=len(result.text),
            text=result.text,
            records=len(result.records) if result.records is not None else None,
            pictures=len(result.pictures),
        )
    result, descriptions = _describe(rt, result, cfg, trace, report, prompts.describe_picture)
    report("chunking", 0, 1)
    with trace.step("chunk", strategy=cfg.chunking_strategy, size=cfg.chunk_size, overlap=cfg.chunk_overlap) as ev:
        pieces = _chunk(rt, result, cfg, trace, doc.file_name, prompts.narrate, descriptions)
    return _Chunked(result, descriptions, pieces, read_warnings, ev)


def _finish_draft(
    rt: Runtime,
    doc: DocumentRow,
    chunked: _Chunked,
    cfg: RagTopicSettings,
    prompts,
    trace: Trace,
    report: ProgressFn,
    token_counts: list[int] | None = None,
) -> _Draft:
    """The second half of :func:`_draft`: cap the chunks to the embedder's window (``token_counts``: each chunk's
    tokens, when counted already), write context lines."""
    with trace.resume(chunked.chunk_event) as event:  # fitting the chunks to the window is part of the chunk step
        capped = _cap_to_window(rt, chunked.pieces, cfg, doc.file_name, token_counts)
        pieces = capped.pieces
        event.data.update(count=len(pieces), chunks=[p.text for p in pieces], split_to_fit=capped.split_chunks)
    contexts = _context_lines(rt, chunked.result.text, pieces, cfg, trace, report, prompts.context_line)
    contexts = _fit_context_lines(rt, contexts)  # the context line is embedded with its chunk: it counts
    # A SEMANTIC chunk is embedded together with its context line.
    embed_texts = [f"{c}\n{p.text}" if c else p.text for p, c in zip(pieces, contexts, strict=True)]
    return _Draft(chunked.result, chunked.descriptions, pieces, capped, contexts, embed_texts, chunked.read_warnings)


def _count_tokens_together(rt: Runtime, chunked: list[_Chunked]) -> list[list[int] | None]:
    """Each file's chunk lengths in the embedder's tokens, counted in one call for the batch (the tokenizer
    runs on every core for a list); ``None`` for each file when the embedder has no window or counting failed
    (each file then counts its own, and fails alone)."""
    embedder = rt.gateway.embedder
    texts = [p.text for c in chunked for p in c.pieces]
    counts = None
    if embedder.max_tokens and texts:
        try:
            counts = embedder.count_tokens(texts)
        except Exception as exc:
            log.debug("counting the batch's tokens failed: %s", exc)
    if not counts or len(counts) != len(texts):
        return [None] * len(chunked)
    out: list[list[int] | None] = []
    at = 0
    for c in chunked:
        out.append(list(counts[at : at + len(c.pieces)]))
        at += len(c.pieces)
    return out


def _complete(
    rt: Runtime, doc: DocumentRow, draft: _Draft, vectors, cfg: RagTopicSettings, prompts, trace: Trace, report: ProgressFn
) -> PreparedVersion:
    """The embedded draft as a version to store: keyword fields, picture rows and links, chunk records."""
    result, pieces = draft.result, draft.pieces
    keywords = _keywords(rt, pieces, cfg, trace, report, prompts.keywords, doc.file_name)
    pictures = _picture_rows(doc, result, draft.descriptions) if cfg.store_pictures else []
    tags = _link(pieces, result, draft.descriptions, pictures, trace)
    ids = chunk_ids_for(doc.id, [p.text for p in pieces])
    records = [
        ChunkRecord(
            chunk_id=ids[n],
            document_id=doc.id,
            file_name=doc.file_name,
            position=n,
            text=p.text,
            embedding=v,
            start=p.start,
            end=p.end,
            keywords=kw,
            pictures=tag,
            context=ctx,
            pages=p.pages,
            version=doc.pending_sha256,
        )
        for n, (p, v, kw, tag, ctx) in enumerate(zip(pieces, vectors, keywords, tags, draft.contexts, strict=True))
    ]
    indexed_with = _indexed_with(rt, result, cfg, pieces, pictures, draft.descriptions, draft.capped, trace)
    return PreparedVersion(
        records,
        pictures,
        [(p.index, p.image_png) for p in result.pictures] if pictures else [],
        draft.read_warnings,
        indexed_with,
    )


@dataclass
class PreparedVersion:
    """A document version read, chunked and embedded, not yet stored.

    Attributes:
        records: the chunks as they will be stored.
        pictures: the picture rows to store (blob paths filled in when written).
        picture_pngs: ``(picture index, PNG bytes)`` of each picture to store, same order.
        read_warnings: what the readers warned about.
        indexed_with: the settings and counts shown in the Indexed Documents list.
    """

    records: list[ChunkRecord]
    pictures: list[PictureRow]
    picture_pngs: list[tuple[int, bytes]]
    read_warnings: list[str]
    indexed_with: dict


def finish_version(
    rt: Runtime,
    topic,
    doc: DocumentRow,
    job_id: str,
    version: PreparedVersion,
    trace: Trace,
    report: ProgressFn,
    progress: ProgressFn | None,
    graph_failures: dict[str, str] | None = None,
    extracted_elsewhere: set[str] | None = None,
) -> IngestResult:
    """Store the version: the kind's step (a GraphRAG Topic's graph share), then picture files, graph share, row and
    chunk swap under the locks (:func:`~ragtopics.documents.versions.store_version`: all of them, or none).

    For a GraphRAG Topic the extraction runs first, with no lock; the deduplication against the graph, the
    graph writes and the chunk swap then run under the Topic's graph write lock (one upload of the Topic at
    a time), the writes also under the document's lock, each fenced with both locks' tokens
    (:meth:`~ragtopics.kinds.TopicKind.store_upload`).

    Called at the end of :func:`ingest_document`, or by the job that finishes a GraphRAG
    upload whose extraction fanned out (its chunks' extractions are then in the cache;
    ``graph_failures`` names the chunks whose extraction failed there, ``extracted_elsewhere``
    those the extraction jobs extracted).
    """
    new_blobs: list[str] = []

    def store() -> IngestResult:
        return kind_of(topic).store_upload(
            rt,
            topic,
            version,
            store_under_locks,
            report,
            trace,
            graph_failures=graph_failures,
            extracted_elsewhere=extracted_elsewhere,
        )

    def store_under_locks(share: GraphShare | None) -> IngestResult:
        records = version.records
        graph, images = (share.plan, share.images) if share is not None else (None, [])
        report("storing", len(records), len(records))
        status = documents.DocumentStatus.INDEXED if records else documents.DocumentStatus.EMPTY
        warning = _warning(records, version.read_warnings, doc, topic.name, graph)
        indexed_with = dict(version.indexed_with)
        if graph is not None:
            indexed_with["graph"] = graph.summary()
        with contextlib.ExitStack() as held:
            with trace.step("document_lock"):  # a newer upload or a delete waits for the swap
                fence = held.enter_context(document_lock(rt.redis, doc.id, wait_s=WORKER_LOCK_WAIT_S))
            if share is not None and share.fence is not None:
                fence = fence.joined(share.fence)  # every write needs both locks still held
            with trace.step("store", chunks=len(records), pictures=len(version.pictures)) as ev:
                documents.check_current(rt.metadata, doc.id, job_id)
                _put_picture_blobs(rt, version.picture_pngs, version.pictures, new_blobs, fence)
                # One owner stores the version: graph share, row and chunk swap in one order, or nothing.
                stored = store_version(
                    rt,
                    topic,
                    Version(
                        doc.id,
                        job_id,
                        doc.file_name,
                        records,
                        status,
                        warning,
                        indexed_with,
                        version.pictures,
                        graph,
                        images,
                        f"{doc.file_name} was uploaded",
                    ),
                    fence=fence,
                )
                ev.data["replaced"] = stored.replaced
                if graph is not None:
                    ev.data["graph"] = {**graph.summary(), "removed": asdict(stored.removal)}
            # Under the lock: a re-upload of the old file waits for its removal.
            with trace.step("after_store"):  # the trace kept, the cost figures added, the old file removed
                _after_finish(rt, [(trace, doc, stored.obsolete)])
        (progress or (lambda phase, done, total: None))("done", len(records), len(records))
        return IngestResult(doc.id, status.value, len(records), ev.data["replaced"], trace.to_list())

    return _guarded(rt, doc.id, job_id, trace, new_blobs, store)


#: One file of a batch: ``(document id, job id, blob path)`` of a staged version.
BatchItem = tuple[str, str, str]


def ingest_documents(
    rt: Runtime,
    topic_id: str,
    items: list[BatchItem],
    progress: ProgressFn | None = None,
    settled: Callable[[str, IngestResult], None] | None = None,
) -> dict[str, IngestResult]:
    """Index several staged files of one RAG Topic together: their chunks share length-sorted embedding batches.

    Embedding small files one at a time wastes much of the embedding model's speed (a
    forward pass per file), and each file's bookkeeping costs as much again. Here every
    file is read and chunked first, then all their chunks are embedded in batches sorted
    by length, then all are stored at once (:func:`_store_batch`: one chunk swap, one SQL
    transaction). Each file keeps its own row, trace and outcome: one that cannot be read
    fails alone, one superseded or deleted meanwhile is skipped, and the others are stored.

    Files of a GraphRAG Topic are indexed one at a time (:func:`ingest_document`, with its
    extraction fan-out).

    Args:
        items: the staged versions, each as :data:`BatchItem`.
        progress: ``(phase, done, total)`` for the whole batch: ``reading`` and ``storing`` count
            files, ``embedding`` counts chunks.
        settled: ``settled(job id, result)`` for each file whose outcome is known before the batch
            is stored (it failed, or was superseded), as soon as it is known.

    Returns:
        ``{job id: IngestResult}``; a file that failed has status ``failed`` and its message as
        ``reason`` (its row says ``failed`` too).

    Raises:
        NotFoundError: the Topic is gone.
        StoreUnavailableError: Redis became unreachable; the files not yet stored stay
            ``processing`` and the worker's next start queues them again.
    """
    report = progress or (lambda phase, done, total: None)
    results = _Results(settled)
    topic = get_topic(rt, topic_id)
    if not kind_of(topic).indexes_in_batches:
        return {job_id: _alone(rt, document_id, job_id, blob_path) for document_id, job_id, blob_path in items}
    cfg = ingest_settings(topic.settings, rt)
    prompts = resolve_ingest_prompts(rt, topic.id)
    drafts: list[tuple[DocumentRow, str, Trace, _Draft]] = []
    quiet: ProgressFn = lambda phase, done, total: None  # noqa: E731 - per file, the batch reports
    with document_locks(rt.redis, [document_id for document_id, _, _ in items], wait_s=WORKER_LOCK_WAIT_S):
        started = documents.start_many(rt.metadata, [(document_id, job_id) for document_id, job_id, _ in items])
    chunked: list[tuple[DocumentRow, str, Trace, _Chunked]] = []
    for n, (document_id, job_id, blob_path) in enumerate(items):
        report("reading", n, len(items))
        doc = started[job_id]
        if isinstance(doc, str):
            results[job_id] = _stopped(document_id, SupersededError(doc), Trace("upload", document_id))
            continue
        trace = Trace("upload", doc.file_name, topic.settings.role_models)
        try:
            chunked.append(
                (doc, job_id, trace, _read_and_chunk(rt, doc, blob_path or doc.pending_blob_path, cfg, prompts, trace, quiet))
            )
        except Exception as exc:
            results[job_id] = _failed_alone(rt, doc.id, job_id, exc, trace)
    counts = _count_tokens_together(rt, [c for *_, c in chunked])
    for (doc, job_id, trace, part), token_counts in zip(chunked, counts, strict=True):
        try:
            drafts.append((doc, job_id, trace, _finish_draft(rt, doc, part, cfg, prompts, trace, quiet, token_counts)))
        except Exception as exc:
            results[job_id] = _failed_alone(rt, doc.id, job_id, exc, trace)
    try:
        vectors = _embed_together(rt, [d.embed_texts for *_, d in drafts], [t for _, _, t, _ in drafts], report)
    except Exception as exc:  # the embedding model is unreachable: every file of the batch fails with the message
        for doc, job_id, trace, _ in drafts:
            results[job_id] = _failed_alone(rt, doc.id, job_id, exc, trace)
        return dict(results)
    ready = []
    for (doc, job_id, trace, draft), embedded in zip(drafts, vectors, strict=True):
        try:
            ready.append((doc, job_id, trace, _complete(rt, doc, draft, embedded, cfg, prompts, trace, quiet)))
        except Exception as exc:
            results[job_id] = _failed_alone(rt, doc.id, job_id, exc, trace)
    report("storing", 0, len(ready))
    stored = _store_batch(rt, topic, ready)
    report("done", len(items), len(items))
    return {**results, **stored}


class _Results(dict):
    """``{job id: IngestResult}`` that tells ``settled`` of each result as it is set (see :func:`ingest_documents`)."""

    def __init__(self, settled: Callable[[str, IngestResult], None] | None):
        super().__init__()
        self._settled = settled

    def __setitem__(self, job_id: str, result: IngestResult) -> None:
        super().__setitem__(job_id, result)
        if self._settled is not None:
            self._settled(job_id, result)


def _store_batch(rt: Runtime, topic, batch: list[tuple[DocumentRow, str, Trace, PreparedVersion]]) -> dict[str, IngestResult]:
    """Store several RAG versions at once: under every document's lock, one check that each is still wanted,
    picture files, one chunk swap for them all (one MULTI/EXEC), one SQL transaction for the rows and one for
    the traces. A version superseded meanwhile is skipped; a failure of the shared writes fails each file.

    Raises:
        StoreUnavailableError: Redis became unreachable (the files stay ``processing``; see :func:`_stop_or_fail`).
    """
    results: dict[str, IngestResult] = {}
    live: list[tuple[DocumentRow, str, Trace, PreparedVersion]] = []
    new_blobs: dict[str, list[str]] = {doc.id: [] for doc, *_ in batch}
    try:
        with document_locks(rt.redis, [doc.id for doc, *_ in batch], wait_s=WORKER_LOCK_WAIT_S) as fence:
            stale = documents.current_jobs(rt.metadata, [(doc.id, job_id) for doc, job_id, _, _ in batch])
            for doc, job_id, trace, version in batch:
                if stale[job_id]:
                    results[job_id] = _stopped(doc.id, SupersededError(stale[job_id]), trace)
                else:
                    live.append((doc, job_id, trace, version))
            if not live:
                return results
            for doc, _, _, version in live:
                _put_picture_blobs(rt, version.picture_pngs, version.pictures, new_blobs[doc.id], fence)
            versions = []
            for doc, job_id, _, version in live:
                status = documents.DocumentStatus.INDEXED if version.records else documents.DocumentStatus.EMPTY
                warning = _warning(version.records, version.read_warnings, doc, topic.name)
                versions.append(
                    Version(
                        doc.id, job_id, doc.file_name, version.records, status, warning, version.indexed_with, version.pictures
                    )
                )

            def traced(replaced: dict[str, int], swap_ms: float) -> None:
                for doc, _, trace, version in live:
                    trace.add(
                        "store",
                        chunks=len(version.records),
                        pictures=len(version.pictures),
                        replaced=replaced[doc.id],
                        batch_files=len(live),
                        batch_ms=swap_ms,
                    )

            stored = store_versions(rt, topic, versions, fence=fence, on_swap=traced)
            events = _after_finish(rt, [(trace, doc, s.obsolete) for (doc, _, trace, _), s in zip(live, stored, strict=True)])
    except Exception as exc:  # nothing was swapped and committed: each file not settled yet fails (or stops) alone
        for doc, job_id, trace, _ in batch:
            if job_id not in results:
                results[job_id] = _failed_alone(rt, doc.id, job_id, exc, trace, new_blobs[doc.id])
        return results
    for (doc, job_id, _, version), v, done, listed in zip(live, versions, stored, events, strict=True):
        results[job_id] = IngestResult(doc.id, v.status.value, len(version.records), done.replaced, listed)
    return results


def _after_finish(rt: Runtime, done: list[tuple[Trace, DocumentRow, list[str]]]) -> list[list[dict]]:
    """After versions became searchable: store their traces, record what they took (:mod:`ragtopics.ingest.cost`)
    and remove the files no longer used.

    Neither may fail the upload, which is done: a failure is logged (the traces are then missing
    from the Logs tab; an obsolete file is left behind, unused).

    Args:
        done: ``(trace, document row, obsolete blob paths)`` per stored version.

    Returns:
        Each trace's events (:meth:`~ragtopics.tracing.trace.Trace.to_list`), in order.
    """
    events = [trace.to_list() for trace, _, _ in done]
    try:
        record_traces(
            rt, [(trace, "upload", f"document:{doc.id}", doc.file_name, doc.topic_id) for trace, doc, _ in done], events
        )
    except Exception as exc:
        log.warning("upload traces of %d file(s) not stored: %s", len(done), exc)
    # deferred: ingest.cost imports this module at module level
    from ragtopics.ingest.cost import record_upload

    for trace, doc, _ in done:  # what each upload took: the cost figures, and its actual counts beside its estimate
        record_upload(rt, trace, doc)
    for _, doc, obsolete in done:
        for path in obsolete:
            try:
                rt.blobs.remove(path)
            except OSError as exc:
                log.warning("an old file of %s was not removed: %s", doc.file_name, exc)
    return events


def _alone(rt: Runtime, document_id: str, job_id: str, blob_path: str) -> IngestResult:
    """One file of a batch indexed by itself (:func:`ingest_document`); its failure is its result, not raised."""
    try:
        return ingest_document(rt, document_id, job_id=job_id, blob_path=blob_path, fan_out=True)
    except StoreUnavailableError:
        raise
    except Exception as exc:
        return IngestResult(document_id, "failed", 0, 0, [], reason=str(exc))


def _failed_alone(
    rt: Runtime, document_id: str, job_id: str, exc: Exception, trace: Trace, new_blobs: list[str] | None = None
) -> IngestResult:
    """The result of one file of a batch stopped by ``exc`` (see :func:`_stop_or_fail`), without raising for it."""
    try:
        return _stop_or_fail(rt, document_id, job_id, exc, trace, new_blobs or [])
    except StoreUnavailableError:
        raise
    except Exception as failure:
        return IngestResult(document_id, "failed", 0, 0, trace.to_list(), reason=str(failure))


def _embed_together(rt: Runtime, texts: list[list[str]], traces: list[Trace], report: ProgressFn) -> list[list]:
    """Embed the chunk texts of one or several files in batches sorted by length; the vectors come back per file.

    Each file's trace gets an ``embed`` step that lasts the whole embedding (the file waited that
    long), with its own chunk count, the batch's size in files and chunks, and one ``model_call``
    with its own number of texts.
    """
    flat = [(len(t), f, i) for f, file_texts in enumerate(texts) for i, t in enumerate(file_texts)]
    order = sorted(flat)
    out: list[list] = [[None] * len(file_texts) for file_texts in texts]
    model = rt.gateway.embedder.model
    with contextlib.ExitStack() as steps:
        for file_texts, trace in zip(texts, traces, strict=True):
            steps.enter_context(
                trace.step("embed", count=len(file_texts), model=model, batch_files=len(texts), batch_chunks=len(order))
            )
        t0 = time.perf_counter()
        for start in range(0, len(order), _EMBED_STEP):
            report("embedding", start, len(order))
            step = order[start : start + _EMBED_STEP]
            vectors = rt.gateway.embed([texts[f][i] for _, f, i in step])
            for (_, f, i), vector in zip(step, vectors, strict=True):
                out[f][i] = vector
        took_ms = round((time.perf_counter() - t0) * 1000, 3)
        for file_texts, trace in zip(texts, traces, strict=True):
            if file_texts:
                trace.add(
                    "model_call", **asdict(ModelCall("embedding", "embedding", model, 0, 0, took_ms, items=len(file_texts)))
                )
    return out


def _guarded(
    rt: Runtime, document_id: str, job_id: str, trace: Trace, new_blobs: list[str], work: Callable[[], IngestResult]
) -> IngestResult:
    """Run ``work``; a superseded version stops quietly, any other failure marks the document failed and re-raises."""
    try:
        return work()
    except Exception as exc:
        return _stop_or_fail(rt, document_id, job_id, exc, trace, new_blobs)


def _stop_or_fail(rt: Runtime, document_id: str, job_id: str, exc: Exception, trace: Trace, new_blobs: list[str]) -> IngestResult:
    """The result of a job stopped by ``exc``: superseded or cancelled (nothing changed), else failed (re-raises)."""
    if isinstance(exc, SupersededError):
        _drop_unused(rt, document_id, new_blobs)
        return _stopped(document_id, exc, trace)
    if _superseded(rt, document_id, job_id):  # e.g. its file was removed by the newer upload while it was read
        _drop_unused(rt, document_id, new_blobs)
        return _stopped(document_id, SupersededError(documents.SUPERSEDED_BY_UPLOAD), trace)
    if is_store_outage(exc):
        # Redis went away mid-job: the document is not at fault. It stays ``processing`` with nothing
        # changed, and the next worker start queues the job again (ragtopics.worker.recovery).
        log.warning(
            "indexing of %s stopped: the store is unavailable (%s); it is queued again when the worker restarts", document_id, exc
        )
        raise StoreUnavailableError(f"the store became unavailable while indexing: {exc}") from exc
    _mark_failed(rt, document_id, job_id, exc, trace, new_blobs)
    raise exc


def _warning(records: list[ChunkRecord], read_warnings: list[str], doc: DocumentRow, topic_name: str, graph=None) -> str:
    """The warning kept with the document: no readable text, what the readers warned about, failed graph extractions."""
    warnings = [] if records else ["no readable text: the file is stored, but nothing of it can be found"]
    if graph is not None and graph.failed:
        first = next(iter(graph.failed.values()))
        warnings.append(f"graph extraction failed for {len(graph.failed)} chunk(s), stored without entities: {first}")
    if read_warnings:
        more = f" (and {len(read_warnings) - 1} more like it)" if len(read_warnings) > 1 else ""
        warnings.append(f"{len(read_warnings)} warning(s) while reading: {read_warnings[0]}{more}")
    warning = "; ".join(warnings)
    if warning:
        log.warning("%s in Topic %s: %s", doc.file_name, topic_name, warning)
    return warning


def _indexed_with(
    rt: Runtime,
    result: ReadResult,
    cfg: RagTopicSettings,
    pieces: list[Piece],
    pictures: list[PictureRow],
    descriptions: list[str],
    capped: CappedChunks,
    trace: Trace,
) -> dict:
    """The settings and counts a version was indexed with (shown in the Indexed Documents list)."""
    return {
        "reader": result.reader,
        "chunking_strategy": cfg.chunking_strategy,
        "chunk_size": cfg.chunk_size,
        "chunk_overlap": cfg.chunk_overlap,
        "keyword_index": cfg.retrieval_strategy == "HYBRID",
        "keyword_enrichment": cfg.keyword_enrichment if cfg.retrieval_strategy == "HYBRID" else "",
        "embedding_model": rt.gateway.embedder.model,
        "pictures": len(pictures),
        "pictures_described": sum(1 for d in descriptions if d),
        "model_calls": model_call_counts(trace),
        "records_per_chunk": records_per_chunk([p.records for p in pieces]) if result.records is not None else None,
        "embedding_window_tokens": capped.max_tokens,
        "chunks_split_to_fit": capped.split_chunks,
        "chunks_added_by_split": capped.added_chunks,
        "token_cap": capped.note(),
    }


def _stopped(document_id: str, exc: SupersededError, trace: Trace) -> IngestResult:
    """The result of a job whose version became obsolete: nothing was changed."""
    status = "cancelled" if str(exc) == documents.SUPERSEDED_BY_DELETE else "superseded"
    log.info("indexing of %s stopped: %s", document_id, exc)
    trace.add("stopped", reason=str(exc))
    return IngestResult(document_id, status, 0, 0, trace.to_list(), reason=str(exc))


def _superseded(rt: Runtime, document_id: str, job_id: str) -> bool:
    """True when ``job_id`` is no longer the job of the document's pending version."""
    try:
        documents.check_current(rt.metadata, document_id, job_id)
    except SupersededError:
        return True
    return False


def _drop_unused(rt: Runtime, document_id: str, new_blobs: list[str], fence: Fence | None = None) -> None:
    """Remove picture files a stopped or failed job wrote that the searchable version does not use.

    Under the document's lock (``fence``: the caller holds it; else it is taken here), each removal
    preceded by a check that the lock is still held: a picture another run of the same version
    (a job queued again after a crash) wrote at the same path, and is about to store with its row, stays.

    Raises:
        LockLostError: the lock was lost (what is left is left to the lock's new holder).
        StoreUnavailableError: the lock could not be taken.
    """
    if not new_blobs:
        return
    if fence is None:
        with document_lock(rt.redis, document_id, wait_s=WORKER_LOCK_WAIT_S) as held:
            _drop_unused(rt, document_id, new_blobs, held)
        return
    kept = documents.picture_blobs(rt.metadata, document_id)
    for path in new_blobs:
        if path not in kept:  # the previous version's identical picture stays
            fence.check()  # the file store cannot be fenced: stop before the removal once the lock is lost
            rt.blobs.remove(path)


@contextlib.contextmanager
def _reader_warnings() -> Iterator[list[str]]:
    """Collect the warnings the readers log (``core.*`` loggers, this thread) while the block runs.

    They are kept with the document (its warning, shown in the Indexed Documents list)
    as well as logged, so a ragged CSV row or a partly converted document is visible
    to the operator, not only in the worker's log.
    """
    collected: list[str] = []
    thread = threading.get_ident()

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.thread == thread and record.levelno >= logging.WARNING:
                collected.append(record.getMessage())

    handler = _Collect()
    root = logging.getLogger("ragtopics")
    root.addHandler(handler)
    try:
        yield collected
    finally:
        root.removeHandler(handler)


def model_call_counts(trace: Trace) -> dict[str, int]:
    """How many model calls an upload made, by kind (prompt name; ``embedding`` counts texts embedded)."""
    counts: dict[str, int] = {}
    for event in trace.events:
        if event.step == "model_call":
            name = event.data.get("prompt_name", "")
            kind = "embedding" if event.data.get("role") == "embedding" else name
            counts[kind] = counts.get(kind, 0) + (event.data.get("items", 1) if kind == "embedding" else 1)
    return counts


def _context_lines(
    rt: Runtime, text: str, pieces: list[Piece], cfg: RagTopicSettings, trace: Trace, report: ProgressFn, template: PromptTemplate
) -> list[str]:
    """SEMANTIC: one model call per chunk writes a short line saying where the chunk sits in the document."""
    if cfg.chunking_strategy != "SEMANTIC" or not pieces:
        return [""] * len(pieces)
    outline = text[:CONTEXT_DOCUMENT_CHARS]
    lines = []
    with trace.step("context_lines", count=len(pieces)) as ev:
        for i, p in enumerate(pieces):
            report("context lines", i, len(pieces))
            messages = [{"role": "user", "content": template.render(document=outline, chunk=p.text)}]
            reply = rt.gateway.chat("language_model", messages, prompt_name="context_line", trace=trace, max_tokens=80)
            lines.append(" ".join(reply.text.split())[:CONTEXT_LINE_CHARS])
        ev.data["context_lines"] = lines[:50]
    return lines


def _chunk(
    rt: Runtime,
    result,
    cfg: RagTopicSettings,
    trace: Trace,
    file_name: str,
    narrate: PromptTemplate,
    descriptions: list[str] | None = None,
) -> list[Piece]:
    """Chunks of a read file: one piece (image files), records packed whole (structured files), a Docling
    document by its structure (:mod:`ragtopics.ingest.docling_chunks`: headings, pages, tables whole or split
    between rows; ``descriptions`` of its pictures go where the pictures sit), else RECURSIVE chunking.

    Raises:
        RefusedFileError: when the file would give more than ``MAX_CHUNKS_PER_DOCUMENT`` chunks;
            checked on a lower bound before any chunking or model call, so a huge file fails in seconds.
    """
    if result.reader == IMAGE_READER:
        text = result.text.strip()
        return [Piece(text=text, start=0, end=len(text))] if text else []
    limit = rt.settings.max_chunks_per_document
    if result.records is None or cfg.import_strategy != "NARRATE":
        # Each chunk holds at most Chunk Size characters, and together they hold every non-space character.
        lower_bound = -(-len("".join(result.text.split())) // cfg.chunk_size)
        _check_chunk_count(file_name, lower_bound, limit, cfg, at_least=True)
    if result.records is None and result.document is not None:
        # deferred: docling_chunks imports docling_core (seconds); only Docling documents need it
        from ragtopics.ingest.docling_chunks import chunk_document

        pieces = chunk_document(
            result.document,
            result.text,
            size=cfg.chunk_size,
            overlap=cfg.chunk_overlap,
            pictures=result.pictures,
            descriptions=descriptions or [""] * len(result.pictures),
        )
        _check_chunk_count(file_name, len(pieces), limit, cfg)
        return pieces
    if result.records is None:
        pieces = split_recursive(
            result.text,
            size=cfg.chunk_size,
            overlap=cfg.chunk_overlap,
            source_code=extension_of(file_name) in SOURCE_CODE_EXTENSIONS,
        )
        _check_chunk_count(file_name, len(pieces), limit, cfg)
        return pieces
    records = list(result.records)
    if cfg.import_strategy == "NARRATE":
        records = [_narrate(rt, r, trace, narrate) for r in records]
    packed = pack_records_counted(records, size=cfg.chunk_size)
    _check_chunk_count(file_name, len(packed), limit, cfg)
    return [Piece(text=t, start=0, end=len(t), records=n) for t, n in packed]


def _cap_to_window(
    rt: Runtime, pieces: list[Piece], cfg: RagTopicSettings, file_name: str, token_counts: list[int] | None = None
) -> CappedChunks:
    """Split chunks longer than the embedder's window (see :mod:`ragtopics.ingest.token_cap`); ``token_counts``:
    each chunk's tokens when counted already.

    Under SEMANTIC, :data:`CONTEXT_LINE_TOKENS` stay free for the context line embedded with each chunk.

    Raises:
        RefusedFileError: when the split chunks exceed ``MAX_CHUNKS_PER_DOCUMENT``.
    """
    embedder = rt.gateway.embedder
    reserve = CONTEXT_LINE_TOKENS if cfg.chunking_strategy == "SEMANTIC" else 0
    counter = _token_counter(rt)
    capped = cap_tokens(pieces, max_tokens=embedder.max_tokens, count_tokens=counter, reserve_tokens=reserve, counts=token_counts)
    if capped.split_chunks:
        log.info("%s: %s", file_name, capped.note())
        _check_chunk_count(file_name, len(capped.pieces), rt.settings.max_chunks_per_document, cfg)
    return capped


def _fit_context_lines(rt: Runtime, lines: list[str]) -> list[str]:
    """Context lines shortened to :data:`CONTEXT_LINE_TOKENS` when the embedder's window is known."""
    counter = _token_counter(rt)
    if counter is None or not any(lines):
        return lines
    counts = counter(lines)
    return [
        trim_to_tokens(line, CONTEXT_LINE_TOKENS, counter) if n > CONTEXT_LINE_TOKENS else line
        for line, n in zip(lines, counts, strict=True)
    ]


def _token_counter(rt: Runtime) -> TokenCounter | None:
    """The embedder's token counter when its window is known (None otherwise: nothing is cut).

    The counter raises :class:`~ragtopics.errors.ConfigurationError` when an embedder with a window cannot count.
    """
    embedder = rt.gateway.embedder
    if not embedder.max_tokens:
        return None

    def count(texts: list[str]) -> list[int]:
        counts = embedder.count_tokens(texts)
        if counts is None:
            raise ConfigurationError(
                f"the embedding model {embedder.model} has a window of {embedder.max_tokens} tokens but cannot count them"
            )
        return counts

    return count


def _check_chunk_count(file_name: str, count: int, limit: int, cfg: RagTopicSettings, *, at_least: bool = False) -> None:
    if count > limit:
        raise RefusedFileError(
            f"{file_name} was refused: it would give {'at least ' if at_least else ''}{count:,} chunks at Chunk Size "
            f"{cfg.chunk_size}, and one document may give at most {limit:,} (MAX_CHUNKS_PER_DOCUMENT). "
            "Split the file or raise Chunk Size."
        )


def _narrate(rt: Runtime, record: str, trace: Trace, template: PromptTemplate) -> str:
    """Import Strategy NARRATE: one model call rewrites a record as a short paragraph."""
    messages = [{"role": "user", "content": template.render(record=record)}]
    text = rt.gateway.chat("language_model", messages, prompt_name="narrate", trace=trace, max_tokens=300).text.strip()
    return text or record


def _describe(
    rt: Runtime, result: ReadResult, cfg: RagTopicSettings, trace: Trace, report: ProgressFn, template: PromptTemplate
) -> tuple[ReadResult, list[str]]:
    """Describe pictures with a vision model: the descriptions become the text (image files) or follow it."""
    if not cfg.describe_pictures or not result.pictures:
        return result, [""] * len(result.pictures)
    report("describing", 0, len(result.pictures))
    with trace.step("describe_pictures", count=len(result.pictures)) as ev:
        descriptions = describe_pictures(rt.gateway, list(result.pictures), trace=trace, template=template)
        ev.data["descriptions"] = descriptions
    if result.reader == IMAGE_READER:
        return replace(result, text=descriptions[0] or result.text), descriptions
    return replace(result, text=text_with_descriptions(result.text, list(result.pictures), descriptions)), descriptions


def _picture_rows(doc: DocumentRow, result: ReadResult, descriptions: list[str]) -> list[PictureRow]:
    """One row per picture to store (Store pictures in the database); blob paths are filled in when stored."""
    return [
        PictureRow(
            id=picture_id_for(doc.id, p.index, p.image_png),
            topic_id=doc.topic_id,
            document_id=doc.id,
            blob_path="",
            caption=p.caption,
            description=d,
            page=p.page,
        )
        for p, d in zip(result.pictures, descriptions, strict=True)
    ]


def _link(pieces: list[Piece], result: ReadResult, descriptions: list[str], rows: list[PictureRow], trace: Trace) -> list[str]:
    """Per chunk, the space-separated ids of the stored pictures linked to it.

    A Docling document's chunks carry their pictures from its structure (``Piece.pictures``);
    other chunks (image files, text) are linked by matching caption, description or neighbouring text.
    """
    if not rows:
        return [""] * len(pieces)
    with trace.step("link_pictures", pictures=len(rows), by="structure" if result.document is not None else "text") as ev:
        if result.document is not None:
            position = {picture.index: n for n, picture in enumerate(result.pictures)}
            links = [[position[i] for i in p.pictures if i in position] for p in pieces]
        else:
            links = link_pictures([p.text for p in pieces], list(result.pictures), descriptions)
        tags = [" ".join(rows[i].id for i in found) for found in links]
        ev.data["linked_chunks"] = sum(1 for t in tags if t)
    return tags


def _put_picture_blobs(
    rt: Runtime, pngs: list[tuple[int, bytes]], rows: list[PictureRow], written: list[str], fence: Fence
) -> None:
    """Write the PNG of every picture to store, filling in each row's blob path; ``written`` collects the paths.

    The file store cannot be fenced, so each write is preceded by a check that the document locks
    (``fence``) are still held: a holder that lost its lock writes no picture.

    Raises:
        LockLostError: a lock was lost (the pictures written before stay listed in ``written``).
    """
    for row, (index, png) in zip(rows, pngs, strict=True):
        fence.check()
        row.blob_path, _ = rt.blobs.put(row.topic_id, row.document_id, f"picture-{index}.png", png)
        written.append(row.blob_path)


def _docling_options(cfg: RagTopicSettings):
    d = cfg.docling_settings
    return DoclingOptions(ocr=d.ocr, table_structure=d.table_structure, page_range=d.page_range, timeout_s=d.timeout_s)


def _keywords(
    rt: Runtime,
    pieces: list[Piece],
    cfg: RagTopicSettings,
    trace: Trace,
    report: ProgressFn,
    template: PromptTemplate,
    file_name: str,
) -> list[str]:
    """Keyword field per chunk: only under HYBRID; the distinct keywords of the file's name and the chunk's text
    (:func:`~ragtopics.text.keywords.index_keywords`), with LLM enrichment also of a model's keywords for it."""
    if cfg.retrieval_strategy != "HYBRID":
        return [""] * len(pieces)
    with trace.step("keywords", enrichment=cfg.keyword_enrichment, count=len(pieces)) as ev:
        if cfg.keyword_enrichment == "LLM":
            out = []
            for i, p in enumerate(pieces):
                report("keywords", i, len(pieces))
                messages = [{"role": "user", "content": template.render(text=p.text)}]
                reply = rt.gateway.chat("language_model", messages, prompt_name="keywords", trace=trace, max_tokens=120)
                out.append(index_keywords(file_name, f"{reply.text}\n{p.text}"))
        else:
            out = [index_keywords(file_name, p.text) for p in pieces]
        ev.data["keywords"] = out[:50]
    return out


def _mark_failed(rt: Runtime, document_id: str, job_id: str, exc: Exception, trace: Trace, new_blobs: list[str]) -> None:
    """Mark the document failed (its row, its unused files removed) under its lock, every write fenced with it.

    Raises:
        LockLostError: the lock was lost before a write (the row is left as it was, for its new holder).
    """
    log.error("upload of %s failed: %s", document_id, exc)
    with document_lock(rt.redis, document_id, wait_s=WORKER_LOCK_WAIT_S) as fence:
        _drop_unused(rt, document_id, new_blobs, fence)
        doc, obsolete = documents.fail(rt.metadata, document_id, job_id, str(exc), before_commit=fence.check)
        for path in obsolete:
            fence.check()
            rt.blobs.remove(path)
    if doc is not None:
        record_trace(rt, trace, kind="upload", owner=f"document:{document_id}", subject=doc.file_name, topic_id=doc.topic_id)


def ingest_settings(settings: TopicSettings, rt: Runtime | None = None) -> RagTopicSettings:
    """The upload settings of a Topic as the RAG steps read them.

    A GraphRAG Topic reads, chunks (RECURSIVE, structured files always flattened) and
    embeds its files as a RAG Topic does; its keyword index follows Local Keyword
    Search; its pictures are stored unless Picture Handling is IGNORE, and described
    (the description read as text) when the Image Describer role has a real endpoint
    that sees pictures (``rt`` given).
    """
    if not isinstance(settings, GraphRagTopicSettings):
        return settings
    # deferred: the graph package imports ingest at module level, and loads only for GraphRAG Topics
    from ragtopics.graph.pictures import uses_model

    describe = settings.picture_handling != "IGNORE" and rt is not None and uses_model(rt)
    return RagTopicSettings(
        file_types=settings.file_types,
        max_file_size_mb=settings.max_file_size_mb,
        chunk_size=settings.chunk_size,
        chunk_overlap=settings.chunk_overlap,
        docling_server=settings.docling_server,
        docling_settings=settings.docling_settings,
        import_strategy="FLATTEN",
        chunking_strategy="RECURSIVE",
        store_pictures=settings.picture_handling != "IGNORE",
        describe_pictures=describe,
        retrieval_strategy="HYBRID" if settings.local_keyword_search else "DENSE",
        keyword_enrichment="ALGORITHMIC",
    )
