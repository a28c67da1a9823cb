"""The Chat tab: streamed answers with sources, Stop, and reopening earlier chats."""

from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

from ragtopics.answer.attachments import read_attachment
from ragtopics.answer.context import Source, pages_label
from ragtopics.answer.history import list_sessions, own_session, saved_turns, session_turns
from ragtopics.answer.turn import ChatUpdate, ask
from ragtopics.errors import STORE_DOWN_MESSAGE, RagTopicsError, is_store_outage
from ragtopics.quality.diagnosis import diagnose_turn
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import get_topic
from ragtopics.ui.common import find_topic, md_text, short_name, topic_choices


def sources_html(update: ChatUpdate | None) -> str:
    """Badges for the sources of the final answer: one per file, with its pages, best score and chunk count.

    A badge reads ``report.pdf, pp. 3–4 · 0.82``: the pages (slides, sheets) of the chunks used,
    when known, and the file's best cosine similarity to the question (0..1); hovering a badge
    says so, with the chunk ids used. A PDF's link opens the best chunk's first page.
    """
    if update is None or not update.sources:
        return ""
    by_file: dict[str, list] = {}
    for s in update.sources:
        by_file.setdefault(s.file, []).append(s)
    badges = "".join(_badge(name, hits) for name, hits in by_file.items())
    return f'<div id="rt-sources"><strong>Sources:</strong> {badges} {route_line(update)}</div>'


#: How the router's method reads under an answer.
_METHODS = {"embedding": "embedding router (bundled model)", "llm": "Router Model", "forced": "forced way"}


def route_line(update: ChatUpdate) -> str:
    """``route SEARCH · confidence 0.79 · embedding router (bundled model) · reranked by the Language Model``,
    the router's reason on hover."""
    parts = [f"route {update.route}"]
    fell_back = update.route_planned and update.route_planned != update.route
    if fell_back:  # the router's way found nothing to answer by: say so where it shows, not only on hover
        parts.append(html.escape(f"{update.route_planned} fell back" + (f": {update.note}" if update.note else "")))
    if update.route_confidence is not None:
        parts.append(f"confidence {update.route_confidence:.2f}" + (f" for {update.route_planned}" if fell_back else ""))
    if update.route_method:
        parts.append(_METHODS.get(update.route_method, update.route_method))
    if update.rerank:
        parts.append(html.escape(update.rerank))
    reason = html.escape(update.route_reason or "how the question was handled", quote=True)
    return f"<small class='rt-route' title='{reason}'>{' · '.join(parts)}</small>"


#: What a source's status adds to its badge, and the hover text that explains it.
_STATUS_NOTE = {
    "changed": (" · changed since", "The file was replaced after this answer; the link opens the current version."),
    "removed": (" · removed", "The file was removed from the Topic after this answer; it can no longer be opened."),
}


def _named(hits: list[Source]) -> str:
    """A file's name on its badge, with the pages of the chunks the answer drew on: ``report.pdf, pp. 3–4``.

    Chunks shown only because the answer used their file (``same file``) add their pages
    only when no chunk of the file was used directly.
    """
    direct = [s for s in hits if s.reason != "same file"] or hits
    where = pages_label(hits[0].file, [p for s in direct for p in s.pages])
    return short_name(hits[0].label) + (f", {where}" if where else "")


def _badge(name: str, hits: list) -> str:
    first = hits[0]
    label = f"{html.escape(_named(hits))} · {max(s.score for s in hits):.2f}"
    label += f" · {len(hits)} chunks" if len(hits) > 1 else ""
    if first.topic and not first.code:  # from a connected Topic
        label += f" · via {html.escape(first.topic)}"
    note, why = _STATUS_NOTE.get(first.status, ("", "The link downloads the file for about 10 minutes."))
    label += note
    style = "display:inline-block;margin:2px 4px;padding:2px 8px;border-radius:12px;background:#eef2ff;border:1px solid #c7d2fe"
    link = first.link
    inner = f'<a href="{html.escape(link)}" target="_blank" rel="noopener">{label}</a>' if link else label
    best = max(s.score for s in hits)
    used = ", ".join(f"{s.chunk_id} ({s.reason})" if s.reason else s.chunk_id for s in hits)
    title = (
        f"{name}: best cosine similarity {best:.2f} between the question and a chunk; {len(hits)} chunk(s) used ({used}). {why}"
    )
    return f'<span class="rt-source" title="{html.escape(title)}" style="{style}">{inner}</span>'


def sources_line(update: ChatUpdate) -> str:
    """A small line kept under each answer in the chat: its source files (linked) and best scores.

    The badges row under the chat shows the latest answer's sources; this line stays with
    every answer, so earlier answers keep theirs as the conversation goes on.
    """
    by_file: dict[str, list] = {}
    for s in update.sources:
        by_file.setdefault(s.file, []).append(s)
    if not by_file:
        return ""
    parts = []
    for hits in by_file.values():
        label = html.escape(_named(hits)).replace("[", "&#91;").replace("]", "&#93;")
        label += _STATUS_NOTE.get(hits[0].status, ("", ""))[0]
        link = hits[0].link
        parts.append(
            (f'<a href="{html.escape(link)}" target="_blank">{label}</a>' if link else label)
            + f" {max(h.score for h in hits):.2f}"
        )
    return "\n\n<sub>Sources: " + " · ".join(parts) + "</sub>"


