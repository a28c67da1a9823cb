"""The Logs tab: a Topic's recent runs, one line per step, newest first, filterable by kind."""

from __future__ import annotations

from ragtopics.answer.turn import ask
from ragtopics.topics.topics import create_topic
from ragtopics.ui.logs_tab import log_text
from tests.ingest.test_ingest import upload


def test_recent_uploads_and_answers_one_line_per_step(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "<kettles>.txt", b"Kettle K-2 switches itself off at 100 degrees.")
    run_jobs()
    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    *_, _final = ask(rt, topic, "When does K-2 switch off?")

    text = log_text(rt, "Kettles")
    chat_at, upload_at = text.index("· chat · When does K-2 switch off?"), text.index("· upload · &lt;kettles&gt;.txt")
    assert chat_at < upload_at  # newest first; the file name is escaped
    steps = [line.split()[0] for line in text[upload_at:].splitlines()[1:] if line.startswith("  ")]
    assert steps[:3] == ["read", "chunk", "embed"]
    assert "  retrieve" in text[chat_at:upload_at] and "strategy=HYBRID" in text[chat_at:upload_at]
    answers_only = log_text(rt, "Kettles", "Answers")
    assert "· chat ·" in answers_only and "· upload ·" not in answers_only
    assert log_text(rt, "Nope") == "<p>Choose a Topic.</p>"
    create_topic(rt, "Empty")
    assert log_text(rt, "Empty") == "<p>Nothing logged for this Topic yet.</p>"


def test_a_job_that_failed_for_good_is_listed_and_retried(rt, run_jobs):
    from ragtopics.quality.runs import load_run, start_run
    from ragtopics.topics.delete import delete_topic
    from ragtopics.ui.logs_tab import dead_table, retry_job

    create_topic(rt, "Fleet")
    run_id = start_run(rt, "Fleet", '[{"question": "When is pump P-1 serviced?", "gold_sources": ["pumps.txt"]}]')
    delete_topic(rt, "Fleet")  # the Topic goes while its evaluation waits in the queue
    run_jobs()
    (row,) = dead_table(rt)
    job_id = row[0]
    assert "Fleet" in row[1] and row[2].endswith("UTC") and "Topic" in row[3]
    assert retry_job(rt, "no-such-job").replace("\\", "").startswith("**Not retried:** no failed job 'no-such-job'")
    create_topic(rt, "Fleet")  # the cause fixed: the Topic is back
    assert retry_job(rt, job_id) == f"Queued `{job_id}` again."
    run_jobs()
    assert dead_table(rt) == [] and load_run(rt, run_id)[0].summary["n"] == 1  # the run finished


def test_a_failed_upload_is_not_queued_again_but_says_to_upload_the_file_again(rt, reconfigure, run_jobs):
    """Its file was dropped when it failed: a Retry would fail at once, so it is refused with what to do."""
    from ragtopics.documents.uploads import get_document, upload_file
    from ragtopics.ui.logs_tab import dead_table, retry_job

    rt = reconfigure(MAX_CHUNKS_PER_DOCUMENT=1)
    topic = create_topic(rt, "Plant", settings={"chunk_size": 100, "chunk_overlap": 0})
    row = upload_file(rt, topic, "pumps.txt", ("Pump P-7 is inspected every 90 days by the night shift. " * 20).encode())
    run_jobs()
    assert get_document(rt, row.id).status == "failed"
    [dead] = dead_table(rt)
    status = retry_job(rt, dead[0]).replace("\\", "")
    assert status.startswith("**Not retried:** this upload cannot be retried: pumps.txt no longer waits for it (pumps.txt: ")
    assert "MAX_CHUNKS_PER_DOCUMENT" in status and "upload the file again" in status
    assert dead_table(rt) == [dead]  # still listed, nothing queued
