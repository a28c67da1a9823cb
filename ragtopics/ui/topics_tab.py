"""The Topics tab: the Create-a-Topic wizard, the Topics table, Configure a Topic and Delete a Topic."""

from __future__ import annotations

import html
import json
from typing import Any

import gradio as gr

from ragtopics.documents.uploads import enqueue_document
from ragtopics.errors import RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.settings.docs import display_value, settings_rows
from ragtopics.settings.env import ROLES
from ragtopics.settings.topic import RagTopicSettings, TopicSettings, phase_of
from ragtopics.topics.delete import delete_topic
from ragtopics.topics.topics import create_topic, get_topic, list_topics, reembed_topic, update_settings
from ragtopics.ui import wizard
from ragtopics.ui.common import find_topic, md_text
from ragtopics.ui.words import removed_text


def topics_table(rt: Runtime) -> list[list]:
    """Rows of the Topics table: name, kind, chunk size/overlap, Top-K, min score, settings version.

    Top-K is Top-K Results for RAG and Top-K Nodes for GraphRAG.
    """
    return [
        [
            t.name,
            t.kind,
            t.settings.chunk_size,
            t.settings.chunk_overlap,
            _top_k(t.settings),
            t.settings.min_similarity_score,
            f"v{t.settings_version}",
        ]
        for t in list_topics(rt)
    ]


def _top_k(settings: TopicSettings) -> int:
    """Top-K Results (RAG) or Top-K Nodes (GraphRAG)."""
    return settings.top_k_results if isinstance(settings, RagTopicSettings) else settings.top_k_nodes


def build(rt: Runtime) -> dict:
    """Lay out the tab; returns the components other tabs refresh from."""
    with gr.Tab("Topics", id="topics") as tab:
        gr.Markdown("### Create a Topic")
        wizard_parts = wizard.build(rt)
        table = gr.Dataframe(  # filled when an operator's page loads: nothing of it in the page config viewers get
            headers=["Topic", "Kind", "Chunk Size", "Overlap", "Top-K", "Min. Score", "Settings"],
            interactive=False,
            label="Topics",
        )
        settings_box = _settings_editor(rt, table)
        overrides_topic = _llm_overrides(rt)
        deleted = _delete_panel(rt, table)

    event = wizard_parts["create"].then(lambda: topics_table(rt), None, table, api_visibility="private")

    return {
        "tab": tab,
        "created": event,
        "deleted": deleted["event"],
        "settings_topic": settings_box,
        "delete_topic": deleted["topic"],
        "overrides_topic": overrides_topic,
        "table": table,
    }


def register_api(rt: Runtime) -> None:
    """Register ``create_topic`` (name, kind, description, settings JSON) for programs; call outside the tabs."""

    def create_topic_api(name: str, kind: str = "rag", description: str = "", settings_json: str = "{}") -> str:
        """Create a Topic.

        Args:
            name: the Topic's name.
            kind: rag or graphrag.
            description: what the Topic holds.
            settings_json: a JSON object of settings that differ from the defaults, e.g. {"chunk_size": 800}.

        Returns:
            A status line: "Created Topic ..." or "Not created: <reason>".
        """
        try:
            settings = json.loads(settings_json or "{}")
            if not isinstance(settings, dict):
                raise RagTopicsError("settings_json must be a JSON object")
            topic = create_topic(rt, name, kind=kind, description=description or "", settings=settings)
        except json.JSONDecodeError as exc:
            return f"Not created: settings_json is not valid JSON ({exc.msg})"
        except RagTopicsError as exc:
            return f"Not created: {md_text(str(exc))}"
        return f"Created Topic **{md_text(topic.name)}** ({topic.kind})."

    gr.api(create_topic_api, api_name="create_topic", api_visibility="undocumented")


def overrides_text(rt: Runtime) -> str:
    """The LLM Overrides help: each role and the model its endpoint asks by default."""
    defaults = ", ".join(f"{role}: `{rt.settings.endpoint(role).model}`" for role in ROLES)
    return (
        "A model per role for this Topic, asked on that role's endpoint (Admin → LLM Configuration); a role left out "
        f"uses the endpoint's model. Now: {defaults}."
    )


