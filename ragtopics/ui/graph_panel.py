"""The Knowledge graph panel of a GraphRAG Topic: counts, the last community run, Recompute Communities Now.

The panel sits under the Upload tab's Indexed Documents list and follows that tab's
Topic. It is hidden for a RAG Topic. The button only enqueues the rebuild job
(:func:`ragtopics.graph.refresh.enqueue_rebuild`); a timer then shows the job's phase and
re-reads the counts, so the panel is up to date when the run finishes.
"""

from __future__ import annotations

import html
import logging
import time

import gradio as gr
import redis

from ragtopics.errors import RagTopicsError
from ragtopics.graph.refresh import enqueue_rebuild, next_refresh
from ragtopics.graph.report import graph_stats
from ragtopics.jobs.queue import JobProgress, job_progress
from ragtopics.kinds import kind_of
from ragtopics.runtime import Runtime
from ragtopics.ui.common import find_topic, progress_bar
from ragtopics.ui.words import plural

log = logging.getLogger(__name__)

#: How each phase of the rebuild job reads in the progress bar.
REBUILD_PHASES = {
    "queued": "queued · waiting for the worker",
    "scheduled": "scheduled",
    "detect": "detecting communities",
    "reports": "writing community reports",
    "write": "embedding and storing the summaries",
}
POLL_S = 1.5
DUE_STYLE = "background:#fef3c7;border-left:4px solid #d97706;padding:6px 10px;border-radius:4px;color:#78350f"


def _escape(text: str) -> str:
    """Text safe inside Markdown: tags escaped, quotes left as they are (they read as typed)."""
    return html.escape(text, quote=False)


def count(n: int, one: str, many: str) -> str:
    """``1 entity``, ``2 entities``, ``0 entities``."""
    return f"{n:,} {one if n == 1 else many}"


def document_graph_text(graph: dict | None) -> str:
    """One short line for what a document added to the graph (``indexed_with["graph"]``); "" when it has none.

    Returns:
        e.g. ``graph: NLP, 12 entities, 20 relationships, 3 extracted / 1 cached``, then the
        skipped, failed and merged counts when there are any.
    """
    if not graph:
        return ""
    parts = [
        f"graph: {graph.get('method') or '?'}",
        count(graph.get("entities", 0), "entity", "entities"),
        plural(graph.get("relationships", 0), "relationship"),
        f"{graph.get('chunks_extracted', 0)} extracted / {graph.get('chunks_cached', 0)} cached",
    ]
    if graph.get("chunks_skipped"):
        parts.append(f"{graph['chunks_skipped']} skipped (contents or index)")
    if graph.get("chunks_failed"):
        parts.append(f"{graph['chunks_failed']} failed")
    if graph.get("merges"):
        parts.append(plural(graph["merges"], "merge"))
    return ", ".join(parts)


def when_text(epoch_s: float, now_s: float | None = None) -> str:
    """A local time with how long ago or ahead it is: ``2025-03-01 14:05, 3 min ago``, ``…, in 5 h 59 min``."""
    now_s = time.time() if now_s is None else now_s
    delta = int(epoch_s - now_s)  # whole seconds toward zero: a day ahead less a moment reads "23 h 59 min"
    size = abs(delta)
    if size < 3600:
        span = "under a minute" if size < 60 else f"{size // 60} min"  # no seconds: the text changes once a minute
    else:
        span = f"{size // 3600} h {size % 3600 // 60} min" if size < 86400 else f"{size // 86400} d {size % 86400 // 3600} h"
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(epoch_s))}, {f'in {span}' if delta > 0 else f'{span} ago'}"


def due_notice(reason: str) -> str:
    """The amber "Recompute due" box (HTML inside the panel's Markdown)."""
    return (
        f'<div id="graph-due" style="{DUE_STYLE}">⚠️ <b>Recompute due:</b> {_escape(reason)}: run Recompute Communities Now</div>'
    )


def last_run_text(run: dict | None) -> str:
    """The last community run in one line: when, written/kept/deleted, model calls, and which way reports were made."""
    if not run:
        return (
            "**Last community run:** none yet. GLOBAL questions find no summaries until Recompute Communities Now "
            "or the Refresh Cycle has run."
        )
    if run.get("method") == "model":
        how = "reports written by the Community Report model"
        if run.get("model_failures"):
            how += f" ({run['model_failures']} failed calls: those reports were built from the graph)"
    else:
        how = "reports built from the graph (the bundled model is too small to summarise)"
    when = when_text(run["finished_at"]) if run.get("finished_at") else "time unknown"
    return (
        f"**Last community run:** {when} · {run.get('written', 0)} written, {run.get('kept', 0)} kept, "
        f"{run.get('deleted', 0)} deleted · {plural(run.get('model_calls', 0), 'model call')} · "
        f"{run.get('seconds', 0):.1f} s · {how}"
    )


def refresh_text(rt: Runtime, topic) -> str:
    """When the Refresh Cycle rebuilds the communities next."""
    cycle = kind_of(topic).settings_of(topic).refresh_cycle
    if cycle == "off":
        return "**Refresh Cycle:** off (communities are rebuilt only by Recompute Communities Now)"
    due = next_refresh(rt, topic.id)
    if due is None:
        return f"**Refresh Cycle:** every {cycle}; no run scheduled yet (the worker schedules one when it starts)"
    return f"**Next Refresh Cycle run:** {when_text(due)} (Refresh Cycle every {cycle})"


