"""Document locks on the real Redis: a batch's locks (document_locks) and a single lock (document_lock) exclude
each other; a busy lock is waited for without holding the others in a circle; nothing is left behind."""

from __future__ import annotations

import threading
import time

import pytest

from ragtopics.errors import StoreUnavailableError
from ragtopics.storage.locks import document_lock, document_locks, lock_key


def held(rt, *ids: str) -> list[bool]:
    return [bool(rt.redis.exists(lock_key(d))) for d in ids]


def test_free_locks_are_taken_together_and_released(rt):
    with document_locks(rt.redis, ["doc-b", "doc-a", "doc-a"]):
        assert held(rt, "doc-a", "doc-b") == [True, True]
        with pytest.raises(StoreUnavailableError, match="doc-a is busy"), document_lock(rt.redis, "doc-a", wait_s=0.2):
            pass
    assert held(rt, "doc-a", "doc-b") == [False, False]
    with document_lock(rt.redis, "doc-a", wait_s=0.2):  # free again for a single lock
        assert held(rt, "doc-a") == [True]


def test_a_busy_lock_is_waited_for_and_the_others_are_taken_in_order(rt):
    single = rt.redis.lock(lock_key("doc-b"), timeout=30)
    assert single.acquire(blocking=False)
    entered = threading.Event()

    def batch():
        with document_locks(rt.redis, ["doc-c", "doc-b", "doc-a"], wait_s=10):
            entered.set()
            time.sleep(0.2)

    worker = threading.Thread(target=batch)
    worker.start()
    time.sleep(0.4)
    assert not entered.is_set()
    assert held(rt, "doc-a", "doc-c") == [True, False]  # waiting for doc-b, holding only what comes before it
    single.release()
    worker.join(10)
    assert entered.is_set() and held(rt, "doc-a", "doc-b", "doc-c") == [False, False, False]


def test_a_lock_that_stays_busy_fails_with_a_message_and_leaves_nothing_held(rt):
    single = rt.redis.lock(lock_key("doc-b"), timeout=30)
    assert single.acquire(blocking=False)
    with pytest.raises(StoreUnavailableError, match="doc-b is busy"):
        with document_locks(rt.redis, ["doc-a", "doc-b", "doc-c"], wait_s=0.3):
            pass
    assert held(rt, "doc-a", "doc-c") == [False, False]
    assert held(rt, "doc-b") == [True]  # the other holder's lock is untouched
    single.release()


def test_a_lock_that_expired_while_held_is_not_released_from_its_new_holder(rt):
    with document_locks(rt.redis, ["doc-a", "doc-b"]):
        rt.redis.set(lock_key("doc-a"), b"someone-else")  # it expired and another holder took it
    assert rt.redis.get(lock_key("doc-a")) == b"someone-else" and held(rt, "doc-b") == [False]


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_lock_held_longer_than_its_time_to_live_is_renewed_and_then_released(rt, monkeypatch, batch):
    """A long hold (a GraphRAG file's graph, a batch of 128 files) keeps its lock; a killed holder's lock still expires."""
    from ragtopics.storage import locks

    monkeypatch.setattr(locks, "LOCK_TTL_S", 0.6)
    hold = document_locks(rt.redis, ["doc-a", "doc-b"]) if batch else document_lock(rt.redis, "doc-a")
    with hold:
        time.sleep(1.5)  # two and a half lifetimes
        assert held(rt, "doc-a") == [True] and 0 < rt.redis.pttl(lock_key("doc-a")) <= 600
        with pytest.raises(StoreUnavailableError, match="doc-a is busy"), document_lock(rt.redis, "doc-a", wait_s=0.1):
            pass
    assert held(rt, "doc-a", "doc-b") == [False, False]
    time.sleep(0.3)  # the renewal stopped with the block: nothing sets the key again
    assert held(rt, "doc-a", "doc-b") == [False, False]
    rt.redis.set(lock_key("doc-c"), b"a killed holder's token", px=600)
    time.sleep(0.8)
    with document_lock(rt.redis, "doc-c", wait_s=0.1):  # expired: nobody renews another process's lock
        pass


