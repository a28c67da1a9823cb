"""The Upload tab: multi-file upload, a progress bar per job, the Indexed Documents list."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ragtopics.documents.uploads import list_documents, receive_upload, set_job
from ragtopics.errors import RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import get_topic
from ragtopics.ui.common import find_topic, plural, progress_bar, refresh_dropdown, short_name, topic_choices
from ragtopics.worker.queue import enqueue_ingest, job_progress

MAX_TRACKED_JOBS = 2000
MAX_BARS = 20

DOC_HEADERS = ["File", "Status", "Chunks", "Message", "Indexed with", "Model calls", "Size (KB)"]
#: Relative column widths; the long cells (message, indexed with) wrap instead of widening the page.
DOC_COLUMN_WIDTHS = ["16%", "11%", "6%", "23%", "28%", "10%", "6%"]


def indexed_with_text(w: dict) -> str:
    """One readable line for the settings a version was indexed with (empty when none is searchable)."""
    if not w:
        return ""
    keywords = f"keyword index ({w.get('keyword_enrichment', '').lower() or 'yes'})" if w.get("keyword_index") else "no keyword index"
    records = w.get("records_per_chunk")
    per_chunk = ""
    if records:
        fewest, most = records
        per_chunk = f" · {fewest if fewest == most else f'{fewest}–{most}'} record{'s' if most > 1 else ''} per chunk"
    split = f" · {w['token_cap']}" if w.get("token_cap") else ""  # chunks split to fit the embedder's window
    return f"{w.get('chunking_strategy', '')} {w['chunk_size']}/{w['chunk_overlap']} · {keywords} · {w.get('reader', '')}{per_chunk}{split}"


def documents_table(rt: Runtime, topic_name: str | None) -> list[list]:
    """Rows of the Indexed Documents list, with the settings each file's searchable version was indexed with."""
    topic = find_topic(rt, topic_name)
    if topic is None:
        return []
    rows = []
    for d in list_documents(rt, topic):
        w = d.indexed_with
        status = d.status
        if d.status == "failed" and w:
            status = "failed · previous version searchable"
        rows.append([short_name(d.file_name), status, d.chunk_count, d.error or d.warning, indexed_with_text(w),
                     ", ".join(f"{k} {v}" for k, v in w.get("model_calls", {}).items()),
                     round(d.size_bytes / 1024, 2)])  # fmt: skip
    return rows


def jobs_html(rt: Runtime, jobs: list[tuple[str, str]]) -> str:
    """Progress bars for ``(job_id, file_name)`` pairs (newest upload batch)."""
    if not jobs:
        return "<p style='color:#6b7280'>No uploads in this session yet.</p>"
    progress = [(name, job_progress(rt, job_id)) for job_id, name in jobs]
    finished = sum(p.status == "finished" for _, p in progress)
    empty = sum(p.status == "finished" and (p.result or {}).get("status") == "empty" for _, p in progress)
    failed = sum(p.is_final and p.status != "finished" for _, p in progress)
    counts = f"{finished - empty} indexed · " + (f"{empty} empty (no readable text) · " if empty else "")
    summary = progress_bar(f"{len(jobs)} file(s) uploaded in this session", (finished + failed) / len(jobs),
                           f"{counts}{failed} failed · {len(jobs) - finished - failed} waiting or running",
                           "failed" if failed else ("done" if finished == len(jobs) else ""))  # fmt: skip
    # Running and failed jobs first, then the newest finished ones.
    shown = [x for x in progress if not x[1].is_final or x[1].status != "finished"][-MAX_BARS:]
    shown += [x for x in progress if x[1].status == "finished"][-(MAX_BARS - len(shown)):] if len(shown) < MAX_BARS else []
    bars = [summary]
    for name, p in shown:
        if p.status == "finished":
            result = p.result or {}
            empty = result.get("status") == "empty"
            done = f"{result.get('status', 'done')} · {plural(result.get('chunk_count', 0), 'chunk')}"
            detail = "empty · no readable text, nothing of it can be found" if empty else done
            bars.append(progress_bar(short_name(name), 1.0, detail, "empty" if empty else "done"))
        elif p.status in ("failed", "stopped", "canceled", "missing"):
            bars.append(progress_bar(short_name(name), 1.0, f"failed: {p.error or p.status}", "failed"))
        else:
            detail = f"{p.phase or p.status} {p.done}/{p.total}" if p.total else (p.phase or p.status)
            bars.append(progress_bar(short_name(name), p.fraction, detail))
    return "".join(bars)


def build(rt: Runtime) -> dict:
    """Lay out the tab; returns its Topic dropdown for refreshing."""
    with gr.Tab("Upload", id="upload"):
        topic = gr.Dropdown(topic_choices(rt), label="Topic", allow_custom_value=True, elem_id="upload-topic")
        files = gr.File(file_count="multiple", label="Files", type="filepath", elem_id="upload-files")
        upload = gr.Button("Upload", variant="primary")
        messages = gr.Markdown(elem_id="upload-messages")
        progress = gr.HTML(elem_id="upload-progress")
        gr.Markdown("#### Indexed Documents")
        table = gr.Dataframe(headers=DOC_HEADERS, interactive=False, elem_id="documents", wrap=True,
                             column_widths=DOC_COLUMN_WIDTHS)  # fmt: skip
        jobs = gr.State([])
        rendered = gr.State(None)
        timer = gr.Timer(1.0)

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
        for path in paths:
            name = Path(path).name
            try:
                doc = receive_upload(rt, topic_obj, name, Path(path).read_bytes())
                job_id = enqueue_ingest(rt, topic_obj.id, doc.id)
                set_job(rt, doc.id, job_id)
                new_jobs.append((job_id, doc.file_name))
            except RagTopicsError as exc:
                lines.append(f"- **Refused:** {exc}")
        head = f"Enqueued {len(new_jobs)} file(s)." if new_jobs else "Nothing enqueued."
        return "\n".join([head, *lines]), (current_jobs + new_jobs)[-MAX_TRACKED_JOBS:], gr.File(value=None)

    upload.click(on_upload, [topic, files, jobs], [messages, jobs, files], api_name="upload_files", api_visibility="undocumented")
    def tick(topic_name, current_jobs, shown):
        """Re-render the bars and the list only when they changed, so an idle tab does not flicker."""
        bars, rows = jobs_html(rt, current_jobs), documents_table(rt, topic_name)
        key = hash((bars, repr(rows)))
        if key == shown:
            return gr.skip(), gr.skip(), shown
        return bars, rows, key

    timer.tick(tick, [topic, jobs, rendered], [progress, table, rendered], show_progress="hidden", api_visibility="private")

    def documents(topic_name: str) -> list[list]:
        return documents_table(rt, topic_name)

    topic.change(documents, topic, table, api_name="documents", api_visibility="undocumented")
    return {"topic": topic, "refresh": lambda current: refresh_dropdown(rt, current)}
