"""RQ job functions. Each runs in a worker process with the process-wide runtime."""

from __future__ import annotations

import logging

from rq import get_current_job

from ragtopics.ingest.pipeline import ingest_document
from ragtopics.runtime import get_runtime

log = logging.getLogger(__name__)


def ingest(topic_id: str, document_id: str) -> dict:
    """Index one uploaded document; progress goes to ``job.meta`` (phase, done, total).

    Returns:
        ``{"document_id", "status", "chunk_count", "replaced"}``.

    Raises:
        RagTopicsError: the job fails with the error's message (shown in the console).
    """
    job = get_current_job()

    def progress(phase: str, done: int, total: int) -> None:
        if job is not None:
            job.meta.update(phase=phase, done=done, total=total, topic_id=topic_id, document_id=document_id)
            job.save_meta()

    result = ingest_document(get_runtime(), document_id, progress)
    return {"document_id": result.document_id, "status": result.status, "chunk_count": result.chunk_count, "replaced": result.replaced}
