"""The Prompts tab: every prompt the model receives, editable per Topic, and the no-answer response."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ragtopics.errors import RagTopicsError
from ragtopics.prompts.resolve import SHARED, resolve_prompts, set_prompt
from ragtopics.prompts.templates import DEFAULTS
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import get_topic, update_settings
from ragtopics.ui.common import md_text, topic_choices

PROMPT_NAMES = list(DEFAULTS)


def _scope(rt: Runtime, topic_name: str | None) -> str | None:
    return get_topic(rt, topic_name).id if topic_name else None


def prompt_text(rt: Runtime, topic_name: str | None, name: str) -> tuple[str, str]:
    """The prompt as it applies (Topic override, shared override or default) and its description."""
    template = resolve_prompts(rt, _scope(rt, topic_name))[name]
    variables = ", ".join("$" + v for v in sorted(DEFAULTS[name].variables())) or "none"
    return template.text, f"{template.description} Variables: {variables}."


def save_prompt(rt: Runtime, topic_name: str | None, name: str, text: str, *, reset: bool = False) -> str:
    """Store an edit, or with ``reset`` go back to the shared text; returns a status line.

    Empty text is refused, not taken as a reset: a text box not loaded yet (a page just opened)
    would otherwise wipe a Topic's prompt with one click on Save.
    """
    scope = get_topic(rt, topic_name).id if topic_name else SHARED
    where = f"Topic **{md_text(topic_name)}**" if topic_name else "all Topics"
    if not reset and not (text or "").strip():
        return (
            f"**Not saved:** the text is empty. Nothing changed for {where}; to go back to the shared text, "
            "use *Reset to shared*."
        )
    try:
        set_prompt(rt, scope, name, "" if reset else text)
    except RagTopicsError as exc:
        return f"**Not saved:** {exc}"
    return f"Prompt `{name}` reset for {where}." if reset else f"Saved prompt `{name}` for {where}."


def save_no_answer(rt: Runtime, topic_name: str | None, value: str) -> str:
    """Store a Topic's no-answer response; returns a status line (an empty text is refused here, an
    over-long one by the settings' own check)."""
    if not topic_name:
        return "**Not saved:** choose a Topic first."
    value = value or ""
    if not value.strip():
        return "**Not saved:** the no-answer response cannot be empty (it is what the chat shows when nothing is found)."
    try:
        update_settings(rt, topic_name, {"no_answer_response": value})
    except RagTopicsError as exc:
        return f"**Not saved:** {exc}"
    return "Saved the no-answer response."


def build(rt: Runtime) -> dict:
    """Lay out the Prompts tab; returns its Topic dropdown and the tab."""
    with gr.Tab("Prompts", id="prompts") as tab:
        topic = gr.Dropdown(topic_choices(rt), label="Topic", allow_custom_value=True, elem_id="prompts-topic")
        name = gr.Dropdown(PROMPT_NAMES, value="system", label="Prompt")
        about = gr.Markdown()
        text = gr.Textbox(lines=8, label="Text (for this Topic)")
        with gr.Row():
            save = gr.Button("Save", variant="primary")
            reset = gr.Button("Reset to shared")
        status = gr.Markdown()
        no_answer = gr.Textbox(label="No-answer response")
        save_answer = gr.Button("Save no-answer response")

    def load(topic_name, prompt_name):
        if not topic_name:
            return "", "Choose a Topic.", ""
        body, desc = prompt_text(rt, topic_name, prompt_name)
        return body, desc, get_topic(rt, topic_name).settings.no_answer_response

    private: dict[str, Any] = {"api_visibility": "private"}
    for trigger in (topic.change, name.change, tab.select):  # also when the tab is opened: a reloaded page keeps the choice
        trigger(load, [topic, name], [text, about, no_answer], **private)
    save.click(
        lambda t, n, x: save_prompt(rt, t, n, x),
        [topic, name, text],
        status,
        api_name="save_prompt",
        api_visibility="undocumented",
    )
    reset.click(lambda t, n: save_prompt(rt, t, n, "", reset=True), [topic, name], status, **private).then(
        load, [topic, name], [text, about, no_answer], **private
    )
    save_answer.click(lambda t, v: save_no_answer(rt, t, v), [topic, no_answer], status, **private)
    return {"topic": topic, "tab": tab}
