"""DEV Reports: switches off after every start; while on, full reports of uploads, answers and rebuilds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx

from ragtopics.access import users
from ragtopics.answer.turn import ask
from ragtopics.storage.traces import load_trace
from ragtopics.topics.topics import create_topic
from ragtopics.tracing import reports
from ragtopics.ui.app import launch_console
from ragtopics.ui.dev_reports_tab import render_report, reports_table
from tests.conftest import free_port
from tests.ingest.test_ingest import upload
from tests.ui.test_access import PASSWORD, login

LONG = "Kettle K-2 switches itself off at 100 degrees. " * 700  # ~33,000 characters: over a trace's value limit


def test_nothing_is_reported_while_the_switches_are_off(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees.")
    run_jobs()
    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    *_, final = ask(rt, topic, "When does K-2 switch off?")
    assert reports.switches(rt) == {"upload": False, "chat": False, "communities": False}
    assert reports.list_reports(rt) == [] and load_trace(rt.metadata, f"turn:{final.turn_id}")  # the bounded trace is kept


def test_reports_hold_every_step_unclipped(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Kettles")
    reports.set_switch(rt, "upload", True)
    reports.set_switch(rt, "chat", True)
    doc, _ = upload(rt, topic, "kettles.txt", LONG.encode())
    run_jobs()
    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    *_, _final = ask(rt, topic, "When does K-2 switch off?")

    chat_row, upload_row = reports.list_reports(rt)
    assert (chat_row.kind, chat_row.topic_name, chat_row.subject) == ("chat", "Kettles", "When does K-2 switch off?")
    assert upload_row.kind == "upload" and upload_row.subject == "kettles.txt" and upload_row.steps >= 5
    uploaded = reports.load_report(rt, upload_row.id)
    read = next(e for e in uploaded["events"] if e["step"] == "read")
    assert read["data"]["text"] == LONG  # whole, where the trace cuts it
    traced = next(e for e in load_trace(rt.metadata, f"document:{doc.id}") if e["step"] == "read")
    assert len(traced["data"]["text"]) < len(LONG)
    chunks = next(e for e in uploaded["events"] if e["step"] == "chunk")["data"]["chunks"]
    assert len(chunks) == next(e for e in uploaded["events"] if e["step"] == "store")["data"]["chunks"] > 30

    answered = reports.load_report(rt, chat_row.id)
    steps = {e["step"]: e for e in answered["events"]}
    assert steps["retrieve"]["data"]["fused_ranks"] and steps["retrieve"]["data"]["kept"][0]["score"] > 0
    assert (
        steps["source_check"]["data"]["answer_before"] == "At 100 degrees [S1]."
        and steps["finish"]["data"]["answer"] == "At 100 degrees [kettles.txt]."
    )
    call = next(e for e in answered["events"] if e["step"] == "model_call" and e["data"]["role"] == "language_model")
    assert call["data"]["prompt_tokens"] > 0 and call["data"]["messages"][0]["role"] == "system"  # the exact prompt
    assert answered["summary"]["tokens"] == chat_row.tokens > 0 and chat_row.model_calls >= 2

    page = render_report(answered)
    assert "data-step='retrieve'" in page and "Download JSON" in page and "<script" not in page
    assert [r[0] for r in reports_table(rt, "Kettles", "chat", "Last hour")] == [chat_row.id]
    assert reports_table(rt, "All", "upload", "All")[0][0] == upload_row.id and reports_table(rt, "Nope", None, None) == []


def test_old_reports_are_deleted_after_the_retention_period(rt, run_jobs):
    reports.set_switch(rt, "upload", True)
    upload(rt, create_topic(rt, "Kettles"), "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees.")
    run_jobs()
    (row,) = reports.list_reports(rt)
    assert rt.blobs.exists(row.path) and row.path.startswith("dev-reports/")
    assert reports.purge_expired(rt, now=datetime.now(UTC) + timedelta(days=rt.settings.dev_report_retention_days - 1)) == 0
    assert reports.purge_expired(rt, now=datetime.now(UTC) + timedelta(days=rt.settings.dev_report_retention_days + 1)) == 1
    assert not rt.blobs.exists(row.path) and reports.list_reports(rt) == []


def test_switches_are_off_after_a_start_and_reports_reach_dev_reporting_users_only(rt, run_jobs, scripted_llm):
    reports.set_switch(rt, "chat", True)
    users.create_user(rt, "ada", PASSWORD, "admin")
    users.create_user(rt, "dora", PASSWORD, "operator", dev_reporting=True)
    users.create_user(rt, "otto", PASSWORD, "operator")
    server, url, _ = launch_console(rt, host="127.0.0.1", port=free_port())
    try:
        assert not any(reports.switches(rt).values())
        reports.set_switch(rt, "chat", True)
        topic = create_topic(rt, "Kettles")
        upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees.")
        run_jobs()
        scripted_llm.replies["answer"] = "At 100 degrees [S1]."
        *_, _final = ask(rt, topic, "When does K-2 switch off?")
        (row,) = reports.list_reports(rt)
        link = f"/dev-reports/{row.id}.json"
        downloaded = login(url, "dora").get(link)
        assert downloaded.status_code == 200 and json.loads(downloaded.content)["subject"] == "When does K-2 switch off?"
        assert login(url, "otto").get(link).status_code == 403
        assert httpx.get(url.rstrip("/") + link, timeout=30).status_code == 401
        assert login(url, "ada").get("/dev-reports/999.json").status_code == 404
    finally:
        server.close()
