"""The Upload tab: multi-file upload with a cost preview, a progress bar per job, the Indexed Documents list."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import BatchedUploads, list_documents
from ragtopics.errors import STORE_DOWN_MESSAGE, RagTopicsError, is_store_outage
from ragtopics.ingest.cost import comparison, comparison_text, estimate_upload
from ragtopics.jobs.queue import job_progresses, job_statuses, phase_text
from ragtopics.quality.diagnosis import diagnose_document
from ragtopics.runtime import Runtime
from ragtopics.storage.documents import documents_stamp
from ragtopics.topics.topics import get_topic
from ragtopics.ui import graph_panel
from ragtopics.ui.common import find_topic, md_text, progress_bar, refresh_dropdown, short_name, topic_choices
from ragtopics.ui.words import plural, removed_text

MAX_TRACKED_JOBS = 2000
#: Finished versions whose progress the console keeps instead of reading again (every open tab together).
MAX_KEPT_FINISHED = 4 * MAX_TRACKED_JOBS
#: Job results of a version that a newer upload or a delete made obsolete.
STOPPED = ("superseded", "cancelled")
MAX_BARS = 20

DOC_HEADERS = ["File", "Status", "Chunks", "Message", "Indexed with", "Model calls", "Size (KB)", "Version", "Updated (UTC)"]
#: Relative column widths; the long cells (message, indexed with) wrap instead of widening the page.
DOC_COLUMN_WIDTHS: list[str | int] = ["12%", "9%", "7%", "15%", "22%", "8%", "6%", "10%", "11%"]
#: Hex digits of a version's SHA-256 shown in the list (as ``git`` shows short commit ids).
VERSION_DIGITS = 8


def version_text(content_sha256: str, pending_sha256: str, status: str) -> str:
    """The Version cell: the searchable version's short content hash, and ``→ <new>`` while a different one
    is queued or processing (``—`` when no version is searchable yet)."""
    current = content_sha256[:VERSION_DIGITS] or "—"
    if status in ("queued", "processing") and pending_sha256 and pending_sha256 != content_sha256:
        return f"{current} → {pending_sha256[:VERSION_DIGITS]}"
    return current


def indexed_with_text(w: dict) -> str:
    """One readable line for the settings a version was indexed with (empty when none is searchable)."""
    if not w:
        return ""
    if w.get("origin") == "graph ingestion":  # no file was read or chunked: say where the graph came from
        where = f" from {w['location']}" if w.get("location") else ""
        return f"graph ingestion ({w.get('format', '')}{where}) · {w.get('nodes', 0)} nodes, {w.get('edges', 0)} edges" + (
            f" · {graph_panel.document_graph_text(w['graph'])}" if w.get("graph") else ""
        )
    keywords = (
        f"keyword index ({w.get('keyword_enrichment', '').lower() or 'yes'})" if w.get("keyword_index") else "no keyword index"
    )
    records = w.get("records_per_chunk")
    per_chunk = ""
    if records:
        fewest, most = records
        per_chunk = f" · {fewest if fewest == most else f'{fewest}–{most}'} record{'s' if most > 1 else ''} per chunk"
    split = f" · {w['token_cap']}" if w.get("token_cap") else ""  # chunks split to fit the embedder's window
    graph = f" · {graph_panel.document_graph_text(w['graph'])}" if w.get("graph") else ""
    return (
        f"{w.get('chunking_strategy', '')} {w.get('chunk_size', '?')}/{w.get('chunk_overlap', '?')} · {keywords} · {w.get('reader', '')}"
        f"{per_chunk}{split}{graph}"
    )


def documents_table(rt: Runtime, topic_name: str | None) -> list[list]:
    """Rows of the Indexed Documents list, with the settings each file's searchable version was indexed with."""
    stamp = documents_stamp(rt.metadata, topic_name) if topic_name else None  # the Topic's id, without its settings
    if stamp is None:
        return []
    rows = []
    for d in list_documents(rt, stamp[0]):
        w = d.indexed_with
        status = d.status
        if d.status == "failed" and w:
            status = "failed · previous version searchable"
        rows.append(
            [
                short_name(d.file_name),
                status,
                d.chunk_count,
                d.error or d.warning,
                indexed_with_text(w),
                ", ".join(f"{k} {v}" for k, v in w.get("model_calls", {}).items()),
                round(d.size_bytes / 1024, 2),
                version_text(d.content_sha256, d.pending_sha256, d.status),
                d.updated_at.strftime("%Y-%m-%d %H:%M:%S") if d.updated_at else "",
            ]
        )
    return rows


