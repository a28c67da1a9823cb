"""The Logs tab: a Topic's recent uploads, answers and community rebuilds, one line per step; failed jobs to retry.

Read from the bounded traces every run keeps (:mod:`ragtopics.storage.traces`); the full
detail of a run is what DEV Reports are for.
"""

from __future__ import annotations

import html
from typing import Any

import gradio as gr

from ragtopics.errors import RagTopicsError
from ragtopics.jobs.queue import dead_letters, retry_dead_letter
from ragtopics.runtime import Runtime
from ragtopics.storage.traces import recent_traces
from ragtopics.tracing.trace import summary_line
from ragtopics.ui.common import find_topic, md_text

DEAD_HEADERS = ["Job id", "What", "Failed (UTC)", "Error"]
KINDS = {"All": None, "Uploads": "upload", "Answers": "chat", "Community rebuilds": "communities"}
#: Longest step line shown.
LINE_CHARS = 160


def log_text(rt: Runtime, topic_name: str | None, kind_label: str = "All", limit: int = 20) -> str:
    """The log as preformatted HTML: a header line per run (time, kind, subject, errors), then one line per step."""
    topic = find_topic(rt, topic_name)
    if topic is None:
        return "<p>Choose a Topic.</p>"
    rows = recent_traces(rt.metadata, topic_id=topic.id, limit=limit, kind=KINDS.get(kind_label))
    if not rows:
        return "<p>Nothing logged for this Topic yet.</p>"
    out = []
    for row in rows:
        failed = [e for e in row.events if e.get("error")]
        total = sum(float(e.get("duration_ms") or 0) for e in row.events if e.get("parent") is None)
        out.append(
            f"<b>{row.created_at:%Y-%m-%d %H:%M:%S} UTC · {html.escape(row.kind)} · {html.escape(row.subject[:120])}"
            f" · {total:.0f} ms{' · FAILED' if failed else ''}</b>"
        )
        depth: dict[int, int] = {}
        for e in row.events:
            level = depth[e["id"]] = depth.get(e.get("parent"), -1) + 1 if e.get("parent") is not None else 0
            line = f"{'  ' * (level + 1)}{e['step']:<14} {float(e.get('duration_ms') or 0):>9.1f} ms  {summary_line(e.get('data') or {})}"
            if e.get("error"):
                line += f"  ERROR {e['error']}"
            out.append(html.escape(line[:LINE_CHARS] + ("…" if len(line) > LINE_CHARS else "")))
        out.append("")
    return "<pre id='rt-log' style='font-size:0.85em;white-space:pre;overflow-x:auto'>" + "\n".join(out) + "</pre>"


def build(rt: Runtime) -> dict:
    """Lay out the Logs tab; returns ``{"tab", "topic"}``."""
    private: dict[str, Any] = {"api_visibility": "private"}
    with gr.Tab("Logs", id="logs") as tab:
        with gr.Row():
            topic = gr.Dropdown(choices=[], label="Topic", allow_custom_value=True, elem_id="logs-topic")
            kind = gr.Dropdown(list(KINDS), value="All", label="Show", elem_id="logs-kind")
            refresh = gr.Button("Refresh", elem_id="logs-refresh")
        log = gr.HTML(elem_id="logs")
        gr.Markdown(
            "#### Failed jobs (all Topics)\nJobs that failed for good (after the automatic recovery from crashed workers): "
            "fix the cause (an endpoint, a setting), then *Retry*. A failed upload's file is not kept: "
            "upload it again instead."
        )
        dead = gr.Dataframe(headers=DEAD_HEADERS, interactive=False, wrap=True, elem_id="dead-letters")
        with gr.Row():
            job_id = gr.Textbox(label="Job id", elem_id="dead-letter-id")
            retry = gr.Button("Retry", elem_id="dead-letter-retry")
        retried = gr.Markdown(elem_id="dead-letter-status")
    for trigger in (topic.change, kind.change, refresh.click, tab.select):
        trigger(lambda t, k: log_text(rt, t, k), [topic, kind], log, **private)
    for trigger in (refresh.click, tab.select):
        trigger(lambda: dead_table(rt), None, dead, **private)
    retry.click(lambda j: retry_job(rt, j), job_id, retried, **private).then(lambda: dead_table(rt), None, dead, **private)
    return {"tab": tab, "topic": topic}


def dead_table(rt: Runtime) -> list[list[str]]:
    """Rows of the failed-jobs list: job id, what it did, when it failed, why."""
    return [[d.job_id, d.description, d.failed_at, d.error] for d in dead_letters(rt)]


def retry_job(rt: Runtime, job_id: str) -> str:
    """Queue a failed job again; returns the status line."""
    try:
        retry_dead_letter(rt, (job_id or "").strip())
    except RagTopicsError as exc:
        return f"**Not retried:** {md_text(str(exc))}"
    return f"Queued `{job_id.strip()}` again."