def _take_over(rt, document_id: str) -> None:
    """What happens to a holder stalled past the lock's time to live: the lock expired, and another holder took it."""
    rt.redis.set(lock_key(document_id), b"the-new-holder", px=60_000)


def _index(rt):
    from ragtopics.storage.chunk_index import ChunkIndex

    return ChunkIndex(rt.redis, "topic-fenced", dims=4, embedding_model="m")


def _records(document_id: str, n: int):
    import numpy as np

    from ragtopics.storage.chunk_index import ChunkRecord

    return [
        ChunkRecord(
            chunk_id=f"chunk-{document_id}-{i}",
            document_id=document_id,
            file_name="a.txt",
            position=i,
            text=f"text {i}",
            embedding=np.array([1, 0, 0, i], dtype=np.float32),
        )
        for i in range(n)
    ]


def test_a_holder_that_lost_its_lock_cannot_swap_chunks(rt):
    from ragtopics.storage.locks import LockLostError

    index = _index(rt)
    with document_lock(rt.redis, "doc-a") as fence:
        index.replace_document("doc-a", _records("doc-a", 2), fence=fence)  # still ours: written
        fence.check()
        _take_over(rt, "doc-a")
        with pytest.raises(LockLostError, match="rt:lock:document:doc-a expired while held"):
            index.replace_document("doc-a", _records("doc-a", 5), fence=fence)
        with pytest.raises(LockLostError):
            fence.check()
    assert sorted(index.document_chunk_ids("doc-a")) == ["chunk-doc-a-0", "chunk-doc-a-1"]  # the second swap wrote nothing
    assert rt.redis.get(lock_key("doc-a")) == b"the-new-holder"  # and the new holder's lock was left alone
    with document_locks(rt.redis, ["doc-b", "doc-c"]) as fence:
        _take_over(rt, "doc-c")
        with pytest.raises(LockLostError, match="doc-c"):
            index.replace_documents({"doc-b": _records("doc-b", 1), "doc-c": _records("doc-c", 1)}, fence=fence)
    assert index.document_chunk_ids("doc-b") == [] and index.document_chunk_ids("doc-c") == []


def test_a_lock_the_renewal_found_lost_fences_the_next_write(rt, monkeypatch, caplog):
    from ragtopics.storage import locks

    monkeypatch.setattr(locks, "LOCK_TTL_S", 0.6)
    index = _index(rt)
    with document_lock(rt.redis, "doc-a") as fence:
        _take_over(rt, "doc-a")
        deadline = time.monotonic() + 30
        while not fence.lost and time.monotonic() < deadline:  # the renewal runs every LOCK_TTL_S / 3
            time.sleep(0.05)
        with pytest.raises(locks.LockLostError):
            index.replace_document("doc-a", _records("doc-a", 1), fence=fence)
    assert "document lock(s) expired while held" in caplog.text and index.document_chunk_ids("doc-a") == []


