"""The Graph tab's "Correct the graph" panel: merge, split, rename, retype or delete an entity, and the list of corrections.

Its events need the operator role (``ROLE_OF_PAGE["graph_corrections"]``); the panel shows only to
operators and admins. Each correction changes the graph at once and is kept as a rule that every
later upload applies (:mod:`ragtopics.graph.corrections`). Programs call it as ``correct_graph``
(Topic, kind, name, value) with an operator's API token.
"""

from __future__ import annotations

import html
import logging

import gradio as gr

from ragtopics.errors import RagTopicsError
from ragtopics.graph.corrections import KINDS, correct, list_corrections
from ragtopics.kinds import kind_of
from ragtopics.runtime import Runtime
from ragtopics.ui import web
from ragtopics.ui.common import find_topic, md_text
from ragtopics.ui.graph_view import neighbourhood

log = logging.getLogger(__name__)

HEADERS = ["#", "Correction", "By", "When (UTC)"]
#: What the value box means for each kind of correction.
VALUE_LABELS = {
    "merge": "Merge into (entity)",
    "split": "Split off from (entity)",
    "rename": "New name",
    "retype": "New type",
    "delete": "(nothing needed)",
}
NAME_LABELS = {"split": "Alias to split off"}


def corrections_table(rt: Runtime, topic_name: str | None) -> list[list]:
    """Rows of a Topic's corrections, oldest first (none for an unknown or RAG Topic)."""
    topic = find_topic(rt, topic_name)
    if topic is None or not kind_of(topic).has_graph:
        return []
    return [
        [c.id, c.summary(), c.created_by or "(CLI)", f"{c.created_at:%Y-%m-%d %H:%M}" if c.created_at else ""]
        for c in list_corrections(rt, topic.id)
    ]


def apply_correction(
    rt: Runtime, topic_name: str | None, kind: str | None, name: str | None, value: str | None
) -> tuple[str, str]:
    """Make one correction for the console user; returns ``(status line, the entity to show now)``."""
    topic = find_topic(rt, topic_name)
    if topic is None:
        return "Choose a GraphRAG Topic first.", ""
    user = web.acting_user()
    by = user.username if user is not None else ""  # "local" in open mode (no admin yet), so the table never says CLI
    try:
        done = correct(rt, topic, kind or "", name or "", value or "", by=by)
    except RagTopicsError as exc:
        return f"**Not corrected:** {html.escape(str(exc), quote=False)}", ""
    shown = "" if done.kind == "delete" else done.names[0] if done.kind == "split" else done.target_name or done.name
    text = (
        f"Correction **#{done.id}**: {md_text(done.summary())}. Later uploads apply it too; communities are due for a recompute."
    )
    return text, shown


def build(rt: Runtime, graph: dict) -> dict:
    """Lay out the panel (inside the Graph tab) and wire it to the tab's Topic, entity and picture.

    Args:
        graph: the Graph tab's components (:func:`ragtopics.ui.graph_view.build`).

    Returns:
        ``{"box": ...}``: the panel, hidden until the load event shows it to an operator.
    """
    with gr.Accordion("Correct the graph", open=False, visible=False, elem_id="graph-corrections") as box:
        gr.Markdown(
            "Merge two entities, split an alias off into its own entity, rename an entity, change its type, or "
            "delete it. The graph changes at once, and the correction is kept as a rule that every later upload "
            "applies, so a re-upload does not undo it. A deleted entity stays deleted: later uploads of any file "
            "drop what names it."
        )
        with gr.Row():
            kind = gr.Radio(list(KINDS), value="merge", label="Correction", elem_id="graph-correction-kind")
            name = gr.Textbox(label="Entity", placeholder="a name, an alias or an id", elem_id="graph-correction-name")
            value = gr.Textbox(label=VALUE_LABELS["merge"], elem_id="graph-correction-value")
            apply = gr.Button("Apply correction", variant="primary", elem_id="graph-correction-apply")
        status = gr.Markdown(elem_id="graph-correction-status")
        table = gr.Dataframe(
            headers=HEADERS,
            interactive=False,
            wrap=True,
            label="Corrections (rules every upload applies)",
            elem_id="graph-corrections-table",
        )

    def on_kind(chosen):
        return gr.Textbox(label=NAME_LABELS.get(chosen, "Entity")), gr.Textbox(label=VALUE_LABELS.get(chosen, "Value"))

    def on_apply(topic_name, chosen, entity, new_value, depth):
        text, shown = apply_correction(rt, topic_name, chosen, entity, new_value)
        rows = corrections_table(rt, topic_name)
        if not shown:
            return text, rows, gr.skip(), gr.skip(), gr.skip()
        return (text, rows, shown, *neighbourhood(rt, topic_name, shown, depth))

    kind.change(on_kind, kind, [name, value], api_visibility="private")
    box.expand(lambda t: corrections_table(rt, t), graph["topic"], table, api_visibility="private")  # never a viewer's
    apply.click(
        on_apply,
        [graph["topic"], kind, name, value, graph["hops"]],
        [status, table, graph["name"], graph["picture"], graph["details"]],
        api_name="correct_graph",
        api_visibility="undocumented",
    )
    return {"box": box}