def preview_cost(rt: Runtime, topic_name: str | None, paths: list[str] | None) -> str:
    """The Preview cost panel: the estimate (:func:`~ragtopics.ingest.cost.estimate_upload`) of the chosen files as
    Markdown; nothing is stored or queued."""
    if not topic_name:
        return "Choose a Topic first."
    if not paths:
        return "Choose one or more files first."
    try:
        topic = get_topic(rt, topic_name)
        files = [(Path(path).name, Path(path).read_bytes()) for path in paths]
        return estimate_upload(rt, topic, files).to_markdown()
    except (OSError, RagTopicsError) as exc:
        return f"**No estimate:** {html.escape(str(exc))}"


def jobs_html(rt: Runtime, jobs: list[tuple[str, ...]], kept: dict | None = None) -> str:
    """Progress bars for the session's uploads: ``(job_id, file_name)`` or ``(job_id, file_name, document_id)``
    each, oldest first.

    A file uploaded again in the session (the same document) counts once, with its newest job;
    the summary says how many uploads were such repeats.

    Every tracked job still to run or running is counted by its status alone; only those shown
    get their phase and counts read (:func:`~ragtopics.jobs.queue.job_statuses`).

    Args:
        kept: job id → progress of the versions seen finished, kept between calls (see
            :func:`~ragtopics.jobs.queue.job_progresses`) and cut to its newest
            :data:`MAX_KEPT_FINISHED`; ``None``: every finished job is read again.
    """
    if not jobs:
        return "<p style='color:#6b7280'>No uploads in this session yet.</p>"
    newest: dict[str, tuple[str, ...]] = {}
    for job in jobs:  # the last upload of each file wins, in the place of that upload
        key = job[2] if len(job) > 2 else job[1]
        newest.pop(key, None)
        newest[key] = job
    again = len(jobs) - len(newest)
    jobs = list(newest.values())
    progress = list(zip((job[1] for job in jobs), job_statuses(rt, [job[0] for job in jobs], known=kept), strict=True))
    if kept is not None:
        for job_id in list(kept)[: max(0, len(kept) - MAX_KEPT_FINISHED)]:
            kept.pop(job_id, None)  # the oldest first (another tab may have cut it already)
    finished = sum(p.status == "finished" for _, p in progress)
    empty = sum(p.status == "finished" and (p.result or {}).get("status") == "empty" for _, p in progress)
    stopped = sum(p.status == "finished" and (p.result or {}).get("status") in STOPPED for _, p in progress)
    failed = sum(p.is_final and p.status != "finished" for _, p in progress)
    counts = (
        f"{finished - empty - stopped} indexed · "
        + (f"{empty} empty (no readable text) · " if empty else "")
        + (f"{stopped} replaced or deleted before indexing finished · " if stopped else "")
    )
    repeats = f", {plural(again, 're-upload')}" if again else ""
    summary = progress_bar(
        f"{len(jobs)} file(s) uploaded in this session{repeats}",
        (finished + failed) / len(jobs),
        f"{counts}{failed} failed · {len(jobs) - finished - failed} waiting or running",
        "failed" if failed else ("done" if finished == len(jobs) else ""),
    )
    # Running jobs first (the oldest queued run first), then failed ones, then waiting ones, then the newest finished.
    running = [x for x in progress if x[1].status == "started"]
    failed_bars = [x for x in progress if x[1].is_final and x[1].status != "finished"]
    waiting = [x for x in progress if not x[1].is_final and x[1].status != "started"]
    shown = (running + failed_bars + waiting)[:MAX_BARS]
    shown += [x for x in progress if x[1].status == "finished"][-(MAX_BARS - len(shown)) :] if len(shown) < MAX_BARS else []
    partial = [p.job_id for _, p in shown if p.partial]  # read in full only the bars shown
    full = dict(zip(partial, job_progresses(rt, partial), strict=True))
    shown = [(name, full.get(p.job_id, p)) for name, p in shown]
    costs = comparison(rt, [p.job_id for _, p in shown if p.status == "finished"])  # the estimate beside the actual counts
    bars = [summary]
    if len(shown) < len(progress):
        summary += f"<p style='color:#6b7280;margin:2px 0'>{len(shown)} of {len(progress)} files shown: running, failed and waiting ones first</p>"
        bars = [summary]
    for name, p in shown:
        if p.status == "finished" and (p.result or {}).get("status") in STOPPED:
            bars.append(progress_bar(short_name(name), 1.0, (p.result or {}).get("reason", ""), "stopped"))
        elif p.status == "finished":
            result = p.result or {}
            empty = result.get("status") == "empty"
            done = f"{result.get('status', 'done')} · {plural(result.get('chunk_count', 0), 'chunk')}"
            detail = "empty · no readable text, nothing of it can be found" if empty else done
            bars.append(progress_bar(short_name(name), 1.0, detail, "empty" if empty else "done"))
            if p.job_id in costs:  # under the bar: the cost estimate kept with the upload beside what it took
                bars.append(
                    f'<div class="rt-cost" style="font-size:0.8em;color:#6b7280;text-align:right;margin:0 0 4px">'
                    f"{html.escape(comparison_text(costs[p.job_id]))}</div>"
                )
        elif p.status in ("failed", "stopped", "canceled", "missing"):
            bars.append(progress_bar(short_name(name), 1.0, f"failed: {p.error or p.status}", "failed"))
        else:
            detail = phase_text(p.phase or p.status, p.done, p.total)
            if p.shared_by > 1:  # every file of a shared job shows the job's progress
                detail += f" · in one job with {plural(p.shared_by - 1, 'other file')}"
            bars.append(progress_bar(short_name(name), p.fraction, detail))
    return "".join(bars)