def test_an_upload_whose_lock_is_lost_before_the_swap_writes_no_chunks(rt, run_jobs, monkeypatch):
    from ragtopics.documents.uploads import get_document
    from ragtopics.ingest import pipeline
    from ragtopics.topics.topics import create_topic
    from tests.ingest.test_ingest import upload

    topic = create_topic(rt, "Manuals")
    doc, _ = upload(rt, topic, "valves.md", b"Valve V-1 is serviced every spring.")
    put_pictures = pipeline._put_picture_blobs

    def stalled_then_put(*args, **kwargs):  # runs under the document lock, before the chunk swap
        _take_over(rt, doc.id)
        return put_pictures(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_put_picture_blobs", stalled_then_put)
    run_jobs()
    assert rt.chunk_index(topic.id).document_chunk_ids(doc.id) == []
    assert get_document(rt, doc.id).status == "processing"  # nothing changed: queued again at the next worker start
    assert rt.redis.get(lock_key(doc.id)) == b"the-new-holder"
    monkeypatch.setattr(pipeline, "_put_picture_blobs", put_pictures)
    rt.redis.delete(lock_key(doc.id))


def stored_files(rt) -> list[str]:
    """Every file of the (local) file store, as relative paths."""
    return sorted(str(p.relative_to(rt.blobs.root)) for p in rt.blobs.root.rglob("*") if p.is_file())


def test_an_upload_whose_lock_is_lost_before_its_pictures_are_written_writes_no_picture(rt, run_jobs, monkeypatch):
    from ragtopics.documents.uploads import get_document
    from ragtopics.ingest import pipeline
    from ragtopics.topics.topics import create_topic
    from tests.ingest.test_ingest import upload
    from tests.ingest.test_pictures import pictures_of, pump_docx

    topic = create_topic(rt, "Pumps")
    doc, _ = upload(rt, topic, "pump.docx", pump_docx())
    staged = stored_files(rt)
    put_pictures = pipeline._put_picture_blobs

    def stalled_then_put(*args, **kwargs):  # under the document lock, before the picture files
        assert len(args[1]) == 1, "the file has one picture to store"
        _take_over(rt, doc.id)
        return put_pictures(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_put_picture_blobs", stalled_then_put)
    run_jobs()
    assert stored_files(rt) == staged  # the upload's own file only: no picture written
    assert pictures_of(rt, doc.id) == [] and rt.chunk_index(topic.id).document_chunk_ids(doc.id) == []
    assert get_document(rt, doc.id).status == "processing"  # queued again by the next recovery pass
    assert rt.redis.get(lock_key(doc.id)) == b"the-new-holder"
    rt.redis.delete(lock_key(doc.id))


def test_a_failed_upload_whose_lock_is_lost_before_its_row_is_written_leaves_the_row_and_file(rt, run_jobs, monkeypatch):
    from ragtopics.documents.uploads import get_document
    from ragtopics.storage import documents
    from ragtopics.topics.topics import create_topic
    from tests.ingest.test_ingest import upload

    topic = create_topic(rt, "Binary")
    doc, _ = upload(rt, topic, "data.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))  # cannot be read
    staged = get_document(rt, doc.id).pending_blob_path
    fail = documents.fail

    def stalled_then_fail(*args, **kwargs):  # under the lock the failure is written with, right before the row
        _take_over(rt, doc.id)
        return fail(*args, **kwargs)

    monkeypatch.setattr(documents, "fail", stalled_then_fail)
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "processing" and row.error in ("", None)  # left to the lock's new holder
    assert row.pending_blob_path == staged and rt.blobs.exists(staged)
    assert rt.redis.get(lock_key(doc.id)) == b"the-new-holder"
    monkeypatch.setattr(documents, "fail", fail)
    rt.redis.delete(lock_key(doc.id))


def test_the_locks_of_a_worker_rq_no_longer_knows_are_released_by_the_next_recovery_pass(rt):
    from ragtopics.storage import locks
    from ragtopics.worker.recovery import recovery_pass

    locks.set_holder("worker-1")
    try:
        with document_lock(rt.redis, "doc-a") as fence:
            assert rt.redis.get(lock_key("doc-a")).startswith(b"worker-1/")  # the token names its worker
            assert locks.release_dead_holders(rt.redis, {"worker-1"}) == []  # alive: kept
            fence.check()
            assert locks.release_dead_holders(rt.redis, set()) == [lock_key("doc-a")]  # dead (or stalled): released
            with pytest.raises(locks.LockLostError):  # and a stalled holder that wakes up writes nothing
                fence.check()
    finally:
        locks.set_holder("")
    with document_lock(rt.redis, "doc-a", wait_s=0.2):  # free at once, not after LOCK_TTL_S
        assert rt.redis.get(lock_key("doc-a")).count(b"/") == 0  # taken outside a worker: no name

    # a killed worker's document and graph locks; a console's lock; the recovery pass's own lock key stays free
    rt.redis.set(lock_key("doc-b"), b"worker-killed/5f3a", px=120_000)
    rt.redis.set(locks.graph_lock_key("topic-x"), b"worker-killed/77c1", px=120_000)
    rt.redis.set(lock_key("doc-c"), b"0a1b2c3d", px=120_000)
    recovery_pass(rt)  # no rq worker is alive in this test: worker-killed is dead
    assert not rt.redis.exists(lock_key("doc-b")) and not rt.redis.exists(locks.graph_lock_key("topic-x"))
    assert rt.redis.get(lock_key("doc-c")) == b"0a1b2c3d"
    with pytest.raises(ValueError, match="cannot hold '/'"):
        locks.set_holder("a/b")