def save_overrides(rt: Runtime, topic_name: str, memory, models: str) -> str:
    """Store a Topic's Memory and its models per role; returns the status line (a bad value names the field)."""
    if not topic_name:
        return "Choose a Topic first."
    try:
        t = update_settings(rt, topic_name, {"memory": int(memory or 0), "role_models": models or ""})
    except (RagTopicsError, ValueError) as exc:
        return f"**Not saved:** {md_text(str(exc))}"
    chosen = display_value(t.settings.role_models) or "none (each role's own model)"
    return f"Topic **{md_text(t.name)}**: Memory {t.settings.memory}, models per role: {md_text(chosen)} (settings v{t.settings_version})."


def _llm_overrides(rt: Runtime) -> gr.Dropdown:
    """LLM Overrides of a Topic: Memory and a model per role."""
    with gr.Accordion("LLM Overrides", open=False) as box:
        about = gr.Markdown(elem_id="overrides-about")
        with gr.Row():
            topic = gr.Dropdown(choices=[], label="Topic", allow_custom_value=True, elem_id="overrides-topic")
            memory = gr.Number(label="Memory (earlier messages the model sees)", precision=0, elem_id="overrides-memory")
            models = gr.Textbox(
                label="Models per role (role=model, comma-separated)",
                placeholder="router=small-model",
                elem_id="overrides-models",
            )
        save = gr.Button("Save overrides", elem_id="overrides-save")
        status = gr.Markdown(elem_id="overrides-status")

    def current(topic_name):
        t = find_topic(rt, topic_name)
        if t is None:
            return gr.skip(), gr.skip()
        return t.settings.memory, display_value(t.settings.role_models)

    private: dict[str, Any] = {"api_visibility": "private"}
    box.expand(lambda: overrides_text(rt), None, about, **private)
    topic.change(current, topic, [memory, models], **private)
    save.click(lambda t, m, x: save_overrides(rt, t, m, x), [topic, memory, models], status, **private)
    return topic


def _delete_panel(rt: Runtime, table) -> dict:
    """Delete a Topic: the operator types its name to confirm."""
    with gr.Accordion("Delete a Topic", open=False):
        with gr.Row():
            topic = gr.Dropdown(choices=[], label="Topic", allow_custom_value=True, elem_id="delete-topic")
            typed = gr.Textbox(label="Type the Topic's name to confirm", elem_id="delete-topic-confirm")
        button = gr.Button("Delete Topic", variant="stop", elem_id="delete-topic-button")
        status = gr.Markdown(elem_id="delete-topic-status")

    def on_delete(topic_name, confirmation):
        if not topic_name:
            return "Choose a Topic to delete first.", gr.skip(), gr.skip()
        if (confirmation or "").strip() != topic_name:
            return (
                f"Type the Topic's name exactly, **{md_text(topic_name)}**, to confirm. Nothing was deleted.",
                gr.skip(),
                gr.skip(),
            )
        try:
            deletion = delete_topic(rt, topic_name)
        except RagTopicsError as exc:
            return f"**Not deleted:** {html.escape(str(exc))}", gr.skip(), gr.skip()
        what = removed_text(deletion.removed)
        notes = "".join(f"<br>{html.escape(note)}" for note in deletion.notes)
        return f"Deleted Topic **{md_text(topic_name)}** ({what}).{notes}", topics_table(rt), ""

    event = button.click(
        on_delete, [topic, typed], [status, table, typed], api_name="delete_topic", api_visibility="undocumented"
    )
    return {"event": event, "topic": topic}


SETTING_KEYS = sorted(RagTopicSettings.model_fields)
_TABLE_HEADERS = ["Setting", "Phase", "Value", "Default", "Values", "Description"]