#: Ticks after which an open tab reads the Indexed Documents list again although its stamp did not change
#: (a worker whose clock is behind the newest row's writes an older ``updated_at``).
LIST_REREAD_TICKS = 10
#: Fewest ticks between two reads of a list that changes (while uploads finish every second, the list
#: follows them every few seconds; the progress bars show each job at every tick).
LIST_CHANGED_TICKS = 3


@dataclass(frozen=True, slots=True)
class Shown:
    """What an open Upload tab shows now, as :func:`poll` compares it.

    Attributes:
        bars: hash of the progress bars' HTML.
        rows: hash of the Indexed Documents list's rows.
        stamp: the list's :func:`~ragtopics.storage.documents.documents_stamp` when it was read.
        age: ticks since the list was read.
    """

    bars: int | None = None
    rows: int | None = None
    stamp: tuple | None = None
    age: int = 0


def poll(
    rt: Runtime, topic_name: str | None, jobs: list[tuple[str, ...]], kept: dict | None, shown: Shown | None
) -> tuple[str | None, list[list] | None, Shown]:
    """One tick of an open Upload tab: its progress bars (:func:`jobs_html`) and its Indexed Documents list.

    The list's rows are read when another Topic was chosen, when the Topic's documents changed since
    they were read (their :func:`~ragtopics.storage.documents.documents_stamp`, one aggregate query) and
    :data:`LIST_CHANGED_TICKS` ticks have passed, and every :data:`LIST_REREAD_TICKS` ticks; so a tick
    costs the stamp, not the rows of every document, and a list that changes all the time is read every
    few ticks, not at each.

    Args:
        topic_name: the Topic chosen in the tab (None or "": no list).
        jobs, kept: as :func:`jobs_html` takes them.
        shown: what the previous tick returned (None: nothing shown yet).

    Returns:
        ``(bars, rows, shown)``: the bars' HTML and the list's rows, each None when unchanged since
        ``shown``, and what is shown after this tick.
    """
    shown = shown or Shown()
    bars = jobs_html(rt, jobs, kept)
    stamp = documents_stamp(rt.metadata, topic_name) if topic_name else None
    rows, rows_key, age, read_stamp = None, shown.rows, shown.age + 1, shown.stamp
    other_topic = (stamp or ("",))[0] != (shown.stamp or ("",))[0]
    if other_topic or age >= LIST_REREAD_TICKS or (stamp != shown.stamp and age >= LIST_CHANGED_TICKS):
        rows, age, read_stamp = documents_table(rt, topic_name), 0, stamp
        rows_key = hash(repr(rows))
    now = Shown(hash(bars), rows_key, read_stamp, age)
    return (None if now.bars == shown.bars else bars), (None if rows_key == shown.rows else rows), now


