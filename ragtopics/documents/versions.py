"""The one owner of storing a document version across the graph, the chunk index and the SQL row.

Every way a version is stored goes through here: an upload or re-upload (one file, or a batch of RAG
files), a re-embed (which indexes the stored files again) and a graph import. The order is always:

1. the graph share (GraphRAG only, :func:`~ragtopics.graph.ingest.apply_graph`), after reading what it
   can change (:func:`~ragtopics.graph.share.read_share`);
2. the SQL row, written into an open transaction (any SQL or state error surfaces here), then
3. the chunk swap (one MULTI/EXEC) inside that transaction, right before it commits.

A failure at any step leaves the previous version whole in all three stores: a failure at step 1 or 2,
or a chunk swap that fails, rolls the SQL transaction back and leaves the chunk index untouched; a commit
that fails after the swap puts the previous chunks back (the swap parks them instead of deleting them:
:meth:`~ragtopics.storage.chunk_index.ChunkIndex.swap_documents`, deleted once the commit succeeds). In
every case the graph share is then put back as it was (:func:`~ragtopics.graph.share.restore_share`), and
the caller marks the row ``failed``, saying the previous version is still searchable. Only when the
previous chunks cannot be put back (Redis went away meanwhile) is the new version kept: its chunks and
graph share agree with each other, the row still names the pending version, and the worker's next start
indexes it again (:class:`StoreUnavailableError`).

Callers hold the document's lock (and, for a graph share, the Topic's graph write lock) around the call
and pass the locks' joined fence: every Redis and FalkorDB write is fenced, so a holder that lost a lock
writes nothing (and does not try to restore what the new holder now owns).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ragtopics.errors import RagTopicsError, StoreUnavailableError
from ragtopics.runtime import Runtime
from ragtopics.storage import documents
from ragtopics.storage.chunk_index import ChunkRecord, ChunkSwap
from ragtopics.storage.locks import Fence, LockLostError
from ragtopics.storage.metadata import DocumentRow, PictureRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a document to store.

    Attributes:
        document_id, job_id: the document and the job of its pending version.
        file_name: the document's file name.
        records: its chunks as they will be stored (``[]``: nothing searchable).
        status: ``indexed`` or ``empty``.
        warning: kept with the row.
        indexed_with: the settings and counts shown in the Indexed Documents list.
        pictures: the picture rows of the version (blob paths filled in).
        graph: its share of the graph (a :class:`~ragtopics.graph.ingest.GraphPlan`; None for a RAG Topic).
        images: the Image nodes of its pictures (Picture in the graph).
        change: what the recompute mark says once stored (``"x.txt was uploaded"``); graph only.
    """

    document_id: str
    job_id: str
    file_name: str
    records: list[ChunkRecord]
    status: documents.DocumentStatus
    warning: str = ""
    indexed_with: dict[str, Any] = field(default_factory=dict)
    pictures: list[PictureRow] = field(default_factory=list)
    graph: Any = None
    images: list = field(default_factory=list)
    change: str = ""


@dataclass(frozen=True, slots=True)
class Stored:
    """What storing one version did.

    Attributes:
        row: the document row, now naming the version.
        obsolete: blob paths no longer used (the previous file, its pictures not kept), for the caller to remove.
        replaced: chunks of the previous version removed from the chunk index.
        removal: for a graph share, what removing the dropped chunks removed
            (:class:`~ragtopics.graph.store.RemovalReport`); None otherwise.
    """

    row: DocumentRow
    obsolete: list[str]
    replaced: int
    removal: Any = None


def store_version(rt: Runtime, topic, version: Version, *, fence: Fence) -> Stored:
    """Store one version: graph share (GraphRAG), SQL row and chunk swap, in that order, or nothing.

    Args:
        topic: the document's Topic.
        version: what to store.
        fence: the fence of the locks the caller holds (the document's, joined with the Topic's graph
            write lock when ``version.graph`` is given).

    Returns:
        What was stored.

    Raises:
        SupersededError: the job's version was replaced or the document is being deleted (nothing changed).
        RowNotCommittedError: the SQL commit failed after the chunk swap (the previous version is put back
            whole in all three stores).
        StoreUnavailableError: a store went away (whatever was written is put back when the store allows;
            see the module docstring for a commit that failed and a swap that could not be put back).
        Whatever a step raised; the previous version is then whole in all three stores.
    """
    documents.check_current(rt.metadata, version.document_id, version.job_id)
    index = rt.chunk_index(topic.id)
    if version.records:
        index.ensure()  # an index built by another embedder refuses the chunks before the graph changes
    if version.graph is None:
        return store_versions(rt, topic, [version], fence=fence)[0]
    # Imported here: the graph package (and its NLP library) loads only for GraphRAG Topics.
    from ragtopics.graph.ingest import apply_graph, document_chunk_ids, graph_store
    from ragtopics.graph.lifecycle import mark_recompute_due
    from ragtopics.graph.share import read_share

    plan = version.graph
    store = graph_store(rt, topic).fence_writes(fence)
    old_ids = document_chunk_ids(rt, topic, store, version.document_id)  # the graph's too: a re-embed drops the index
    entity_ids = {e.id for e in [*plan.entities, *plan.mentions]}
    entity_ids |= {r.source_id for r in plan.relationships} | {r.target_id for r in plan.relationships}
    share = read_share(
        store,
        version.document_id,
        old_ids | {cid for cid, _ in plan.chunks},
        entity_ids,
        [(r.source_id, r.target_id) for r in plan.relationships],
    )
    with _restored_on_failure(store, share):
        removal = apply_graph(
            rt, topic, version.document_id, version.file_name, plan, sorted(old_ids), version.images, fence=fence
        )
        [stored] = store_versions(rt, topic, [version], fence=fence)
    try:
        mark_recompute_due(rt, topic.id, version.change or f"{version.file_name} was uploaded")
    except Exception as exc:
        log.warning("the recompute mark of Topic %s was not set after storing %s: %s", topic.id, version.file_name, exc)
    return Stored(stored.row, stored.obsolete, stored.replaced, removal)


