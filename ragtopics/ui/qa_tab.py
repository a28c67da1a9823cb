"""The QA tab: evaluate a Topic on a question file, save the run, reopen it and compare two runs.

Runs are queued for the worker (:mod:`ragtopics.quality.runs`); the tab shows their progress,
the metrics (recall@k, any-gold@k, MRR, answer EM/F1, way accuracy), a row per question and the
files to download, and compares two runs metric by metric and question by question.
"""

from __future__ import annotations

import html
from dataclasses import replace
from typing import Any

import gradio as gr

from ragtopics.answer.routing import Route, routes_for
from ragtopics.errors import RagTopicsError
from ragtopics.jobs.queue import job_progress, phase_text
from ragtopics.quality.evaluate import changed_questions, compare, shared_questions, short_value
from ragtopics.quality.runs import list_runs, load_run, result_files, start_run
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import get_topic
from ragtopics.ui.common import progress_bar, topic_choices

QUESTION_HEADERS = ["Question", "Way", "Confidence", "recall@5", "MRR", "Files (best first)", "Gold", "Answer", "ms"]
#: Relative column widths: the numbers keep their headers on one line, the texts wrap.
QUESTION_COLUMN_WIDTHS: list[str | int] = ["20%", "7%", "9%", "8%", "6%", "17%", "12%", "15%", "6%"]
#: Metrics shown in the summary, in this order, when the run has them.
SUMMARY_METRICS = (
    "recall@1",
    "recall@5",
    "recall@10",
    "any_gold@5",
    "mrr",
    "exact_match",
    "f1",
    "judged_correct",
    "way_accuracy",
    "ms_per_question",
)
EXAMPLE = (
    '[{"question": "How often is pump P-7 inspected?", "answer": "every 90 days", '
    '"gold_sources": ["pumps.txt"], "expected_way": "SEARCH"}]'
)
ROUTED = "routed (as in a chat)"


def summary_html(info) -> str:
    """The run's description and its metrics as a small table (a note while it has not finished)."""
    changed = ", ".join(f"<code>{html.escape(k)}={html.escape(str(v))}</code>" for k, v in info.settings_changed.items())
    head = (
        f"<p><b>{html.escape(info.topic)}</b> · {info.questions} question(s) · way {html.escape(info.route)} · "
        f"{'retrieval only' if info.retrieval_only else 'with answers'}"
        f"{' · settings for this run: ' + changed if changed else ''} · <code>{html.escape(info.run_id)}</code></p>"
    )
    if info.summary is None:
        if info.error:
            return head + f"<p class='rt-eval-failed'><b>Failed:</b> {html.escape(info.error)}</p>"
        return head + "<p>Not finished yet.</p>"
    cells = [(m, info.summary[m]) for m in SUMMARY_METRICS if m in info.summary]
    ways = ", ".join(f"{html.escape(w)} {n}" for w, n in (info.summary.get("ways") or {}).items())
    rows = "".join(f"<tr><td>{html.escape(m)}</td><td style='text-align:right'>{_number(v)}</td></tr>" for m, v in cells)
    if info.summary.get("missing_gold_files"):
        names = info.summary["missing_gold_files"]
        rows += (
            f"<tr><td>gold sources not in the Topic</td><td class='rt-eval-errors'>{len(names)}: "
            f"{html.escape(', '.join(names[:10]))} (a typo scores as a retrieval failure)</td></tr>"
        )
    if info.summary.get("errors"):  # each failed question scored as finding nothing
        rows += (
            f"<tr><td>failed questions</td><td class='rt-eval-errors'>{info.summary['errors']} "
            f"(first: {html.escape(str(info.summary.get('first_error', '')))}); they count as finding nothing</td></tr>"
        )
    return f"{head}<table class='rt-eval-summary'>{rows}<tr><td>ways taken</td><td>{ways}</td></tr></table>"


def question_rows(questions: list[dict[str, Any]]) -> list[list]:
    """One row per question of a finished run (see :data:`QUESTION_HEADERS`)."""
    rows = []
    for q in questions:
        m = q.get("metrics") or {}
        answer = q.get("answer") or (f"failed: {q['error']}" if q.get("error") else "")
        rows.append(
            [
                q["question"],
                q.get("way", ""),
                "" if q.get("confidence") is None else round(q["confidence"], 3),
                m.get("recall@5", ""),
                "" if "mrr" not in m else round(m["mrr"], 3),
                " | ".join(q.get("files", [])[:5]),
                " | ".join(q.get("gold_sources", [])),
                answer if len(answer) <= 300 else answer[:297] + "...",
                (q.get("timings_ms") or {}).get("total", ""),
            ]
        )
    return rows


