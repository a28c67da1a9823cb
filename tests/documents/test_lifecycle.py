"""A document's life through the real queue and worker: versions, superseded jobs, deletes, failed enqueues."""

from __future__ import annotations

import pytest
from rq.job import Job

from ragtopics.documents.delete import DOCUMENT_DELETE_STEPS, add_delete_step, delete_document
from ragtopics.documents.uploads import document_id_for, get_document, list_documents, receive_upload, upload_file
from ragtopics.errors import NotFoundError, StateTransitionError, StoreUnavailableError
from ragtopics.jobs.queue import job_progress
from ragtopics.runtime import Runtime
from ragtopics.storage import documents as document_store
from ragtopics.storage.traces import load_trace
from ragtopics.topics.topics import create_topic

HYBRID_LLM_KEYWORDS = {
    "chunk_size": 120,
    "chunk_overlap": 0,
    "retrieval_strategy": "HYBRID",
    "keyword_enrichment": "LLM",
    "min_similarity_score": 0,
}


def version_text(tag: str, n: int = 6) -> bytes:
    return "\n\n".join(f"Version {tag} paragraph {i}: pump {tag}{i} is serviced by team {tag}." for i in range(n)).encode()


def chunk_texts(rt, topic_id: str, document_id: str) -> list[str]:
    index = rt.chunk_index(topic_id)
    return [rt.redis.hget(index.key(cid), "text").decode() for cid in index.document_chunk_ids(document_id)]