def store_versions(
    rt: Runtime, topic, versions: list[Version], *, fence: Fence, on_swap: Callable[[dict[str, int], float], None] | None = None
) -> list[Stored]:
    """Store the rows and chunks of versions (RAG, or GraphRAG once the graph share is written): all or none.

    One SQL transaction writes every row; right before it commits, one chunk swap (one MULTI/EXEC)
    replaces every document's chunks, parking the previous ones. If the swap fails the transaction rolls
    back; if the commit fails after the swap, the parked chunks are put back (one more MULTI/EXEC), so
    the index and the rows again name the previous versions; once the commit succeeds they are deleted.

    Args:
        versions: the versions, each of another document.
        fence: the fence of the document locks the caller holds.
        on_swap: ``on_swap({document id: chunks replaced}, swap milliseconds)`` right after the swap.

    Returns:
        Per version, in order, what was stored.

    Raises:
        SupersededError: one of the versions was replaced or its document deleted (nothing changes).
        RowNotCommittedError: the commit (or ``on_swap``) failed after the swap; the previous chunks are back.
        StoreUnavailableError: the commit failed after the swap and the previous chunks could not be put
            back (the new versions stay searchable; see the module docstring).
        LockLostError: a lock was lost before the swap, or before the swap could be put back.
        Whatever the row write or the swap raised (nothing changes).
    """
    index = rt.chunk_index(topic.id)
    swapped: list[ChunkSwap] = []

    def swap() -> None:  # inside the rows' transaction: the chunks and the rows change together
        t0 = time.perf_counter()
        swapped.append(index.swap_documents({v.document_id: v.records for v in versions}, fence=fence))
        if on_swap is not None:
            on_swap(swapped[0].removed, round((time.perf_counter() - t0) * 1000, 3))

    outcomes = [
        documents.Outcome(v.document_id, v.job_id, v.status, len(v.records), v.warning, v.indexed_with, v.pictures)
        for v in versions
    ]
    try:
        finished = documents.finish_many(rt.metadata, outcomes, before_commit=swap)
    except Exception as exc:
        if swapped:  # the swap is made, but the rows are not: the previous chunks go back
            _put_back(swapped[0], fence, exc)
        raise
    swapped[0].settle()
    replaced = swapped[0].removed
    return [Stored(row, obsolete, replaced[v.document_id]) for v, (row, obsolete) in zip(versions, finished, strict=True)]


class RowNotCommittedError(RagTopicsError):
    """The rows of new versions were not committed after their chunks were swapped in; the previous versions
    were put back in the chunk index (and, by :func:`store_version`, in the graph)."""


def _put_back(swap: ChunkSwap, fence: Fence, exc: Exception) -> None:
    """Undo a chunk swap whose rows failed to commit (``exc``), and raise what the caller should see.

    Raises:
        RowNotCommittedError: the previous chunks are back.
        LockLostError: a lock was lost (its new holder owns the chunks, and replaces them).
        StoreUnavailableError: the previous chunks could not be put back; the new ones stay (see the module docstring).
    """
    try:
        swap.put_back(fence)
    except LockLostError:
        log.warning("a chunk swap whose rows failed to commit (%s) was not put back: the lock was lost", exc)
        raise
    except Exception as undo:
        log.error("a chunk swap whose rows failed to commit (%s) could not be put back: %s", exc, undo)
        raise _CommitFailed(
            f"the new version is searchable but its row could not be written ({exc}), and the previous version "
            f"could not be put back ({undo}); it is indexed again when the worker restarts"
        ) from exc
    raise RowNotCommittedError(f"the row of the new version could not be written: {exc}") from exc


class _CommitFailed(StoreUnavailableError):
    """The SQL commit failed after the chunk swap, and the swap could not be put back: the new version is
    searchable, and is kept (rolled forward)."""


@contextlib.contextmanager
def _restored_on_failure(store, share) -> Iterator[None]:
    """Put the graph share back when the block fails, the chunk swap not made or put back.

    Not when a commit failed and the swap could not be put back (the new chunks are searchable then: the
    new graph share agrees with them), nor when a lock was lost (the lock's new holder owns the graph now; whatever this holder wrote of the
    share is replaced by the next version stored).
    """
    try:
        yield
    except _CommitFailed:
        raise
    except LockLostError:
        log.warning("graph share of %s not restored: the lock was lost, its next holder replaces it", share.document_id)
        raise
    except BaseException:
        # deferred: the graph package imports documents at module level, and loads only for GraphRAG Topics
        from ragtopics.graph.share import restore_share

        try:
            restore_share(store, share)
        except Exception as exc:
            log.error(
                "the graph share of %s could not be restored after a failed write: %s; it is replaced by the next version stored",
                share.document_id,
                exc,
            )
        raise
