"""The DEV Reports tab: the three report switches, the reports filtered by Topic, kind and time, one report's steps.

Only users with DEV_REPORTING reach the tab's events (:data:`ragtopics.ui.web.ROLE_OF_PAGE`)
and the report files (``GET /dev-reports/<id>.json``, :func:`add_report_route`).
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import gradio as gr
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ragtopics.access.context import caller_of
from ragtopics.access.users import DEV_REPORTING
from ragtopics.errors import NotFoundError, RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.tracing import reports
from ragtopics.ui.common import find_topic, topic_choices

ALL = "All"
#: Time filter → how far back it reaches (None: no limit).
PERIODS = {"Last hour": timedelta(hours=1), "Last day": timedelta(days=1), "Last week": timedelta(days=7), ALL: None}
HEADERS = ["Id", "Time (UTC)", "Kind", "Topic", "Subject", "Steps", "Model calls", "Tokens", "ms"]
#: Most characters of one step's data shown in the page (the JSON download has all of it).
VIEW_CHARS = 20_000


def reports_table(rt: Runtime, topic_name: str | None, kind: str | None, period: str | None) -> list[list]:
    """Rows of the reports list, newest first, filtered (``All`` or None: no filter)."""
    topic = find_topic(rt, topic_name) if topic_name and topic_name != ALL else None
    if topic_name and topic_name != ALL and topic is None:
        return []
    span = PERIODS.get(period or ALL)
    since = datetime.now(UTC) - span if span else None
    rows = reports.list_reports(rt, topic_id=topic.id if topic else None, kind=None if kind in (None, ALL) else kind, since=since)
    return [
        [
            r.id,
            f"{r.created_at:%Y-%m-%d %H:%M:%S}",
            r.kind,
            r.topic_name,
            r.subject[:80],
            r.steps,
            r.model_calls,
            r.tokens,
            round(r.duration_ms),
        ]
        for r in rows
    ]


def _data_text(data: dict) -> str:
    text = json.dumps(data, ensure_ascii=False, indent=1, default=str)
    return (
        text
        if len(text) <= VIEW_CHARS
        else text[:VIEW_CHARS] + f"\n… [{len(text) - VIEW_CHARS} more characters in the JSON download]"
    )


def render_report(report: dict) -> str:
    """HTML of one report: its summary, a download link, and the step tree (each step opens to its data)."""
    events = report.get("events", [])
    children: dict[int | None, list[dict]] = {}
    for event in events:
        children.setdefault(event.get("parent"), []).append(event)

    def render(parent: int | None, depth: int) -> str:
        out = []
        for e in children.get(parent, []):
            error = f" <b style='color:#b91c1c'>error: {html.escape(e['error'])}</b>" if e.get("error") else ""
            data = e.get("data") or {}  # a model call is recorded when it ends; its own time is in its data
            brief = ""
            if e["step"] == "model_call":
                brief = (
                    f" · {html.escape(str(data.get('role')))} / {html.escape(str(data.get('prompt_name')))} · "
                    f"{data.get('prompt_tokens', 0)} + {data.get('completion_tokens', 0)} tokens"
                )
            took = float((data.get("duration_ms") if e["step"] == "model_call" else None) or e.get("duration_ms") or 0)
            out.append(
                f"<details class='rt-step' data-step='{html.escape(e['step'])}' style='margin-left:{depth * 16}px'>"
                f"<summary><code>{html.escape(e['step'])}</code> · {took:.1f} ms{brief}{error}"
                f"</summary><pre style='white-space:pre-wrap;max-height:30em;overflow:auto'>{html.escape(_data_text(data))}"
                f"</pre></details>{render(e.get('id'), depth + 1)}"
            )
        return "".join(out)

    summary = report.get("summary", {})
    return (
        f"<div id='dev-report' data-report='{report.get('id')}'><h4>Report {report.get('id')} · {html.escape(report.get('kind', ''))}"
        f" · {html.escape(report.get('topic') or '')}</h4><p>{html.escape(report.get('subject', ''))}<br>"
        f"{summary.get('steps', 0)} steps · {summary.get('model_calls', 0)} model calls · {summary.get('tokens', 0)} tokens · "
        f"{summary.get('duration_ms', 0):.0f} ms · <a href='/dev-reports/{report.get('id')}.json' download>Download JSON</a></p>"
        f"{render(None, 0)}</div>"
    )


def open_report(rt: Runtime, report_id) -> str:
    """The HTML of a report by id, or a line saying why there is none."""
    try:
        return render_report(reports.load_report(rt, int(report_id)))
    except (TypeError, ValueError):
        return "Choose a report from the list (its Id)."
    except RagTopicsError as exc:
        return html.escape(str(exc))


def switch_text(rt: Runtime) -> str:
    """A line saying which switches are on."""
    on = [reports.KINDS[k] for k, v in reports.switches(rt).items() if v]
    return (
        ("Reporting: " + ", ".join(on) + ". Each such run now writes a full report.")
        if on
        else "Every switch is off (they are all off after every start)."
    )


def build(rt: Runtime) -> dict:
    """Lay out the DEV Reports tab; returns ``{"tab"}``."""
    private: dict[str, Any] = {"api_visibility": "private"}
    with gr.Tab("DEV Reports", id="dev-reports") as tab:
        gr.Markdown(
            "While a switch is on, each upload, chat answer or community rebuild writes a full report of every "
            f"step (kept {rt.settings.dev_report_retention_days} days, `DEV_REPORT_RETENTION_DAYS`)."
        )
        with gr.Row():
            boxes = {
                kind: gr.Checkbox(label=label, value=False, elem_id=f"dev-switch-{kind}") for kind, label in reports.KINDS.items()
            }
        state = gr.Markdown(elem_id="dev-switch-state")
        with gr.Row():
            topic = gr.Dropdown([ALL], value=ALL, label="Topic", allow_custom_value=True, elem_id="dev-topic")
            kind = gr.Dropdown([ALL, *reports.KINDS], value=ALL, label="Kind", elem_id="dev-kind")
            period = gr.Dropdown(list(PERIODS), value="Last day", label="Time", elem_id="dev-period")
            refresh = gr.Button("Refresh", elem_id="dev-refresh")
        table = gr.Dataframe(headers=HEADERS, interactive=False, label="Reports", elem_id="dev-reports")
        with gr.Row():
            report_id = gr.Number(label="Report Id", precision=0, elem_id="dev-report-id")
            show = gr.Button("Open report", variant="primary", elem_id="dev-open")
        view = gr.HTML(elem_id="dev-report-view")

    def load():
        values = reports.switches(rt)
        return [gr.Dropdown(choices=[ALL, *topic_choices(rt)]), *(values[k] for k in reports.KINDS), switch_text(rt)]

    def toggle(kind_name):
        def change(on):
            reports.set_switch(rt, kind_name, bool(on))
            return switch_text(rt)

        return change

    filters = [topic, kind, period]
    tab.select(load, None, [topic, *boxes.values(), state], **private).then(
        lambda *f: reports_table(rt, *f), filters, table, **private
    )
    for kind_name, box in boxes.items():
        box.input(toggle(kind_name), box, state, **private)
    for trigger in (refresh.click, topic.change, kind.change, period.change):
        trigger(lambda *f: reports_table(rt, *f), filters, table, **private)
    show.click(lambda i: open_report(rt, i), report_id, view, **private)

    def on_pick(rows, evt: gr.SelectData):  # gradio passes the click's data by this annotation
        return picked_report(rt, rows, evt)

    table.select(on_pick, table, [report_id, view], **private)
    return {"tab": tab}


def picked_report(rt: Runtime, rows, evt: gr.SelectData) -> tuple:
    """A click on a row of the reports table (``rows``: the table as shown): its id into Report Id, and the report opened."""
    try:
        row = evt.row_value or list(rows.iloc[evt.index[0]])
        report_id = int(row[0])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return gr.skip(), gr.skip()
    return report_id, open_report(rt, report_id)


def add_report_route(api: FastAPI, rt: Runtime) -> None:
    """Add ``GET /dev-reports/{id}.json``: the report file, for DEV_REPORTING users only (403 otherwise)."""

    @api.get("/dev-reports/{report_id}.json", include_in_schema=False)
    def download(report_id: int, request: Request):
        user = caller_of(request)
        if user is None or not user.may(DEV_REPORTING):
            return JSONResponse({"error": "DEV reports need the DEV_REPORTING permission"}, status_code=403)
        try:
            data = reports.report_bytes(rt, report_id)
        except NotFoundError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return Response(
            data,
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="dev-report-{report_id}.json"'},
        )
