"""The Prompts tab (per Topic) and Admin → LLM Configuration (shared defaults, model endpoints)."""

from __future__ import annotations

import html

import gradio as gr

from ragtopics.settings.env import ROLES
from ragtopics.errors import RagTopicsError
from ragtopics.prompts.resolve import SHARED, resolve_prompts, set_prompt
from ragtopics.prompts.templates import DEFAULTS
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import get_topic, update_settings
from ragtopics.ui.common import topic_choices

PROMPT_NAMES = list(DEFAULTS)


def _scope(rt: Runtime, topic_name: str | None) -> str | None:
    return get_topic(rt, topic_name).id if topic_name else None


def prompt_text(rt: Runtime, topic_name: str | None, name: str) -> tuple[str, str]:
    """The prompt as it applies (Topic override, shared override or default) and its description."""
    template = resolve_prompts(rt, _scope(rt, topic_name))[name]
    variables = ", ".join("$" + v for v in sorted(DEFAULTS[name].variables())) or "none"
    return template.text, f"{template.description} Variables: {variables}."


def save_prompt(rt: Runtime, topic_name: str | None, name: str, text: str) -> str:
    """Store an edit (empty text resets to the default); returns a status line."""
    scope = _scope(rt, topic_name) if topic_name else SHARED
    try:
        set_prompt(rt, scope, name, text)
    except RagTopicsError as exc:
        return f"**Not saved:** {exc}"
    where = f"Topic **{html.escape(topic_name)}**" if topic_name else "all Topics"
    return f"Saved prompt `{name}` for {where}." if text.strip() else f"Prompt `{name}` reset for {where}."


def endpoints_table(rt: Runtime) -> list[list]:
    """Role → endpoint rows for Admin → LLM Configuration."""
    rows = []
    for role in (*ROLES, "embedding"):
        e = rt.settings.endpoint(role)
        rows.append([role, e.base_url or "in-process", e.model, "yes" if e.supports_tools else "no", "yes" if e.supports_images else "no"])
    return rows


def build(rt: Runtime) -> dict:
    """Lay out the Prompts and Admin tabs; returns the Prompts tab's Topic dropdown."""
    with gr.Tab("Prompts", id="prompts"):
        topic = gr.Dropdown(topic_choices(rt), label="Topic", allow_custom_value=True, elem_id="prompts-topic")
        name = gr.Dropdown(PROMPT_NAMES, value="system", label="Prompt")
        about = gr.Markdown()
        text = gr.Textbox(lines=8, label="Text (for this Topic; empty + Save resets to the shared text)")
        with gr.Row():
            save = gr.Button("Save", variant="primary")
            reset = gr.Button("Reset to shared")
        status = gr.Markdown()
        no_answer = gr.Textbox(label="No-answer response")
        save_no_answer = gr.Button("Save no-answer response")
    with gr.Tab("Admin", id="admin") as admin:
        gr.Markdown("### LLM Configuration\nShared prompt texts for every Topic, and the model endpoint of each role "
                    "(set through the environment, see `.env.example`).")  # fmt: skip
        shared_name = gr.Dropdown(PROMPT_NAMES, value="system", label="Prompt")
        shared_text = gr.Textbox(prompt_text(rt, None, "system")[0], lines=8,
                                 label="Shared text (empty + Save restores the built-in default)")  # fmt: skip
        shared_save = gr.Button("Save shared prompt", variant="primary")
        shared_status = gr.Markdown()
        gr.Dataframe(value=endpoints_table(rt), headers=["Role", "Endpoint", "Model", "Tools", "Pictures"],
                     interactive=False, label="Model endpoints")  # fmt: skip
        gr.Markdown("### Graph Databases\nFalkorDB servers a GraphRAG Topic can keep its graph in (its Graph "
                    "Database setting). `default` is the app's own Redis.")  # fmt: skip
        databases = gr.Dataframe(value=graph_databases_table(rt), headers=["Name", "URL"], interactive=False,
                                 label="Registered graph databases", elem_id="graph-databases")  # fmt: skip
        with gr.Row():
            db_name = gr.Textbox(label="Name", elem_id="graph-database-name")
            db_url = gr.Textbox(label="URL (redis://host:port)", elem_id="graph-database-url")
        with gr.Row():
            db_add = gr.Button("Register", elem_id="graph-database-add")
            db_remove = gr.Button("Remove", elem_id="graph-database-remove")
        db_status = gr.Markdown(elem_id="graph-database-status")

    def load(topic_name, prompt_name):
        if not topic_name:
            return "", "Choose a Topic.", ""
        body, desc = prompt_text(rt, topic_name, prompt_name)
        return body, desc, get_topic(rt, topic_name).settings.no_answer_response

    def store_no_answer(topic_name, value):
        if not topic_name:
            return "**Not saved:** choose a Topic first."
        if not (value or "").strip():
            return "**Not saved:** the no-answer response cannot be empty (it is what the chat shows when nothing is found)."
        try:
            update_settings(rt, topic_name, {"no_answer_response": value})
        except RagTopicsError as exc:
            return f"**Not saved:** {exc}"
        return "Saved the no-answer response."

    private = {"api_visibility": "private"}
    for trigger in (topic.change, name.change):
        trigger(load, [topic, name], [text, about, no_answer], **private)
    save.click(lambda t, n, x: save_prompt(rt, t, n, x), [topic, name, text], status, api_name="save_prompt", api_visibility="undocumented")
    reset.click(lambda t, n: save_prompt(rt, t, n, ""), [topic, name], status, **private).then(load, [topic, name], [text, about, no_answer], **private)
    save_no_answer.click(store_no_answer, [topic, no_answer], status, **private)
    shared_name.change(lambda n: prompt_text(rt, None, n)[0], shared_name, shared_text, **private)
    admin.select(lambda n: prompt_text(rt, None, n)[0], shared_name, shared_text, **private)  # always the stored text
    shared_save.click(lambda n, x: save_prompt(rt, None, n, x), [shared_name, shared_text], shared_status, **private)
    db_add.click(lambda n, u: change_graph_databases(rt, "add", n, u), [db_name, db_url], [databases, db_status], **private)
    db_remove.click(lambda n: change_graph_databases(rt, "remove", n, ""), [db_name], [databases, db_status], **private)
    admin.select(lambda: graph_databases_table(rt), None, databases, **private)
    return {"topic": topic}


def graph_databases_table(rt: Runtime) -> list[list[str]]:
    """Rows of Admin → Graph Databases: name and URL (password hidden)."""
    from ragtopics.graph.databases import list_graph_databases

    return [[d["name"], d["url"]] for d in list_graph_databases(rt)]


def change_graph_databases(rt: Runtime, action: str, name: str, url: str) -> tuple[list[list[str]], str]:
    """Register (``add``) or remove a graph database; returns the new table and a status line."""
    from ragtopics.graph.databases import register_graph_database, remove_graph_database

    name = (name or "").strip()
    try:
        if action == "add":
            register_graph_database(rt, name, (url or "").strip())
            message = f"Registered graph database **{name}**."
        else:
            remove_graph_database(rt, name)
            message = f"Removed graph database **{name}** (its graphs stay on that server)."
    except RagTopicsError as exc:
        message = f"**Not changed:** {exc}"
    return graph_databases_table(rt), message
