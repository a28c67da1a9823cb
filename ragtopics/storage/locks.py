"""Per-document locks in Redis, so that the steps that change what is searchable never interleave.

Three things change a document's searchable state: a job making its version the
searchable one (chunk swap in Redis, then the SQL row), a new upload staging a newer
version (which supersedes that job and may remove its file), and a delete. Each runs
under :func:`document_lock`, so a reader sees one version everywhere: the chunks, the
row and the file its link serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from ragtopics.errors import StoreUnavailableError

#: A lock not released within this many seconds expires (a killed holder cannot block the document for ever).
LOCK_TTL_S = 120
#: How long a caller waits for the lock before giving up, in seconds.
LOCK_WAIT_S = 60
#: How long a worker's job waits: longer than a lock lives, so a lock left by a killed worker has
#: expired before the job gives up (a job that gave up would fail and wait for the next worker start).
WORKER_LOCK_WAIT_S = LOCK_TTL_S + 10


def lock_key(document_id: str) -> str:
    """The Redis key of a document's lock."""
    return f"rt:lock:document:{document_id}"


@contextmanager
def document_lock(client: redis.Redis, document_id: str, *, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold a document's lock for the duration of the block.

    Raises:
        StoreUnavailableError: when the lock is not free within ``wait_s`` seconds.
    """
    lock = client.lock(lock_key(document_id), timeout=LOCK_TTL_S, blocking_timeout=wait_s)
    if not lock.acquire():
        raise StoreUnavailableError(f"document {document_id} is busy (another upload or delete holds it); try again")
    try:
        yield
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:  # expired while held: someone else may hold it now; nothing to release
            pass
