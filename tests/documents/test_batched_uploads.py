"""Small files of one upload share indexing jobs (BatchedUploads → ingest_batch → ingest_documents), each file
keeping its own job id, progress, status, failure and trace; run through the real queue and worker."""

from __future__ import annotations

import numpy as np
import pytest
from rq.job import Job

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import BatchedUploads, batchable, get_document, upload_file
from ragtopics.ingest.pipeline import ingest_documents
from ragtopics.jobs.queue import batch_of, job_progress, job_progresses, queue_for
from ragtopics.runtime import Runtime
from ragtopics.storage import documents as document_store
from ragtopics.storage.chunk_index import decode_vector
from ragtopics.storage.traces import load_trace
from ragtopics.topics.topics import create_topic
from ragtopics.ui.upload_tab import jobs_html
from ragtopics.worker.recovery import recover_stranded, stranded_reason

SMALL = {"chunk_size": 200, "chunk_overlap": 0}
FACTS = {
    "pumps.txt": "Pump P-7 is inspected every 90 days by the night shift.",
    "valves.md": "Valve V-12 was replaced in March after a leak at the flange.",
    "boilers.txt": "Boiler B-3 runs at 12 bar; its safety valve opens at 13 bar.",
    "fans.txt": "Fan F-1 in the east hall is cleaned weekly. " * 12,  # several chunks
}


def stored(rt, topic_id: str, document_id: str) -> list[dict]:
    index = rt.chunk_index(topic_id)
    return [{k.decode(): v for k, v in rt.redis.hgetall(index.key(cid)).items()} for cid in index.document_chunk_ids(document_id)]


def upload_all(rt, topic, files: dict[str, str | bytes], **kwargs) -> dict:
    rows = {}
    with BatchedUploads(rt, topic, **kwargs) as uploads:
        for name, text in files.items():
            rows[name] = uploads.add(name, text.encode() if isinstance(text, str) else text)
    return rows


def test_small_files_share_one_job_and_each_is_indexed_with_its_own_result_and_trace(rt, run_jobs):
    topic = create_topic(rt, "Plant", settings=SMALL)
    rows = upload_all(rt, topic, FACTS)
    queued = queue_for(rt).get_job_ids()
    assert len(queued) == 1 and queued[0].startswith("batch-")
    assert {batch_of(rt, row.job_id) for row in rows.values()} == {queued[0]}
    assert {job_progress(rt, row.job_id).status for row in rows.values()} == {"queued"}
    assert [p.shared_by for p in job_progresses(rt, [row.job_id for row in rows.values()])] == [len(FACTS)] * len(FACTS)
    bars = jobs_html(rt, [(row.job_id, name) for name, row in rows.items()])
    assert bars.count("in one job with 3 other files") == len(FACTS)

    run_jobs()
    bars = jobs_html(rt, [(row.job_id, name) for name, row in rows.items()])
    assert "4 indexed" in bars and bars.count("indexed · 1 chunk") == 3 and "other files" not in bars
    for name, row in rows.items():
        doc = get_document(rt, row.id)
        chunks = stored(rt, topic.id, row.id)
        assert doc.status == "indexed" and doc.chunk_count == len(chunks) > 0
        assert "".join(c["text"].decode() for c in chunks).replace(" ", "") == FACTS[name].replace(" ", "")
        progress = job_progress(rt, row.job_id)
        assert (progress.status, progress.result["status"], progress.result["chunk_count"]) == (
            "finished",
            "indexed",
            len(chunks),
        )
        assert doc.indexed_with["embedding_model"] == rt.gateway.embedder.model
        trace = load_trace(rt.metadata, f"document:{row.id}")
        [embed] = [e for e in trace if e["step"] == "embed"]
        total = sum(get_document(rt, r.id).chunk_count for r in rows.values())
        assert embed["data"]["count"] == len(chunks)
        assert (embed["data"]["batch_files"], embed["data"]["batch_chunks"]) == (len(FACTS), total)
        assert [e["step"] for e in trace if e["parent"] is None][:2] == ["read", "chunk"]
    assert len(stored(rt, topic.id, rows["fans.txt"].id)) > 1


