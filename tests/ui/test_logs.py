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
    *_, final = ask(rt, topic, "When does K-2 switch off?")

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