def compare_html(a, a_questions: list[dict], b, b_questions: list[dict]) -> str:
    """Two finished runs side by side: each metric with its change, then the questions that changed."""
    if a.summary is None or b.summary is None:
        return "<p>Both runs must have finished to be compared.</p>"

    def colour(metric: str, change: float | None) -> str:
        if change is None:
            return "inherit"
        better = -change if metric.startswith("ms") else change  # less time is better, more of the rest
        return "#2e8b57" if better > 0 else "#d9534f" if better < 0 else "inherit"

    metric_rows = "".join(
        f"<tr><td>{html.escape(m)}</td><td>{_number(x)}</td><td>{_number(y)}</td>"
        f"<td style='color:{colour(m, d)}'>{'—' if d is None else f'{d:+.3f}'}</td></tr>"
        for m, x, y, d in compare(a.summary, b.summary)
    )
    changes = changed_questions(a_questions, b_questions)
    items = []
    for c in changes[:100]:
        if "only_in" in c:
            detail = f"asked in run {c['only_in']} only"
        else:
            detail = "; ".join(
                f"{html.escape(k)}: {html.escape(short_value(x, 80))} → {html.escape(short_value(y, 80))}"
                for k, (x, y) in c["changes"].items()
            )
        items.append(f"<li class='rt-eval-changed'><b>{html.escape(short_value(c['question'], 120))}</b><br>{detail}</li>")
    more = f"<p>… and {len(changes) - 100} more.</p>" if len(changes) > 100 else ""
    apart = (
        "<p class='rt-eval-warning'><b>The two runs share no question:</b> their metrics are not comparable.</p>"
        if a_questions and b_questions and not shared_questions(a_questions, b_questions)
        else ""
    )
    return (
        f"<p>A: <code>{html.escape(a.run_id)}</code> · B: <code>{html.escape(b.run_id)}</code></p>{apart}"
        f"<table class='rt-eval-compare'><tr><th>metric</th><th>A</th><th>B</th><th>B − A</th></tr>{metric_rows}</table>"
        f"<p><b>{len(changes)} question(s) changed</b> (way, recall@5, MRR, judged correctness or answer)</p>"
        f"<ul>{''.join(items)}</ul>{more}"
    )


def _number(value: Any) -> str:
    if value is None:
        return "—"  # the run has no such metric
    return f"{value:.3f}" if isinstance(value, float) else html.escape(str(value))


def run_choices(rt: Runtime) -> list[tuple[str, str]]:
    """``(label, run id)`` of every saved run, newest first."""
    return [(r.label, r.run_id) for r in list_runs(rt)]