def test_a_file_indexed_in_a_batch_is_stored_as_one_indexed_alone(rt, run_jobs):
    """Same chunks, keyword fields and (up to float rounding) embeddings: only the way of embedding differs."""
    alone = create_topic(rt, "Alone", settings={**SMALL, "retrieval_strategy": "HYBRID"})
    together = create_topic(rt, "Together", settings={**SMALL, "retrieval_strategy": "HYBRID"})
    singles = {name: upload_file(rt, alone, name, text.encode()) for name, text in FACTS.items()}
    batched = upload_all(rt, together, FACTS)
    run_jobs()
    for name in FACTS:
        a, b = stored(rt, alone.id, singles[name].id), stored(rt, together.id, batched[name].id)
        assert [c["text"] for c in a] == [c["text"] for c in b] and [c["keywords"] for c in a] == [c["keywords"] for c in b]
        va = np.stack([decode_vector(c["embedding"], rt.gateway.embedder.dims) for c in a])
        vb = np.stack([decode_vector(c["embedding"], rt.gateway.embedder.dims) for c in b])
        np.testing.assert_allclose(va, vb, atol=1e-3)  # batches differ in the last float32 bits, then round to float16


def test_a_file_that_fails_in_a_batch_fails_alone(rt, reconfigure, run_jobs):
    rt = reconfigure(MAX_CHUNKS_PER_DOCUMENT=3)
    topic = create_topic(rt, "Mixed", settings=SMALL)
    files = {**FACTS, "huge.txt": "A sentence about pumps and valves and boilers. " * 60}
    rows = upload_all(rt, topic, files)
    run_jobs()
    failed = job_progress(rt, rows["huge.txt"].job_id)
    assert failed.status == "failed" and "huge.txt was refused" in failed.error and "MAX_CHUNKS_PER_DOCUMENT" in failed.error
    doc = get_document(rt, rows["huge.txt"].id)
    assert doc.status == "failed" and "MAX_CHUNKS_PER_DOCUMENT" in doc.error
    assert stored(rt, topic.id, doc.id) == []
    assert {get_document(rt, rows[n].id).status for n in FACTS} == {"indexed"}
    assert {job_progress(rt, rows[n].job_id).status for n in FACTS} == {"finished"}


def test_a_delete_or_a_reupload_while_the_batch_waits_touches_only_that_file(rt, run_jobs):
    topic = create_topic(rt, "Races", settings=SMALL)
    with BatchedUploads(rt, topic) as uploads:
        first = uploads.add("pumps.txt", b"Pump P-7 version one.")
        gone = uploads.add("valves.md", FACTS["valves.md"].encode())
        kept = uploads.add("boilers.txt", FACTS["boilers.txt"].encode())
        second = uploads.add("pumps.txt", b"Pump P-7 version two, inspected monthly.")
    [batch] = queue_for(rt).get_job_ids()
    delete_document(rt, topic, "valves.md")
    assert Job.fetch(batch, connection=rt.redis).get_status(refresh=True) == "queued"  # the shared job is not cancelled

    run_jobs()
    assert job_progress(rt, first.job_id).result["status"] == "superseded"
    assert job_progress(rt, gone.job_id).result["status"] == "cancelled"
    assert job_progress(rt, second.job_id).result["status"] == "indexed"
    assert job_progress(rt, kept.job_id).result["status"] == "indexed"
    assert [c["text"] for c in stored(rt, topic.id, second.id)] == [b"Pump P-7 version two, inspected monthly."]
    assert document_store.get_document(rt.metadata, gone.id) is None and stored(rt, topic.id, gone.id) == []