def graph_panel_markdown(rt: Runtime, topic) -> str:
    """The panel's text for a GraphRAG Topic: counts, the recompute-due notice, the last run, the next cycle run.

    Raises:
        ConfigurationError: for a RAG Topic.
        redis.RedisError: when the stores cannot be reached.
    """
    stats = graph_stats(rt, topic)
    counts = " · ".join(
        count(stats[key], one, key)
        for key, one in (
            ("documents", "document"),
            ("chunks", "chunk"),
            ("entities", "entity"),
            ("relationships", "relationship"),
            ("communities", "community"),
            ("summaries", "summary"),
        )
    )
    lines = [f"**{counts}**"]
    if stats["recompute_due"]:
        lines.append(due_notice(stats["recompute_due"]))
    run = stats["last_run"]
    lines.append(last_run_text(run))
    if run and run.get("skipped_small"):
        lines.append(f"{count(run['skipped_small'], 'community', 'communities')} of a single entity: no summary (normal).")
    lines.append(refresh_text(rt, topic))
    return "\n\n".join(lines)


def render(rt: Runtime, topic_name: str | None) -> tuple[bool, str]:
    """Whether the panel shows for the Topic (GraphRAG only), and its text."""
    topic = find_topic(rt, topic_name)
    if topic is None or not kind_of(topic).has_graph:
        return False, ""
    try:
        return True, graph_panel_markdown(rt, topic)
    except (RagTopicsError, redis.RedisError) as exc:
        log.warning("graph panel of Topic %s: %s", topic.name, exc)
        return True, f"**Could not read the graph:** {_escape(str(exc))}"


def start_recompute(rt: Runtime, topic_name: str | None) -> tuple[str, str]:
    """Recompute Communities Now: enqueue the Topic's rebuild (or find the one already queued or running).

    Returns:
        ``(message, job_id)``; ``job_id`` is "" when nothing was enqueued.
    """
    topic = find_topic(rt, topic_name)
    if topic is None:
        return "Choose a GraphRAG Topic first.", ""
    try:
        job_id = enqueue_rebuild(rt, topic)
        status = job_progress(rt, job_id).status
    except RagTopicsError as exc:
        return f"**Not started:** {_escape(str(exc))}", ""
    except redis.RedisError as exc:
        return f"**Not started:** the job queue cannot be reached ({_escape(str(exc))})", ""
    if status == "started":  # enqueue_rebuild returned the Topic's rebuild that is already running
        return f"A rebuild of **{_escape(topic.name)}** is already running; its progress is shown below.", job_id
    return f"Recompute Communities Now: rebuild of **{_escape(topic.name)}** enqueued.", job_id


def rebuild_progress_html(rt: Runtime, job_id: str) -> str:
    """A progress bar for a rebuild job: its phase and done/total, then what it did or why it failed."""
    if not job_id:
        return ""
    return progress_html(job_progress(rt, job_id))


def progress_html(p: JobProgress) -> str:
    """The bar of a rebuild job's progress (see :func:`rebuild_progress_html`)."""
    label = "Recompute Communities"
    if p.status == "finished":
        result = p.result or {}
        if result.get("status") == "skipped":
            return progress_bar(label, 1.0, f"skipped: {result.get('reason', '')}", "stopped")
        detail = (
            f"finished · {result.get('written', 0)} written, {result.get('kept', 0)} kept, "
            f"{result.get('deleted', 0)} deleted · {plural(result.get('model_calls', 0), 'model call')}"
        )
        return progress_bar(label, 1.0, detail, "done")
    if p.is_final:
        return progress_bar(label, 1.0, f"failed: {p.error or p.status}", "failed")
    phase = REBUILD_PHASES.get(p.phase, p.phase or p.status)
    detail = f"{phase} {p.done}/{p.total}" if p.total > 1 else phase
    return progress_bar(label, p.fraction, detail)


def build(rt: Runtime, topic: gr.Dropdown) -> dict:
    """Lay out the panel (inside the Upload tab) and wire it to that tab's Topic dropdown.

    Returns:
        ``{"group": ..., "stats": ..., "button": ...}``.
    """
    with gr.Accordion("Knowledge graph", open=True, visible=False, elem_id="graph-panel") as group:
        stats = gr.Markdown(elem_id="graph-stats")
        button = gr.Button("Recompute Communities Now", variant="secondary", elem_id="graph-recompute")
        message = gr.Markdown(elem_id="graph-recompute-message")
        progress = gr.HTML(elem_id="graph-recompute-progress")
    job = gr.State(("", ""))  # (Topic name, rebuild job id) of the last click
    shown = gr.State(None)
    timer = gr.Timer(POLL_S)

    def show(topic_name, current_job, key):
        """Re-render only what changed, so an idle panel does not flicker."""
        visible, text = render(rt, topic_name)
        bar = rebuild_progress_html(rt, current_job[1]) if visible and current_job[0] == topic_name else ""
        new_key = hash((visible, text, bar))
        if new_key == key:
            return gr.skip(), gr.skip(), gr.skip(), key
        return gr.Accordion(visible=visible), text, bar, new_key

    def on_recompute(topic_name):
        text, job_id = start_recompute(rt, topic_name)
        return text, (topic_name, job_id) if job_id else ("", ""), rebuild_progress_html(rt, job_id)

    outputs = [group, stats, progress, shown]
    topic.change(show, [topic, job, shown], outputs, api_visibility="private")
    timer.tick(show, [topic, job, shown], outputs, show_progress="hidden", api_visibility="private")
    topic.change(lambda: "", None, message, api_visibility="private")
    button.click(on_recompute, topic, [message, job, progress], api_name="recompute_communities", api_visibility="undocumented")
    return {"group": group, "stats": stats, "button": button}