def route_note(update: ChatUpdate) -> str:
    """A short line for answers without source files: answered without searching (DIRECT, ATTACHMENT),
    from community summaries (GLOBAL), or with nothing found; with the way the router chose."""
    if update.route in ("DIRECT", "ATTACHMENT"):
        what = "answered without searching"
    elif update.no_answer:
        what = f"nothing found ({html.escape(update.note)})" if update.note else "nothing found"
    else:
        what = "answered from community summaries, which have no source files"
    return f'<div id="rt-sources"><small>{what}:</small> {route_line(update)}</div>'


def session_choices(rt: Runtime, topic_name: str | None) -> list[tuple[str, str]]:
    """``(label, session_id)`` of a Topic's chats, newest first."""
    topic = find_topic(rt, topic_name)
    if topic is None:
        return []
    return [(f"{s.created_at:%Y-%m-%d %H:%M} · {s.title or s.id}", s.id) for s in list_sessions(rt, topic)]


def load_session(rt: Runtime, session_id: str | None) -> tuple[list[dict], str]:
    """The messages of a saved chat and the source badges (with fresh links) of its last answer."""
    if not session_id:
        return [], ""
    if own_session(rt, session_id) is None:
        return [{"role": "assistant", "content": "This chat does not exist, or it is someone else's."}], ""
    messages: list[dict] = []
    last = None
    for turn in saved_turns(rt, session_id):
        last = ChatUpdate(
            text=turn.answer,
            done=True,
            sources=turn.sources,
            route=turn.route,
            route_confidence=turn.route_confidence,
            route_reason=turn.route_reason,
            route_method=turn.route_method,
            route_planned=turn.route_planned,
        )
        messages += [
            {"role": "user", "content": md_text(turn.question)},
            {"role": "assistant", "content": turn.answer + sources_line(last)},
        ]
    return messages, (sources_html(last) or route_note(last)) if last else ""


def refresh_earlier(rt: Runtime, history: list[dict], session_id: str) -> list[dict]:
    """The chat with the source lines of its saved answers re-rendered: a file deleted or replaced since says so.

    Only answers whose sources changed status are touched; an answer is found by its saved text.
    """
    history = list(history)
    for turn in saved_turns(rt, session_id):
        if all(s.status == "current" for s in turn.sources):
            continue
        update = ChatUpdate(text=turn.answer, done=True, sources=turn.sources, route=turn.route)
        for i, message in enumerate(history):
            text = _message_text(message.get("content"))
            if message.get("role") == "assistant" and text.startswith(turn.answer + "\n\n<sub>Sources:"):
                history[i] = {"role": "assistant", "content": turn.answer + sources_line(update)}
    return history