def test_a_reupload_through_a_batch_replaces_the_previous_version(rt, run_jobs):
    topic = create_topic(rt, "Again", settings=SMALL)
    upload_all(rt, topic, {"pumps.txt": "Pump P-7 old text " * 20, "valves.md": FACTS["valves.md"]})
    run_jobs()
    rows = upload_all(rt, topic, {"pumps.txt": "Pump P-7 new text.", "valves.md": FACTS["valves.md"]})
    run_jobs()
    assert [c["text"] for c in stored(rt, topic.id, rows["pumps.txt"].id)] == [b"Pump P-7 new text."]
    assert job_progress(rt, rows["pumps.txt"].job_id).result["replaced"] > 0
    assert rt.chunk_index(topic.id).count() == 2


def test_only_small_text_files_of_a_rag_topic_are_batched(rt):
    rag = create_topic(rt, "Rag")
    graph = create_topic(rt, "Graph", kind="graphrag")
    assert batchable(rag, "notes.txt", 1000) and batchable(rag, "table.csv", 1000)
    assert not batchable(rag, "notes.txt", 10 * 1024 * 1024)
    assert not batchable(rag, "report.pdf", 1000) and not batchable(rag, "photo.png", 1000)
    assert not batchable(graph, "notes.txt", 1000)
    for settings in (
        {"chunking_strategy": "SEMANTIC"},
        {"retrieval_strategy": "HYBRID", "keyword_enrichment": "LLM"},
        {"import_strategy": "NARRATE"},
    ):
        assert not batchable(create_topic(rt, f"Calls {len(settings)}{min(settings)}", settings=settings), "notes.txt", 1000)
    assert batchable(create_topic(rt, "Hybrid", settings={"retrieval_strategy": "HYBRID"}), "notes.txt", 1000)
    rows = upload_all(rt, graph, {"a.txt": "Marie Curie worked in Paris.", "b.txt": "Pierre Curie worked in Paris."})
    assert sorted(queue_for(rt).get_job_ids()) == sorted(row.job_id for row in rows.values())
    assert all(batch_of(rt, row.job_id) == "" for row in rows.values())


def test_a_single_small_file_gets_its_own_job_and_a_full_batch_is_queued_at_once(rt):
    topic = create_topic(rt, "Sizes", settings=SMALL)
    [row] = upload_all(rt, topic, {"one.txt": "Just one file."}).values()
    assert queue_for(rt).get_job_ids() == [row.job_id]
    with BatchedUploads(rt, topic, batch_files=2) as uploads:
        uploads.add("a.txt", b"first")
        uploads.add("b.txt", b"second")
        assert len(queue_for(rt).get_job_ids()) == 2  # the full batch went at once
        uploads.add("c.txt", b"third")
    assert len(queue_for(rt).get_job_ids()) == 3
    with BatchedUploads(rt, topic, batch_bytes=100) as uploads:  # 40 + 40 fit, a third would not
        for name in ("d.txt", "e.txt", "f.txt"):
            uploads.add(name, name.encode() * 8)
    jobs = queue_for(rt).get_job_ids()
    assert len(jobs) == 5
    assert [len(Job.fetch(j, connection=rt.redis).args[1]) for j in jobs if j.startswith("batch-")] == [2, 2]