def settings_table(rt: Runtime, topic_name: str) -> list[list[str]]:
    """Rows of the settings table of a Topic (key, phase, value, default, values, description); [] when none."""
    if not topic_name:
        return []
    try:
        rows = settings_rows(get_topic(rt, topic_name).settings)
    except RagTopicsError:
        return []
    return [[r.key, r.phase, r.value, r.default, r.values, r.description] for r in rows]


def phase_note(phase: str) -> str:
    """What changing a setting of this phase does to what is already stored (Markdown, with a leading space)."""
    if phase == "upload":
        return " *Applies to files uploaded afterwards; upload a file again to apply it to that file.*"
    if phase == "upload+chat":
        return " *Applies to the next question, and to files uploaded afterwards (upload again for existing ones).*"
    if phase == "communities":
        return " *Applies at the next community rebuild (Recompute Communities Now, or the Refresh Cycle).*"
    return " *Applies to the next question.*"


def _settings_editor(rt: Runtime, table) -> gr.Dropdown:
    """Change one setting of an existing Topic (every change is a new settings version).

    The form lists every setting of the chosen Topic's kind with its value, default and
    description, all taken from the settings model.
    """
    with gr.Accordion("Configure a Topic", open=False):
        with gr.Row():
            topic = gr.Dropdown(choices=[], label="Topic", allow_custom_value=True, elem_id="settings-topic")
            key = gr.Dropdown(SETTING_KEYS, value="retrieval_strategy", label="Setting")
            value = gr.Textbox(label="Value", elem_id="settings-value")
        about = gr.Markdown(elem_id="settings-about")
        with gr.Row():
            apply = gr.Button("Apply")
            reembed = gr.Button("Re-embed documents", variant="secondary")
        status = gr.Markdown()
        reference = gr.Dataframe(headers=_TABLE_HEADERS, value=[], interactive=False, label="Settings", wrap=True)

    def current(topic_name, setting):
        if not topic_name:
            return "", "", gr.skip()
        try:
            t = get_topic(rt, topic_name)
        except RagTopicsError as exc:
            return str(exc), "", gr.skip()
        keys = sorted(type(t.settings).model_fields)
        setting = setting if setting in keys else keys[0]
        row = next(r for r in settings_rows(t.settings) if r.key == setting)
        about_text = (
            f"**{row.key}** ({row.phase}; {html.escape(row.values)}; default `{html.escape(row.default)}`): "
            f"{html.escape(row.description)}"
        ) + phase_note(row.phase)
        return row.value, about_text, gr.update(choices=keys, value=setting)

    def change(topic_name, setting, raw):
        try:
            t = update_settings(rt, topic_name, {setting: json.loads(raw) if raw.strip().startswith(("{", "[")) else raw})
        except RagTopicsError as exc:
            return f"**Not changed:** {exc}", topics_table(rt)
        phase = phase_of(type(t.settings), setting)
        return (
            (
                f"Topic **{md_text(t.name)}**: `{setting}` = `{display_value(getattr(t.settings, setting))}` "
                f"(settings v{t.settings_version}).{phase_note(phase)}"
            ),
            topics_table(rt),
        )

    def start_reembed(topic_name):
        try:
            jobs = reembed_topic(rt, topic_name, enqueue_document)
        except RagTopicsError as exc:
            return f"**Not re-embedded:** {html.escape(str(exc))}"
        return f"Re-embedding {len(jobs)} document(s) with the configured embedding model; see the Upload tab."

    topic.change(current, [topic, key], [value, about, key], api_visibility="private")
    key.change(lambda name, setting: current(name, setting)[:2], [topic, key], [value, about], api_visibility="private")
    topic.change(lambda name: settings_table(rt, name), [topic], reference, api_visibility="private")
    apply.click(change, [topic, key, value], [status, table], api_name="change_setting", api_visibility="undocumented").then(
        lambda name: settings_table(rt, name), [topic], reference, api_visibility="private"
    )
    reembed.click(start_reembed, [topic], status, api_name="reembed_topic", api_visibility="undocumented")
    return topic