def build(rt: Runtime) -> dict:
    """Lay out the tab; returns its Topic dropdown for refreshing."""
    ways = [ROUTED, *(r.value for r in Route)]
    with gr.Tab("QA", id="qa") as tab:
        gr.Markdown(
            "Score a Topic on questions with known sources (and answers or ways, when you have them). "
            "Runs are queued for the worker and saved; reopen and compare them below."
        )
        with gr.Row():
            topic = gr.Dropdown(topic_choices(rt), label="Topic", allow_custom_value=True, elem_id="qa-topic")
            way = gr.Dropdown(ways, value=ROUTED, label="Way", elem_id="qa-way")
            retrieval_only = gr.Checkbox(
                True, label="Retrieval only (no answers: seconds, not minutes)", elem_id="qa-retrieval-only"
            )
        questions_file = gr.File(
            label="Question file (JSON: a list of {question, answer?, gold_sources?, expected_way?})",
            type="filepath",
            file_types=[".json"],
            elem_id="qa-file",
        )
        questions_text = gr.Textbox(label="…or paste the questions (JSON)", lines=4, placeholder=EXAMPLE, elem_id="qa-text")
        settings_text = gr.Textbox(
            label="Settings for this run only (key=value, one per line; nothing is stored)",
            lines=2,
            placeholder="retrieval_strategy=DENSE\ntop_k_results=5",
            elem_id="qa-settings",
        )
        start = gr.Button("Run evaluation", variant="primary", elem_id="qa-run")
        message = gr.Markdown(elem_id="qa-message")
        progress = gr.HTML(elem_id="qa-progress")
        gr.Markdown("#### Saved runs")
        run_choice = gr.Dropdown(run_choices(rt), label="Run", allow_custom_value=True, elem_id="qa-run-choice")
        summary = gr.HTML(elem_id="qa-summary")
        table = gr.Dataframe(
            headers=QUESTION_HEADERS, interactive=False, wrap=True, elem_id="qa-table", column_widths=QUESTION_COLUMN_WIDTHS
        )
        downloads = gr.File(
            label="Download (summary.json, questions.json, questions.csv)",
            file_count="multiple",
            interactive=False,
            elem_id="qa-downloads",
        )
        gr.Markdown("#### Compare two runs")
        with gr.Row():
            run_a = gr.Dropdown(run_choices(rt), label="Run A", allow_custom_value=True, elem_id="qa-compare-a")
            run_b = gr.Dropdown(run_choices(rt), label="Run B", allow_custom_value=True, elem_id="qa-compare-b")
        compare_button = gr.Button("Compare", elem_id="qa-compare")
        comparison = gr.HTML(elem_id="qa-comparison")
        current = gr.State(None)
        timer = gr.Timer(1.0)

    def on_start(topic_name, way_name, only, path, text, settings):
        if not topic_name:
            return "Choose a Topic first.", None
        ignored = ""
        try:
            if path:
                ignored = " (from the uploaded file; the pasted questions were not used)" if (text or "").strip() else ""
                with open(path, encoding="utf-8-sig") as handle:  # a byte-order mark, as Notepad writes, is fine
                    text = handle.read()
            if not (text or "").strip():
                return "Upload a question file or paste the questions first.", None
            lines = [ln.strip() for ln in (settings or "").splitlines() if ln.strip()]
            run_id = start_run(
                rt, topic_name, text, assignments=lines, route=None if way_name == ROUTED else way_name, retrieval_only=bool(only)
            )
        except (RagTopicsError, OSError, UnicodeDecodeError) as exc:
            return f"**Not started:** {html.escape(str(exc))}", None
        return f"Queued run `{run_id}`{ignored}.", run_id

    def tick(run_id):
        """The running run's bar; once it has finished, its results too (a run that finishes between two
        ticks still shows them: the results come with the tick that sees it finished)."""
        if not run_id:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        p = job_progress(rt, run_id)
        if p.status == "finished":
            return progress_bar("evaluation", 1.0, "finished", "done"), None, *show(run_id)
        if p.is_final:
            return progress_bar("evaluation", 1.0, f"failed: {p.error or p.status}", "failed"), None, *show(run_id)
        bar = progress_bar("evaluation", p.fraction, phase_text(p.phase or p.status, p.done, p.total))
        return bar, run_id, gr.skip(), gr.skip(), gr.skip()

    def show(run_id):
        if not run_id:
            return "", [], None
        try:
            info, questions = load_run(rt, run_id)
        except RagTopicsError as exc:
            return f"<p>{html.escape(str(exc))}</p>", [], None
        if info.summary is None and not info.error:  # a worker that died mid-run left no error file
            p = job_progress(rt, run_id)
            if p.status in ("failed", "stopped", "canceled"):  # not "missing": a run being queued has no job yet
                info = replace(info, error=p.error or p.status)
        files = [str(path) for path in result_files(rt, run_id)]
        return summary_html(info), question_rows(questions), files or None

    def refresh_runs(selected=None):
        choices = run_choices(rt)
        return gr.Dropdown(choices=choices, value=selected), gr.Dropdown(choices=choices), gr.Dropdown(choices=choices)

    def list_runs_again():  # the runs saved since the page was built, every list keeping its choice
        choices = run_choices(rt)
        return (gr.Dropdown(choices=choices),) * 3

    def ways_of(topic_name):
        """The ways the chosen Topic's kind has (a RAG Topic has no graph ways)."""
        try:
            kind = get_topic(rt, topic_name).kind if topic_name else None
        except RagTopicsError:
            kind = None
        return gr.Dropdown(choices=[ROUTED, *(r.value for r in (routes_for(kind) if kind else Route))], value=ROUTED)

    def on_compare(a_id, b_id):
        if not a_id or not b_id:
            return "<p>Choose two runs.</p>"
        try:
            (a, aq), (b, bq) = load_run(rt, a_id), load_run(rt, b_id)
        except RagTopicsError as exc:
            return f"<p>{html.escape(str(exc))}</p>"
        return compare_html(a, aq, b, bq)

    started = start.click(
        on_start,
        [topic, way, retrieval_only, questions_file, questions_text, settings_text],
        [message, current],
        api_name="start_evaluation",
        api_visibility="undocumented",
    )
    started.then(lambda run_id: refresh_runs(run_id), current, [run_choice, run_a, run_b], api_visibility="private")
    timer.tick(tick, current, [progress, current, summary, table, downloads], show_progress="hidden", api_visibility="private")
    run_choice.change(show, run_choice, [summary, table, downloads], api_name="evaluation_run", api_visibility="undocumented")
    for trigger in (tab.select, run_choice.focus, run_a.focus, run_b.focus):
        trigger(list_runs_again, None, [run_choice, run_a, run_b], api_visibility="private")
    topic.change(ways_of, topic, way, api_visibility="private")
    compare_button.click(on_compare, [run_a, run_b], comparison, api_name="compare_evaluations", api_visibility="undocumented")
    return {"topic": topic, "tab": tab}