def build(rt: Runtime) -> dict:
    """Lay out the tab; returns its Topic dropdown for refreshing."""
    with gr.Tab("Upload", id="upload") as tab:
        topic = gr.Dropdown(topic_choices(rt), label="Topic", allow_custom_value=True, elem_id="upload-topic")
        files = gr.File(file_count="multiple", label="Files", type="filepath", elem_id="upload-files")
        with gr.Row():
            upload = gr.Button("Upload", variant="primary")
            preview = gr.Button("Preview cost", elem_id="upload-preview")
        cost_panel = gr.Markdown(elem_id="upload-cost")
        messages = gr.Markdown(elem_id="upload-messages")
        progress = gr.HTML(elem_id="upload-progress")
        gr.Markdown("#### Indexed Documents")
        table = gr.Dataframe(
            headers=DOC_HEADERS, interactive=False, elem_id="documents", wrap=True, column_widths=DOC_COLUMN_WIDTHS
        )
        with gr.Row(equal_height=True):
            doc_choice = gr.Dropdown([], label="Document", allow_custom_value=False, elem_id="delete-document-choice", scale=3)
            why_doc = gr.Button("Why? (nothing found, failed)", elem_id="why-document", scale=1)
            ask_delete = gr.Button("Delete document…", variant="secondary", elem_id="delete-document", scale=1)
        with gr.Group(visible=False, elem_id="delete-document-confirm") as confirm_box:
            confirm_text = gr.Markdown()
            with gr.Row():
                confirm = gr.Button("Delete", variant="stop", elem_id="delete-document-yes")
                cancel = gr.Button("Cancel", elem_id="delete-document-no")
        deleted_text = gr.Markdown(elem_id="delete-document-status")
        doc_diagnosis = gr.Markdown(elem_id="document-diagnosis")
        graph_panel.build(rt, topic)
        jobs = gr.State([])
        rendered = gr.State(None)
        timer = gr.Timer(1.0)
    finished: dict = {}  # job id → progress of a finished version: it no longer changes, so it is read once

    def on_upload(topic_name, paths, current_jobs):
        if not topic_name:
            return "Choose a Topic first.", current_jobs, gr.File(value=None)
        if not paths:
            return "Choose one or more files first.", current_jobs, gr.File(value=None)
        try:
            topic_obj = get_topic(rt, topic_name)
        except RagTopicsError as exc:
            return str(exc), current_jobs, gr.File(value=None)
        lines, new_jobs = [], []
        with BatchedUploads(rt, topic_obj) as uploads:  # small files share indexing jobs
            for path in paths:
                name = Path(path).name
                try:
                    doc = uploads.add(name, Path(path).read_bytes())
                    new_jobs.append((doc.job_id, doc.file_name, doc.id))
                except RagTopicsError as exc:
                    lines.append(f"- **Refused:** {exc}")
        failed = {row.job_id for row, _ in uploads.not_queued}
        new_jobs = [job for job in new_jobs if job[0] not in failed]
        lines += sorted({f"- **Not queued:** {message}" for _, message in uploads.not_queued})
        head = f"Enqueued {len(new_jobs)} file(s)." if new_jobs else "Nothing enqueued."
        return "\n".join([head, *lines]), (current_jobs + new_jobs)[-MAX_TRACKED_JOBS:], gr.File(value=None)

    upload.click(on_upload, [topic, files, jobs], [messages, jobs, files], api_name="upload_files", api_visibility="undocumented")
    preview.click(
        lambda t, p: preview_cost(rt, t, p), [topic, files], cost_panel, api_name="preview_cost", api_visibility="undocumented"
    )

    def tick(topic_name, current_jobs, shown):
        """Re-render the bars and the list only when they changed (:func:`poll`), so an idle tab does not flicker.

        While Redis does not answer, the bars say so (and the list keeps what it showed); the next
        tick after it is back shows the jobs again.
        """
        try:
            bars, rows, now = poll(rt, topic_name, current_jobs, finished, shown)
        except Exception as exc:
            if not is_store_outage(exc):
                raise
            return progress_bar(STORE_DOWN_MESSAGE, 0.0, "", "failed"), gr.skip(), None
        return (gr.skip() if bars is None else bars), (gr.skip() if rows is None else rows), now

    timer.tick(tick, [topic, jobs, rendered], [progress, table, rendered], show_progress="hidden", api_visibility="private")

    def documents(topic_name: str) -> list[list]:
        return documents_table(rt, topic_name)

    topic.change(documents, topic, table, api_name="documents", api_visibility="undocumented")

    def document_names(topic_name: str | None, current: str | None = None) -> gr.Dropdown:
        t = find_topic(rt, topic_name)
        names = [d.file_name for d in list_documents(rt, t)] if t else []
        return gr.Dropdown(choices=names, value=current if current in names else None)

    def on_ask_delete(topic_name, file_name):
        if not topic_name or not file_name:
            return gr.Group(visible=False), "", gr.skip(), "Choose a Topic and a document to delete first."
        question = (
            f"Delete **{md_text(file_name)}** from Topic **{md_text(topic_name)}**? Its chunks, keywords, "
            "pictures and stored file are removed for good; chats that cited it show it as removed."
        )
        return gr.Group(visible=True), question, gr.Button(f"Delete {short_name(file_name, 40)}"), ""

    def on_delete(topic_name, file_name):
        try:
            removed = delete_document(rt, get_topic(rt, topic_name), file_name)
        except RagTopicsError as exc:
            return (
                gr.Group(visible=False),
                f"**Not deleted:** {html.escape(str(exc))}",
                documents_table(rt, topic_name),
                gr.skip(),
            )
        what = removed_text(removed)
        return (
            gr.Group(visible=False),
            f"Deleted **{html.escape(file_name)}** ({what}).",
            documents_table(rt, topic_name),
            document_names(topic_name),
        )

    topic.change(document_names, topic, doc_choice, api_visibility="private")
    doc_choice.focus(document_names, [topic, doc_choice], doc_choice, api_visibility="private")
    ask_delete.click(
        on_ask_delete, [topic, doc_choice], [confirm_box, confirm_text, confirm, deleted_text], api_visibility="private"
    )
    confirm.click(
        on_delete,
        [topic, doc_choice],
        [confirm_box, deleted_text, table, doc_choice],
        api_name="delete_document",
        api_visibility="undocumented",
    )
    cancel.click(lambda: gr.Group(visible=False), None, confirm_box, api_visibility="private")

    def explain(topic_name, file_name):
        t = find_topic(rt, topic_name)
        doc = next((d for d in list_documents(rt, t) if d.file_name == file_name), None) if t and file_name else None
        if doc is None:
            return "Choose a Topic and a document first."
        try:
            return diagnose_document(rt, doc.id).to_markdown()
        except RagTopicsError as exc:
            return html.escape(str(exc))

    why_doc.click(explain, [topic, doc_choice], doc_diagnosis, api_visibility="private")
    return {"topic": topic, "tab": tab, "refresh": lambda current: refresh_dropdown(rt, current)}
