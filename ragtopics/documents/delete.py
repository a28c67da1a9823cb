"""Deleting a document: a sequence of named steps that other parts of the product extend.

A delete first marks the document ``deleting`` (under its lock, so no job can swap in
a version afterwards and every job still working on it stops at its next step), then
runs :data:`DOCUMENT_DELETE_STEPS` in order, then removes the row: the document is gone.
Each step is idempotent, so a delete that stopped half-way (a crash, Redis away) is
finished by deleting again; until then the row says ``deleting`` and nothing of the
document is searchable (its chunks go first).

A Topic kind adds its own steps (a GraphRAG Topic: the document's share of the graph) through
:meth:`~ragtopics.kinds.TopicKind.document_delete_steps`, instead of copying this sequence;
:func:`add_delete_step` adds a step to every document delete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rq.exceptions import NoSuchJobError
from rq.job import Job

from ragtopics.errors import NotFoundError
from ragtopics.kinds import KindDeleteStep, kind_of
from ragtopics.runtime import Runtime
from ragtopics.storage import documents as document_store
from ragtopics.storage import topics as topic_store
from ragtopics.storage.locks import document_lock
from ragtopics.storage.metadata import DocumentRow
from ragtopics.storage.traces import delete_owner_traces

if TYPE_CHECKING:
    from ragtopics.topics.topics import Topic

log = logging.getLogger(__name__)


@dataclass
class Deletion:
    """What a delete works on, and what each step removed.

    Attributes:
        rt: the runtime.
        topic_id: the Topic of the document.
        document: the document's row as it was marked ``deleting``.
        job_id: the job the row named before the delete cleared it ("" when none).
        removed: counts by kind (``chunks``, ``files``, ``jobs``, ``traces``, ...), filled by the steps.
    """

    rt: Runtime
    topic_id: str
    document: DocumentRow
    job_id: str = ""
    removed: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, n: int) -> None:
        """Add ``n`` removed things of ``kind``."""
        self.removed[kind] = self.removed.get(kind, 0) + n


#: ``step(deletion)``: removes one kind of thing a document left behind; must be idempotent.
DeleteStep = Callable[[Deletion], None]


def _cancel_job(d: Deletion) -> None:
    """Cancel the document's queued job and remove its RQ record; a running job stops at its next step by itself."""
    if not d.job_id:
        return
    try:
        job = Job.fetch(d.job_id, connection=d.rt.redis)
    except NoSuchJobError:
        return
    if job.get_status(refresh=True) in ("queued", "deferred", "scheduled"):
        job.cancel()
    if job.get_status(refresh=True) != "started":  # a started job's record is its worker's; it ends "cancelled"
        job.delete()
        d.count("jobs", 1)


def _remove_chunks(d: Deletion) -> None:
    """Remove the document's chunks (and with them its keyword entries) from the Topic's index."""
    index = d.rt.chunk_index(d.topic_id)
    d.count("chunks", index.delete_document(d.document.id))


def _remove_traces(d: Deletion) -> None:
    """Remove the stored upload traces of the document."""
    d.count("traces", delete_owner_traces(d.rt.metadata, f"document:{d.document.id}"))


def insert_step(steps: list[tuple[str, Callable]], name: str, step: Callable, *, before: str) -> None:
    """Insert ``(name, step)`` into a delete sequence before the step ``before`` (idempotent by name).

    Raises:
        ValueError: when ``before`` names no step.
    """
    names = [n for n, _ in steps]
    if name in names:
        return
    if before not in names:
        raise ValueError(f"no delete step {before!r}; steps are {names}")
    steps.insert(names.index(before), (name, step))


def _remove_files(d: Deletion) -> None:
    """Remove the document's folder in the file store: every stored version and picture (signed links then fail)."""
    d.count("files", d.rt.blobs.remove_tree(f"{d.topic_id}/{d.document.id}"))


#: The steps of a document delete, in order: ``(name, step)``.
DOCUMENT_DELETE_STEPS: list[tuple[str, DeleteStep]] = [
    ("remove_chunks", _remove_chunks),
    ("cancel_job", _cancel_job),
    ("remove_traces", _remove_traces),
    ("remove_files", _remove_files),
]


def add_delete_step(name: str, step: DeleteStep, *, before: str = "remove_files") -> None:
    """Insert a step into :data:`DOCUMENT_DELETE_STEPS` before the step ``before`` (idempotent by name).

    Raises:
        ValueError: when ``before`` names no step.
    """
    insert_step(DOCUMENT_DELETE_STEPS, name, step, before=before)


def delete_document(rt: Runtime, topic: Topic, file_name: str) -> dict[str, int]:
    """Delete a document of a Topic by file name: chunks, keyword entries, pictures, stored files, traces, job, row.

    Returns:
        What was removed, by kind (``chunks``, ``files``, ``jobs``, ``traces``, ``rows``).

    Raises:
        NotFoundError: when the Topic has no document of that name.
    """
    from ragtopics.documents.uploads import document_id_for  # uploads imports this module's neighbours

    document_id = document_id_for(topic.id, file_name)
    if document_store.get_document(rt.metadata, document_id) is None:
        names = [row.file_name for row in document_store.topic_documents(rt.metadata, topic.id)]
        hint = f"; its documents are: {', '.join(names[:10])}{' …' if len(names) > 10 else ''}" if names else " (it has none)"
        raise NotFoundError(f"Topic {topic.name!r} has no document {file_name!r}{hint}")
    return delete_document_by_id(rt, topic.id, document_id)


def delete_steps(steps: list[tuple[str, Callable]], own: list[KindDeleteStep]) -> list[tuple[str, Callable]]:
    """A delete sequence with a Topic kind's own steps inserted, each before the step it names.

    Raises:
        ValueError: when a kind's step names no step to run before.
    """
    out = list(steps)
    for step in own:
        insert_step(out, step.name, step.run, before=step.before)
    return out


def delete_document_by_id(rt: Runtime, topic_id: str, document_id: str) -> dict[str, int]:
    """Delete a document by id (see :func:`delete_document`); a document already gone removes nothing.

    The steps are :data:`DOCUMENT_DELETE_STEPS` with the Topic kind's own
    (:meth:`~ragtopics.kinds.TopicKind.document_delete_steps`).
    """
    topic = topic_store.find_topic(rt.metadata, topic_id)
    own = kind_of(topic).document_delete_steps() if topic is not None else []
    with document_lock(rt.redis, document_id):
        before = document_store.get_document(rt.metadata, document_id)
        row = document_store.begin_delete(rt.metadata, document_id)
    if row is None:
        return {}
    deletion = Deletion(rt, topic_id, row, job_id=before.job_id if before is not None else "")
    for name, step in delete_steps(DOCUMENT_DELETE_STEPS, own):
        step(deletion)
        log.debug("delete %s: %s done", row.file_name, name)
    with document_lock(rt.redis, document_id):
        blobs = document_store.remove(rt.metadata, document_id)
    for path in blobs:  # normally gone with the folder already
        rt.blobs.remove(path)
    deletion.count("rows", 1)
    log.info("deleted %s from Topic %s: %s", row.file_name, topic_id, deletion.removed)
    return deletion.removed