def _message_text(content) -> str:
    """The text of a chat message as the Chatbot sends it back: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict) and p.get("type") == "text")


#: Added under an answer the user stopped (a stopped turn is not saved).
STOPPED = "*⏹ stopped: this answer is not saved*"
#: Shown in place of the answer until its first words arrive (a cold local model can take a while).
THINKING = "… searching the documents and writing the answer"
#: Said after a refused attachment, which is taken off the message.
ATTACHMENT_REMOVED = "The attachment was removed: attach another file, or send the question without it."
#: Shown while a turn is in a phase that has no answer text yet.
PHASES = {
    "routing": "… choosing how to answer",
    "searching": "… searching the documents",
    "writing": "… writing the answer",
    "answering": THINKING,
}


def build(rt: Runtime) -> dict:
    """Lay out the tab; returns its Topic dropdown for refreshing."""
    with gr.Tab("Chat", id="chat") as tab:
        with gr.Row():
            topic = gr.Dropdown(topic_choices(rt), label="Topic", scale=2, allow_custom_value=True, elem_id="chat-topic")
            earlier = gr.Dropdown([], label="Earlier chats", scale=3)
            new_chat = gr.Button("New chat", scale=1)
        chatbot = gr.Chatbot(label="Chat", height=480, elem_id="chatbot")
        with gr.Row(equal_height=True):
            sources = gr.HTML(elem_id="sources")
            why = gr.Button("Why?", size="sm", scale=0, min_width=80, elem_id="why-answer")
        diagnosis = gr.Markdown(elem_id="answer-diagnosis")
        with gr.Row():
            question = gr.Textbox(placeholder="Ask a question about this Topic's documents", show_label=False, scale=6)
            send = gr.Button("Send", variant="primary", scale=1)
            stop = gr.Button("Stop", variant="stop", scale=1)
        attach = gr.File(
            label="Attach a file to the next message (optional)", type="filepath", elem_id="chat-attachment", height=150
        )
        session = gr.State(None)

    def respond(topic_name, message, history, session_id, attachment_path):
        history = list(history or [])
        if not topic_name:
            yield [*history, {"role": "assistant", "content": "Choose a Topic first."}], "", session_id, message, None
            return
        shown = md_text(message) + (f"\n\n📎 {md_text(Path(attachment_path).name)}" if attachment_path else "")  # as typed
        history += [{"role": "user", "content": shown}, {"role": "assistant", "content": THINKING}]
        yield history, "", session_id, "", attachment_path
        if session_id and not session_turns(rt, session_id):
            session_id = None  # its only turn was stopped, so nothing of it was saved: this is a new chat
        if session_id:  # earlier answers whose files were deleted or replaced since say so now
            history = refresh_earlier(rt, history, session_id)
            yield history, gr.skip(), session_id, gr.skip(), attachment_path
        try:
            topic_obj = get_topic(rt, topic_name)
            try:
                attachment = _read(topic_obj, attachment_path)
            except RagTopicsError as exc:  # a refused file is taken off: kept, it would refuse every later message
                history[-1] = {"role": "assistant", "content": f"⚠️ {md_text(str(exc))}\n\n{ATTACHMENT_REMOVED}"}
                yield history, "", session_id, message, None
                return
            for update in ask(rt, topic_obj, message, session_id=session_id, attachment=attachment):
                shown_text = update.text or (f"… {update.status}" if update.status else PHASES.get(update.phase, THINKING))
                history[-1] = {"role": "assistant", "content": shown_text + (sources_line(update) if update.done else "")}
                note = (sources_html(update) or route_note(update)) if update.done else ""
                # The question box is left alone while streaming: what the user types next stays there.
                yield history, note, update.session_id, gr.skip(), None if update.done else attachment_path
        except Exception as exc:  # an operator's error, or Redis gone: said in the chat, the question kept to send again
            outage = is_store_outage(exc)
            if not (outage or isinstance(exc, RagTopicsError)):
                raise
            history[-1] = {"role": "assistant", "content": f"⚠️ {STORE_DOWN_MESSAGE if outage else md_text(str(exc))}"}
            yield history, "", session_id, message, attachment_path

    def _read(topic_obj, path):
        if not path:
            return None
        cfg = topic_obj.settings
        return read_attachment(
            Path(path).read_bytes(),
            Path(path).name,
            allowed_types=cfg.chat_attachment_types,
            max_mb=cfg.largest_chat_attachment_mb,
            model_sees_images=rt.settings.endpoint("language_model").supports_images,
        )

    outputs = [chatbot, sources, session, question, attach]
    inputs = [topic, question, chatbot, session, attach]
    # A question sent while an answer streams is not dropped: it runs when the current one ends.
    events = [
        send.click(respond, inputs, outputs, api_name="ask", api_visibility="undocumented", trigger_mode="always_last"),
        question.submit(respond, inputs, outputs, api_visibility="private", trigger_mode="always_last"),
    ]

    def on_stop(history, session_id):
        """Mark the stopped answer as not saved; forget a chat whose only turn was the stopped one."""
        history = list(history or [])
        if history and history[-1].get("role") == "assistant":
            history[-1] = {"role": "assistant", "content": f"{_message_text(history[-1].get('content'))}\n\n{STOPPED}"}
        return history, session_id if session_id and session_turns(rt, session_id) else None

    # cancels: gradio takes the events themselves, though its annotation names dicts
    stop_clicked = stop.click(None, cancels=events, api_visibility="private")  # type: ignore[arg-type]
    stop_clicked.then(on_stop, [chatbot, session], [chatbot, session], api_visibility="private")
    # New chat also ends an answer still streaming, so it cannot write into the new, empty chat.
    new_chat.click(
        lambda: ([], "", None, gr.Dropdown(value=None)),
        None,
        [chatbot, sources, session, earlier],
        cancels=events,  # type: ignore[arg-type]
        api_visibility="private",
    )
    topic.change(
        lambda t: ([], "", None, gr.Dropdown(choices=session_choices(rt, t), value=None)),
        topic,
        [chatbot, sources, session, earlier],
        api_visibility="private",
    )
    earlier.focus(lambda t: gr.Dropdown(choices=session_choices(rt, t)), topic, earlier, api_visibility="private")
    earlier.input(lambda sid: (*load_session(rt, sid), sid), earlier, [chatbot, sources, session], api_visibility="private")

    def explain(session_id):
        turns = session_turns(rt, session_id) if session_id else []
        if not turns:
            return (
                "Nothing to explain yet: *Why?* explains the last saved answer of this chat, and an answer is saved "
                "when it is complete (not while it is still being written, nor when it was stopped)."
            )
        try:
            return diagnose_turn(rt, turns[-1].id).to_markdown()
        except RagTopicsError as exc:
            return str(exc)

    why.click(explain, session, diagnosis, api_visibility="private")
    for trigger in (send.click, question.submit, new_chat.click, topic.change):
        trigger(lambda: "", None, diagnosis, api_visibility="private")  # an old explanation never sits under a new answer
    return {"topic": topic, "tab": tab}