def test_a_batch_that_cannot_be_queued_leaves_its_files_failed_and_says_so(rt, settings):
    topic = create_topic(rt, "Down", settings=SMALL)
    uploads = BatchedUploads(rt, topic)
    rows = [uploads.add(name, text.encode()) for name, text in FACTS.items()]
    uploads.rt = Runtime(settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"}))  # Redis went away
    uploads.flush()
    assert [row.id for row, _ in uploads.not_queued] == [row.id for row in rows]
    assert "could not be queued for indexing" in uploads.not_queued[0][1]
    for row in rows:
        doc = get_document(rt, row.id)
        assert doc.status == "failed" and "could not be queued" in doc.error


def test_a_batch_started_by_a_dead_worker_is_recovered_file_by_file(rt, run_jobs):
    topic = create_topic(rt, "Crash", settings=SMALL)
    rows = upload_all(rt, topic, FACTS)
    [batch] = queue_for(rt).get_job_ids()
    queue_for(rt).remove(batch)
    job = Job.fetch(batch, connection=rt.redis)
    job.worker_name = "a-worker-that-crashed"
    job.set_status("started")
    job.save()
    for row in rows.values():
        assert stranded_reason(rt, row.job_id) == f"job {batch} was started by a worker that no longer runs"
    recovered = recover_stranded(rt)
    assert sorted(r.file_name for r in recovered) == sorted(FACTS) and {r.action for r in recovered} == {"requeued"}
    run_jobs()
    for row in rows.values():
        assert get_document(rt, row.id).status == "indexed"
        assert job_progress(rt, row.job_id).result["status"] == "indexed"  # the version's own job now


def test_ingest_documents_reports_progress_for_the_whole_batch(rt):
    topic = create_topic(rt, "Progress", settings=SMALL)
    from ragtopics.documents.uploads import receive_upload

    rows = [receive_upload(rt, topic, name, text.encode()) for name, text in FACTS.items()]
    seen = []
    results = ingest_documents(
        rt,
        topic.id,
        [(r.id, r.job_id, r.pending_blob_path) for r in rows],
        lambda phase, done, total: seen.append((phase, done, total)),
    )
    chunks = sum(r.chunk_count for r in results.values())
    assert [s for s in seen if s[0] == "reading"] == [("reading", n, len(rows)) for n in range(len(rows))]
    assert ("embedding", 0, chunks) in seen and seen[-1] == ("done", len(rows), len(rows))
    assert {r.status for r in results.values()} == {"indexed"} and rt.chunk_index(topic.id).count() == chunks


def test_a_file_that_fails_early_says_so_before_its_batch_ends(rt, reconfigure):
    rt = reconfigure(MAX_CHUNKS_PER_DOCUMENT=3)
    topic = create_topic(rt, "Early", settings=SMALL)
    from ragtopics.documents.uploads import receive_upload

    files = {**FACTS, "huge.txt": "A sentence about pumps and valves and boilers. " * 60}
    rows = {name: receive_upload(rt, topic, name, text.encode()) for name, text in files.items()}
    events = []
    ingest_documents(
        rt,
        topic.id,
        [(r.id, r.job_id, r.pending_blob_path) for r in rows.values()],
        lambda phase, done, total: events.append(phase),
        lambda job_id, result: events.append((job_id, result.status)),
    )
    assert (rows["huge.txt"].job_id, "failed") in events
    assert events.index((rows["huge.txt"].job_id, "failed")) < events.index("embedding")  # known before the batch ends
    assert sum(isinstance(e, tuple) for e in events) == 1  # the stored ones are reported at the end, not here


def test_the_progress_of_a_running_batch_shows_a_settled_failure(rt):
    topic = create_topic(rt, "Settled", settings=SMALL)
    rows = upload_all(rt, topic, FACTS)
    [batch] = queue_for(rt).get_job_ids()
    job = Job.fetch(batch, connection=rt.redis)
    job.meta.update(
        phase="embedding",
        done=2,
        total=9,
        settled={rows["pumps.txt"].job_id: {"status": "failed", "reason": "pumps.txt could not be read"}},
    )
    job.save_meta()
    progress = job_progresses(rt, [row.job_id for row in rows.values()])
    assert (progress[0].status, progress[0].error) == ("failed", "pumps.txt could not be read")
    assert [(p.status, p.phase, p.done, p.total) for p in progress[1:]] == [("queued", "embedding", 2, 9)] * 3


def test_the_bars_say_how_many_files_they_leave_out(rt, run_jobs):
    topic = create_topic(rt, "Many", settings=SMALL)
    rows = upload_all(rt, topic, {f"n{i:02d}.txt": f"Note {i}." for i in range(25)})
    jobs = [(row.job_id, name) for name, row in rows.items()]
    assert "20 of 25 files shown" in jobs_html(rt, jobs)
    run_jobs()
    bars = jobs_html(rt, jobs)
    assert "25 indexed" in bars and "20 of 25 files shown" in bars and "n24.txt" in bars  # the newest finished ones


def test_a_chunk_over_the_embedders_window_is_split_in_a_batch_as_it_is_alone(rt, run_jobs):
    """The batch counts every file's tokens in one call; the split must be the one a file alone gets."""
    sentence = "Compressor C-{} on line {} was serviced after the pressure alarm tripped twice. "
    long = "".join(sentence.format(n, n % 7) for n in range(40))  # one paragraph of about 700 word pieces
    files = {"long.txt": long, **FACTS}
    settings = {"chunk_size": 4000, "chunk_overlap": 0}
    alone = create_topic(rt, "Alone", settings=settings)
    together = create_topic(rt, "Together", settings=settings)
    single = upload_file(rt, alone, "long.txt", long.encode())
    batched = upload_all(rt, together, files)
    run_jobs()
    window = rt.gateway.embedder.max_tokens
    split = [
        c["text"].decode() for c in sorted(stored(rt, together.id, batched["long.txt"].id), key=lambda c: int(c["position"]))
    ]
    assert len(split) >= 3 and max(rt.gateway.embedder.count_tokens(split)) <= window
    assert split == [c["text"].decode() for c in sorted(stored(rt, alone.id, single.id), key=lambda c: int(c["position"]))]
    doc = get_document(rt, batched["long.txt"].id)
    assert doc.chunk_count == len(split) and doc.indexed_with["chunks_split_to_fit"] == 1
    assert doc.indexed_with["token_cap"] == get_document(rt, single.id).indexed_with["token_cap"]
    assert f"{window}-token window" in doc.indexed_with["token_cap"]
    for name in FACTS:  # the short files of the same batch are not split
        assert get_document(rt, batched[name].id).chunk_count == len(stored(rt, together.id, batched[name].id))
    [chunk_step] = [e for e in load_trace(rt.metadata, f"document:{batched['long.txt'].id}") if e["step"] == "chunk"]
    assert chunk_step["data"]["count"] == len(split) and chunk_step["data"]["split_to_fit"] == 1


def test_the_session_counts_a_reuploaded_file_once_and_the_list_shows_its_version(rt, run_jobs):
    """Upload tab: the bars show each file's newest upload; the Indexed Documents list names the searchable
    version (short SHA-256), the one being indexed while it is, and when the row last changed."""
    import hashlib
    from datetime import datetime

    from ragtopics.ui.upload_tab import DOC_HEADERS, documents_table

    topic = create_topic(rt, "Plant", settings=SMALL)
    first = upload_all(rt, topic, FACTS)
    run_jobs()
    new_text = FACTS["pumps.txt"] + " Since May it is inspected every 60 days."
    again = upload_all(rt, topic, {"pumps.txt": new_text})["pumps.txt"]
    assert again.id == first["pumps.txt"].id and again.job_id != first["pumps.txt"].job_id
    session = [(row.job_id, name, row.id) for name, row in first.items()] + [(again.job_id, "pumps.txt", again.id)]
    old_sha = hashlib.sha256(FACTS["pumps.txt"].encode()).hexdigest()
    new_sha = hashlib.sha256(new_text.encode()).hexdigest()

    rows = {row[0]: dict(zip(DOC_HEADERS, row, strict=True)) for row in documents_table(rt, topic.name)}
    assert rows["pumps.txt"]["Status"] == "queued" and rows["pumps.txt"]["Version"] == f"{old_sha[:8]} → {new_sha[:8]}"
    bars = jobs_html(rt, session)
    assert "4 file(s) uploaded in this session, 1 re-upload" in bars and "3 indexed" in bars and "1 waiting or running" in bars
    assert bars.count(">pumps.txt<") == 1

    run_jobs()
    bars = jobs_html(rt, session)
    assert "4 file(s) uploaded in this session, 1 re-upload" in bars and "4 indexed" in bars and "replaced" not in bars
    rows = {row[0]: dict(zip(DOC_HEADERS, row, strict=True)) for row in documents_table(rt, topic.name)}
    assert (
        rows["pumps.txt"]["Version"] == new_sha[:8]
        and rows["valves.md"]["Version"] == hashlib.sha256(FACTS["valves.md"].encode()).hexdigest()[:8]
    )
    updated = {name: datetime.strptime(row["Updated (UTC)"], "%Y-%m-%d %H:%M:%S") for name, row in rows.items()}
    assert updated["pumps.txt"] >= updated["valves.md"]
    # without document ids (older sessions) the file name groups the uploads
    assert "4 file(s) uploaded in this session, 1 re-upload" in jobs_html(rt, [job[:2] for job in session])


def test_a_file_whose_split_chunks_exceed_the_limit_fails_alone_and_its_trace_says_why(rt, reconfigure, run_jobs):
    """The window cap runs after the batch's one token count; its refusal is the chunk step's error."""
    reconfigure(MAX_CHUNKS_PER_DOCUMENT=2)
    long = "".join(f"Compressor C-{n} was serviced after the pressure alarm tripped twice. " for n in range(40))
    rows = upload_all(
        rt,
        create_topic(rt, "Limits", settings={"chunk_size": 4000, "chunk_overlap": 0}),
        {"long.txt": long, "pumps.txt": FACTS["pumps.txt"]},
    )
    run_jobs()
    failed, fine = get_document(rt, rows["long.txt"].id), get_document(rt, rows["pumps.txt"].id)
    assert (failed.status, fine.status, fine.chunk_count) == ("failed", "indexed", 1)
    assert "MAX_CHUNKS_PER_DOCUMENT" in failed.error
    [chunk_step] = [e for e in load_trace(rt.metadata, f"document:{rows['long.txt'].id}") if e["step"] == "chunk"]
    assert chunk_step["error"].startswith("RefusedFileError: ") and "MAX_CHUNKS_PER_DOCUMENT" in chunk_step["error"]


def _refuse_to_finish(rt, file_name: str, message: str) -> None:
    """A real SQL failure when a version of ``file_name`` is made searchable (a trigger that aborts the update)."""
    with rt.metadata.engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TRIGGER refuse_finish BEFORE UPDATE OF content_sha256 ON document "
            f"WHEN NEW.file_name = '{file_name}' AND NEW.content_sha256 != OLD.content_sha256 "
            f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
        )