def files_under(rt, *parts: str) -> list[str]:
    folder = rt.blobs.root.joinpath(*parts)
    return sorted(p.relative_to(rt.blobs.root).as_posix() for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_the_state_machine_refuses_changes_it_does_not_allow(rt):
    topic = create_topic(rt, "States")
    row = receive_upload(rt, topic, "a.txt", b"alpha")
    assert row.status == "queued" and len(row.job_id) == 32
    with pytest.raises(StateTransitionError, match="cannot go from queued to indexed"):
        document_store.finish(
            rt.metadata,
            row.id,
            row.job_id,
            status=document_store.DocumentStatus.INDEXED,
            chunk_count=0,
            warning="",
            indexed_with={},
            pictures=[],
        )
    with pytest.raises(StateTransitionError, match="only after it is marked deleting"):
        document_store.remove(rt.metadata, row.id)
    assert get_document(rt, row.id).status == "queued"


def test_delete_removes_chunks_keywords_pictures_files_traces_and_the_job(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Plant", settings={**HYBRID_LLM_KEYWORDS, "file_types": "md,png"})
    scripted_llm.replies["keywords"] = "e4711 boiler"
    import io

    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(png, format="PNG")
    kept = upload_file(rt, topic, "kept.md", version_text("K"))
    gone = upload_file(rt, topic, "gone.md", version_text("G"))
    picture = upload_file(rt, topic, "diagram.png", png.getvalue())
    run_jobs()
    assert get_document(rt, gone.id).status == "indexed" and chunk_texts(rt, topic.id, gone.id)
    assert files_under(rt, topic.id, picture.id) and load_trace(rt.metadata, f"document:{gone.id}")
    index = rt.chunk_index(topic.id)
    assert any(h.document_id == gone.id for h in index.search_keywords(["e4711"], 50))

    removed = delete_document(rt, topic, "gone.md")
    picture_removed = delete_document(rt, topic, "diagram.png")

    assert removed["chunks"] == 3 and removed["rows"] == 1 and removed["files"] == 1 and removed["jobs"] == 1
    assert picture_removed["files"] >= 1  # the image file, and its stored picture when kept
    assert chunk_texts(rt, topic.id, gone.id) == [] and files_under(rt, topic.id, gone.id) == []
    assert files_under(rt, topic.id, picture.id) == []
    assert all(h.document_id != gone.id for h in index.search_keywords(["e4711"], 50))
    assert load_trace(rt.metadata, f"document:{gone.id}") == []
    assert Job.exists(gone.job_id, connection=rt.redis) is False
    assert [d.file_name for d in list_documents(rt, topic)] == ["kept.md"]
    assert chunk_texts(rt, topic.id, kept.id)  # the other document is untouched
    vector = rt.gateway.embed(["Which team services pump G3?"])[0]
    assert {h.file_name for h in index.search_vector(vector, 20)} == {"kept.md"}
    with pytest.raises(NotFoundError, match="has no document 'gone.md'; its documents are: kept.md"):
        delete_document(rt, topic, "gone.md")


def test_delete_then_upload_again_is_like_a_first_upload(rt, run_jobs):
    topic = create_topic(rt, "Again", settings={"chunk_size": 120, "chunk_overlap": 0})
    first = upload_file(rt, topic, "a.md", version_text("A"))
    run_jobs()
    before = (chunk_texts(rt, topic.id, first.id), get_document(rt, first.id).chunk_count)
    delete_document(rt, topic, "a.md")
    again = upload_file(rt, topic, "a.md", version_text("A"))
    run_jobs()
    row = get_document(rt, again.id)
    assert again.id == first.id and row.status == "indexed"
    assert (chunk_texts(rt, topic.id, again.id), row.chunk_count) == before
    assert row.error == "" and row.warning == "" and files_under(rt, topic.id, first.id) == [row.blob_path]


def test_a_delete_while_indexing_cancels_the_job_and_leaves_nothing(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Busy", settings=HYBRID_LLM_KEYWORDS)
    calls = []

    def delete_during_keywords(body):
        calls.append(1)
        if len(calls) == 2:  # the job is half-way through its keyword calls
            delete_document(rt, topic, "busy.md")
        return "keywords"

    scripted_llm.replies["keywords"] = delete_during_keywords
    row = upload_file(rt, topic, "busy.md", version_text("B"))
    run_jobs()

    progress = job_progress(rt, row.job_id)
    assert progress.status == "finished"
    assert progress.result["status"] == "cancelled" and progress.result["reason"] == document_store.SUPERSEDED_BY_DELETE
    assert len(calls) == 2  # it stopped at the next step
    assert document_store.get_document(rt.metadata, row.id) is None
    assert chunk_texts(rt, topic.id, row.id) == [] and files_under(rt, topic.id) == []


def test_a_reupload_while_indexing_supersedes_the_older_job(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Race", settings=HYBRID_LLM_KEYWORDS)
    staged = {}

    def reupload_during_keywords(body):
        if "Version 1" in str(body) and "v2" not in staged:
            staged["v2"] = upload_file(rt, topic, "race.md", version_text("2"))
        return "keywords"

    scripted_llm.replies["keywords"] = reupload_during_keywords
    v1 = upload_file(rt, topic, "race.md", version_text("1"))
    run_jobs()

    assert job_progress(rt, v1.job_id).result["status"] == "superseded"
    assert job_progress(rt, v1.job_id).result["reason"] == "superseded by a newer upload"
    assert job_progress(rt, staged["v2"].job_id).result["status"] == "indexed"
    row = get_document(rt, v1.id)
    texts = chunk_texts(rt, topic.id, v1.id)
    assert texts and all("Version 2" in t for t in texts)
    assert rt.blobs.read(row.blob_path) == version_text("2")
    assert files_under(rt, topic.id, v1.id) == [row.blob_path]  # the first version's file is gone


def test_a_reupload_while_the_older_job_waits_in_the_queue(rt, run_jobs):
    topic = create_topic(rt, "Queue", settings={"chunk_size": 120, "chunk_overlap": 0})
    v1 = upload_file(rt, topic, "q.md", version_text("1"))
    v2 = upload_file(rt, topic, "q.md", version_text("2"))
    assert v1.job_id != v2.job_id and v1.id == v2.id
    run_jobs()
    assert job_progress(rt, v1.job_id).result["status"] == "superseded"
    assert job_progress(rt, v2.job_id).result["status"] == "indexed"
    assert all("Version 2" in t for t in chunk_texts(rt, topic.id, v1.id))


def test_an_upload_whose_enqueue_fails_does_not_stay_queued(rt, settings):
    topic = create_topic(rt, "Down")
    row = receive_upload(rt, topic, "late.md", b"Nothing will index this.")
    down = Runtime(settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"}))
    from ragtopics.documents.uploads import enqueue_document

    with pytest.raises(StoreUnavailableError, match="late.md was stored but could not be queued"):
        enqueue_document(down, row)
    stored = get_document(rt, row.id)
    assert stored.status == "failed" and "could not be queued for indexing" in stored.error
    assert stored.pending_blob_path == "" and files_under(rt, topic.id, row.id) == []


def test_the_delete_sequence_can_be_extended(rt, run_jobs):
    topic = create_topic(rt, "Extended")
    seen = []
    add_delete_step("record", lambda d: seen.append((d.document.file_name, d.document.status)), before="remove_files")
    try:
        upload_file(rt, topic, "x.md", b"Some text about x.")
        run_jobs()
        delete_document(rt, topic, "x.md")
        assert seen == [("x.md", "deleting")]
        names = [n for n, _ in DOCUMENT_DELETE_STEPS]
        assert names.index("record") == names.index("remove_files") - 1
    finally:
        DOCUMENT_DELETE_STEPS[:] = [s for s in DOCUMENT_DELETE_STEPS if s[0] != "record"]
    assert document_id_for(topic.id, "x.md") not in {d.id for d in list_documents(rt, topic)}


def test_twenty_reupload_races_never_mix_versions(rt):
    """Two versions indexed at once, a reader searching all the while: every hit's version is one stored file."""
    import random
    import threading

    from ragtopics.ingest.pipeline import ingest_document

    topic = create_topic(rt, "Races", settings={"chunk_size": 120, "chunk_overlap": 0})
    index = rt.chunk_index(topic.id)
    vector = rt.gateway.embed(["Which team services the pump?"])[0]
    rng = random.Random(7)
    mixed, checks, outcomes = [], [0], []
    stop = threading.Event()

    def reader() -> None:
        try:
            check_while_racing()
        except Exception as exc:  # a reader that dies would check nothing more: that fails the test
            mixed.append(("reader failed", repr(exc)))

    def check_while_racing() -> None:
        while not stop.is_set():
            hits = [h for h in index.search_vector(vector, 50) if h.file_name == "race.md"]
            tags = {h.text.split()[1] for h in hits}  # "Version <tag> paragraph ..."
            versions = {h.version for h in hits}
            if len(tags) > 1 or len(versions) > 1:
                mixed.append((tags, versions))
            for h in hits[:1]:  # the file this hit's link would serve holds the hit's text
                path = rt.blobs.relative_path(topic.id, h.document_id, h.version, "race.md")
                try:
                    stored = rt.blobs.read(path).decode()
                except FileNotFoundError:  # a newer version replaced this one since the search: nothing to serve
                    continue
                if h.text not in stored:
                    mixed.append(("link", h.text[:40], path))
            checks[0] += 1

    watcher = threading.Thread(target=reader, daemon=True)
    watcher.start()
    try:
        for n in range(20):
            older = upload_file_row = receive_upload(rt, topic, "race.md", version_text(f"{2 * n}"))
            results = {}
            first = threading.Thread(
                target=lambda: results.__setitem__(
                    "older", ingest_document(rt, older.id, job_id=older.job_id, blob_path=older.pending_blob_path)
                )
            )
            first.start()
            threading.Event().wait(rng.uniform(0, 0.25))
            newer = receive_upload(rt, topic, "race.md", version_text(f"{2 * n + 1}"))
            second = threading.Thread(
                target=lambda: results.__setitem__(
                    "newer", ingest_document(rt, newer.id, job_id=newer.job_id, blob_path=newer.pending_blob_path)
                )
            )
            second.start()
            first.join(60)
            second.join(60)
            outcomes.append(results["older"].status)
            assert results["newer"].status == "indexed", results["newer"]
            row = get_document(rt, newer.id)
            assert rt.blobs.read(row.blob_path) == version_text(f"{2 * n + 1}")
            assert all(t.startswith(f"Version {2 * n + 1} ") for t in chunk_texts(rt, topic.id, newer.id))
            assert files_under(rt, topic.id, newer.id) == [row.blob_path]
            del upload_file_row
    finally:
        stop.set()
        watcher.join(10)
    print(
        f"\n20 re-upload races: older job { {s: outcomes.count(s) for s in set(outcomes)} }, "
        f"{checks[0]} searches checked, {len(mixed)} mixed"
    )
    assert mixed == [] and checks[0] > 20
    assert set(outcomes) <= {"superseded", "indexed"}


def test_a_follow_up_in_a_chat_that_cited_a_deleted_file_shows_nothing_of_it(rt, run_jobs, scripted_llm):
    from ragtopics.answer.history import WITHHELD_ANSWER, history_messages, saved_turns
    from ragtopics.answer.turn import ask

    topic = create_topic(rt, "Chat", settings={"min_similarity_score": 0})
    upload_file(rt, topic, "secret.md", b"The vault code is 7291 and it opens the east door.")
    upload_file(rt, topic, "public.md", b"The cafeteria opens at eight in the morning.")
    run_jobs()
    scripted_llm.replies["answer"] = lambda body: (
        "The code is 7291 [S1]." if "7291" in str(body["messages"][-1]) else "I cannot tell from the documents."
    )
    first = list(ask(rt, topic, "What is the vault code?"))[-1]
    assert first.text == "The code is 7291 [secret.md]." and [s.file for s in first.sources] == ["secret.md"]
    delete_document(rt, topic, "secret.md")

    follow_up = list(ask(rt, topic, "Repeat the vault code please.", session_id=first.session_id))[-1]
    sent = scripted_llm.prompts("answer")[-1]["messages"]
    assert all("7291" not in str(m["content"]) for m in sent)
    assert {"role": "assistant", "content": WITHHELD_ANSWER} in history_messages(rt, first.session_id, 10)
    assert all(s.file != "secret.md" for s in follow_up.sources)
    earlier = saved_turns(rt, first.session_id)[0]
    assert [(s.file, s.status, s.link) for s in earlier.sources] == [("secret.md", "removed", "")]
