"""The Topics tab: create a Topic (wizard) and see the existing ones."""

from __future__ import annotations

import html
import json

import gradio as gr

from ragtopics.errors import RagTopicsError
from ragtopics.ingest.readers import SUPPORTED_EXTENSIONS
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import DEFAULT_NO_ANSWER, RagTopicSettings
from ragtopics.topics.topics import create_topic, get_topic, list_topics, update_settings

_DEFAULTS = RagTopicSettings()


def topics_table(rt: Runtime) -> list[list]:
    """Rows of the Topics table: name, kind, chunk size/overlap, Top-K, min score, settings version."""
    return [
        [t.name, t.kind, t.settings.chunk_size, t.settings.chunk_overlap, t.settings.top_k_results,
         t.settings.min_similarity_score, f"v{t.settings_version}"]  # fmt: skip
        for t in list_topics(rt)
    ]


def build(rt: Runtime) -> dict:
    """Lay out the tab; returns the components other tabs refresh from."""
    with gr.Tab("Topics", id="topics"):
        gr.Markdown("### Create a Topic")
        gr.Markdown("**Step 1 · Name and prompt**")
        with gr.Row():
            name = gr.Textbox(label="Name", placeholder="e.g. Service manuals")
            description = gr.Textbox(label="Description")
        system_prompt = gr.Textbox(label="Custom System Prompt", lines=2)
        gr.Markdown("**Step 2 · Files and chunking**")
        file_types = gr.CheckboxGroup(sorted(SUPPORTED_EXTENSIONS), value=_DEFAULTS.file_types, label="File Types")
        with gr.Row():
            chunk_size = gr.Number(_DEFAULTS.chunk_size, label="Chunk Size (characters)", precision=0)
            chunk_overlap = gr.Number(_DEFAULTS.chunk_overlap, label="Chunk Overlap (characters)", precision=0)
        gr.Markdown("**Step 3 · Answering** (every other setting: *Configure a Topic* below, after creating it)")
        with gr.Row():
            top_k = gr.Number(_DEFAULTS.top_k_results, label="Top-K Results", precision=0)
            min_score = gr.Slider(0, 1, value=_DEFAULTS.min_similarity_score, step=0.01, label="Min. Similarity Score")
        no_answer = gr.Textbox(DEFAULT_NO_ANSWER, label="No-answer response")
        create = gr.Button("Create Topic", variant="primary")
        status = gr.Markdown(elem_id="topic-status")
        table = gr.Dataframe(
            value=topics_table(rt),
            headers=["Topic", "Kind", "Chunk Size", "Overlap", "Top-K", "Min. Score", "Settings"],
            interactive=False,
            label="Topics",
        )
        settings_box = _settings_editor(rt, table)

    def on_create(name, description, system_prompt, file_types, chunk_size, chunk_overlap, top_k, min_score, no_answer):
        settings = {"custom_system_prompt": system_prompt or "", "file_types": file_types or [],
                    "chunk_size": int(chunk_size or 0), "chunk_overlap": int(chunk_overlap or 0), "top_k_results": int(top_k or 0),
                    "min_similarity_score": float(min_score), "no_answer_response": no_answer or DEFAULT_NO_ANSWER}  # fmt: skip
        try:
            topic = create_topic(rt, name, description=description or "", settings=settings)
        except RagTopicsError as exc:
            return f"**Not created:** {html.escape(str(exc))}", topics_table(rt), gr.skip()
        return f"Created Topic **{html.escape(topic.name)}**. Upload files on the Upload tab.", topics_table(rt), ""

    inputs = [name, description, system_prompt, file_types, chunk_size, chunk_overlap, top_k, min_score, no_answer]
    event = create.click(on_create, inputs, [status, table, name], api_name="create_topic", api_visibility="undocumented")
    return {"created": event, "settings_topic": settings_box, "table": table}


SETTING_KEYS = sorted(RagTopicSettings.model_fields)


def _settings_editor(rt: Runtime, table) -> gr.Dropdown:
    """Change one setting of an existing Topic (every change is a new settings version)."""
    with gr.Accordion("Configure a Topic", open=False):
        with gr.Row():
            topic = gr.Dropdown(choices=[], label="Topic", allow_custom_value=True, elem_id="settings-topic")
            key = gr.Dropdown(SETTING_KEYS, value="retrieval_strategy", label="Setting")
            value = gr.Textbox(label="Value", elem_id="settings-value")
        apply = gr.Button("Apply")
        status = gr.Markdown()

    def current(topic_name, setting):
        if not topic_name:
            return ""
        try:
            return _display(getattr(get_topic(rt, topic_name).settings, setting))
        except RagTopicsError as exc:
            return str(exc)

    def change(topic_name, setting, raw):
        try:
            t = update_settings(rt, topic_name, {setting: json.loads(raw) if raw.strip().startswith("{") else raw})
        except RagTopicsError as exc:
            return f"**Not changed:** {exc}", topics_table(rt)
        return f"Topic **{html.escape(t.name)}**: `{setting}` = `{_display(getattr(t.settings, setting))}` (settings v{t.settings_version}).", topics_table(rt)

    for trigger in (topic.change, key.change):
        trigger(current, [topic, key], value, api_visibility="private")
    apply.click(change, [topic, key, value], [status, table], api_name="change_setting", api_visibility="undocumented")
    return topic


def _display(value) -> str:
    """A setting's value as the operator types it: lists comma-separated, objects as JSON."""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if hasattr(value, "model_dump_json"):
        return value.model_dump_json()
    return str(value)