@pytest.mark.parametrize("batched", [True, False], ids=["batch", "alone"])
def test_when_the_rows_cannot_be_written_no_chunk_is_swapped_and_the_previous_versions_stay_whole(rt, run_jobs, batched):
    """The chunk swap runs inside the rows' transaction: a failing SQL write leaves the old chunks, rows and files."""
    topic = create_topic(rt, "Plant", settings=SMALL)
    first = upload_all(rt, topic, FACTS)
    run_jobs()
    before = {name: (get_document(rt, row.id), stored(rt, topic.id, row.id)) for name, row in first.items()}
    _refuse_to_finish(rt, "valves.md", "disk quota exceeded")
    edited = {name: text.replace("every", "each") + " Revised." for name, text in FACTS.items()}
    if batched:
        second = upload_all(rt, topic, edited)
    else:
        second = {name: upload_file(rt, topic, name, text.encode()) for name, text in edited.items()}
    run_jobs()
    failed = {name for name, row in second.items() if get_document(rt, row.id).status == "failed"}
    assert failed == (set(FACTS) if batched else {"valves.md"})  # a batch's rows are written in one transaction
    for name in failed:
        doc, chunks = get_document(rt, second[name].id), stored(rt, topic.id, second[name].id)
        old_doc, old_chunks = before[name]
        assert "disk quota exceeded" in doc.error and "previous version is still searchable" in doc.error
        assert chunks == old_chunks and "Revised" not in "".join(c["text"].decode() for c in chunks)
        assert (doc.content_sha256, doc.blob_path, doc.chunk_count) == (
            old_doc.content_sha256,
            old_doc.blob_path,
            old_doc.chunk_count,
        )
        assert rt.blobs.path(doc.blob_path).read_bytes() == FACTS[name].encode() and not doc.pending_blob_path
    for name in set(FACTS) - failed:
        doc = get_document(rt, second[name].id)
        assert doc.status == "indexed" and "Revised" in "".join(c["text"].decode() for c in stored(rt, topic.id, doc.id))
        assert rt.blobs.path(doc.blob_path).read_bytes() == edited[name].encode()


def test_an_upload_whose_trace_cannot_be_stored_is_still_indexed(rt, run_jobs, caplog):
    """The trace is written after the version is searchable; losing it must not fail the upload or keep old files."""
    topic = create_topic(rt, "Plant", settings=SMALL)
    first = upload_all(rt, topic, FACTS)
    run_jobs()
    old_blobs = {name: get_document(rt, row.id).blob_path for name, row in first.items()}
    with rt.metadata.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse_traces BEFORE INSERT ON trace BEGIN SELECT RAISE(ABORT, 'trace table full'); END"
        )
    second = upload_all(rt, topic, {name: text + " Revised." for name, text in FACTS.items()})
    run_jobs()
    for name, row in second.items():
        doc = get_document(rt, row.id)
        assert doc.status == "indexed" and not doc.error
        assert "Revised" in "".join(c["text"].decode() for c in stored(rt, topic.id, row.id))
        assert not rt.blobs.path(old_blobs[name]).exists()  # the previous file is still cleaned up
        assert job_progress(rt, row.job_id).result["status"] == "indexed"
    assert "upload traces of 4 file(s) not stored: " in caplog.text and "trace table full" in caplog.text


def test_a_commit_that_fails_after_the_swap_puts_the_previous_files_back_and_fails_each_file(rt, run_jobs, monkeypatch):
    """The batch's chunk swap is undone: every file's previous chunks are searchable again, and its row names them."""
    import sqlalchemy.exc

    from ragtopics.ingest import pipeline

    topic = create_topic(rt, "Plant", settings=SMALL)
    first = upload_all(rt, topic, FACTS)
    run_jobs()
    before = {name: (stored(rt, topic.id, row.id), get_document(rt, row.id).blob_path) for name, row in first.items()}
    edited = {name: text + " Revised." for name, text in FACTS.items()}
    rows = upload_all(rt, topic, edited)
    [batch] = queue_for(rt).get_job_ids()
    queue_for(rt).remove(batch)
    finish_many = document_store.finish_many

    def swap_then_fail(store, outcomes, before_commit=None):
        def swap():
            before_commit()
            raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))  # as a failing commit

        return finish_many(store, outcomes, swap)

    monkeypatch.setattr(pipeline.documents, "finish_many", swap_then_fail)
    items = [(row.id, row.job_id, get_document(rt, row.id).pending_blob_path) for row in rows.values()]
    results = ingest_documents(rt, topic.id, items)
    for name, row in rows.items():
        doc = get_document(rt, row.id)
        assert (
            results[row.job_id].status == "failed" and "row of the new version could not be written" in results[row.job_id].reason
        )
        assert doc.status == "failed" and "disk I/O error" in doc.error
        assert doc.error.endswith("(the previous version is still searchable)")
        assert (stored(rt, topic.id, row.id), doc.blob_path) == before[name]  # every field, embedding included
        assert rt.blobs.path(doc.blob_path).read_bytes() == FACTS[name].encode() and not doc.pending_blob_path
    hits = rt.chunk_index(topic.id).search_vector(rt.gateway.embed(["Valve V-12 was replaced in March"])[0], 1)
    assert hits[0].document_id == rows["valves.md"].id and "Revised" not in hits[0].text
    assert not list(rt.redis.scan_iter(f"rt:{topic.id}:parked:*"))
    monkeypatch.undo()
    assert not recover_stranded(rt)  # nothing is left half-stored for the next worker start
    upload_all(rt, topic, edited)
    run_jobs()
    for name, row in rows.items():
        doc = get_document(rt, row.id)
        assert doc.status == "indexed" and rt.blobs.path(doc.blob_path).read_bytes() == edited[name].encode()
