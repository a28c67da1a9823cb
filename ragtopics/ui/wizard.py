"""The Create-a-Topic wizard: the specification's steps, every field built from the settings model.

Each field's label says its default; its help line is the setting's one-line description and
the values it accepts, both taken from :mod:`ragtopics.settings.topic`, so the wizard, the
CLI and ``docs/settings.md`` never disagree.

Steps (:data:`STEPS`): 1 name, kind, description and Custom System Prompt; 2 files and
chunking (File Types as groups that expand to single types, Import Strategy, chunking,
Docling); 3 the graph (GraphRAG: extraction method, Picture Handling, Refresh Cycle,
Resolution, ...); 4 search and answers (Vector Settings, router, search settings).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any, get_origin

import gradio as gr
from pydantic import BaseModel

from ragtopics.errors import RagTopicsError
from ragtopics.kinds import KINDS as TOPIC_KINDS
from ragtopics.runtime import Runtime
from ragtopics.settings.docs import describe_default, describe_type
from ragtopics.settings.topic import SETTINGS_MODELS, RagTopicSettings, phase_of
from ragtopics.text.file_types import DOCUMENT_TYPES, IMAGE_TYPES, STRUCTURED_TYPES, TEXT_EXTENSIONS
from ragtopics.topics.topics import create_topic
from ragtopics.ui.common import md_text

#: File Types, grouped the way people think of them; each group expands to its single types.
FILE_TYPE_GROUPS: dict[str, list[str]] = {
    "Documents": sorted(DOCUMENT_TYPES),
    "Text and code": sorted(TEXT_EXTENSIONS),
    "Structured data": sorted(STRUCTURED_TYPES),
    "Pictures": sorted(IMAGE_TYPES),
}
KINDS = {kind.label: kind.name for kind in TOPIC_KINDS.values()}
#: The kind the wizard starts with (its fields show first).
FIRST_KIND = next(iter(TOPIC_KINDS))
#: The wizard's steps after step 1, per kind: (title, setting keys). file_types is drawn as groups.
STEPS: dict[str, list[tuple[str, list[str]]]] = {
    "rag": [
        (
            "Files and chunking",
            [
                "max_file_size_mb",
                "import_strategy",
                "chunking_strategy",
                "chunk_size",
                "chunk_overlap",
                "docling_server",
                "docling_settings",
                "describe_pictures",
                "store_pictures",
            ],
        ),
        ("Graph", []),
        (
            "Search and answers",
            [
                "retrieval_strategy",
                "keyword_enrichment",
                "rrf_k",
                "top_k_results",
                "min_similarity_score",
                "follow_file_mentions",
                "reranking_strategy",
                "route_before_retrieval",
                "router_method",
                "router_confidence_threshold",
                "answer_mode",
                "memory",
                "no_answer_response",
                "show_pictures",
                "chat_attachment_types",
                "largest_chat_attachment_mb",
                "mcp_interfaces",
                "role_models",
            ],
        ),
    ],
    "graphrag": [
        ("Files and chunking", ["max_file_size_mb", "chunk_size", "chunk_overlap", "docling_server", "docling_settings"]),
        (
            "Graph",
            [
                "graph_extraction_method",
                "picture_handling",
                "refresh_cycle",
                "resolution",
                "collection_name",
                "graph_database",
                "local_keyword_search",
                "global_keyword_search",
            ],
        ),
        (
            "Search and answers",
            [
                "route_before_retrieval",
                "router_method",
                "confidence_threshold",
                "direct_confidence_threshold",
                "answer_without_searching",
                "path_max_hops",
                "seed_strategy",
                "top_k_nodes",
                "min_similarity_score",
                "hop_depth",
                "max_subgraph_nodes",
                "max_cited_chunks",
                "top_k_seed_chunks",
                "top_k_unlinked_chunks",
                "follow_file_mentions",
                "top_k_reports",
                "max_follow_up_rounds",
                "max_follow_up_questions",
                "answer_mode",
                "memory",
                "no_answer_response",
                "chat_attachment_types",
                "largest_chat_attachment_mb",
                "mcp_interfaces",
                "role_models",
            ],
        ),
    ],
}
#: Keys of step 1 and the file-type groups, drawn by hand.
FIXED_KEYS = ("custom_system_prompt", "file_types")
#: How a few keys read in the console (the rest: words of the key, capitalised).
LABELS = {
    "top_k_results": "Top-K Results",
    "min_similarity_score": "Min. Similarity Score",
    "rrf_k": "RRF k",
    "mcp_interfaces": "MCP Interfaces",
    "max_file_size_mb": "Max. File Size (MB)",
    "top_k_nodes": "Top-K Nodes",
    "largest_chat_attachment_mb": "Largest Chat Attachment (MB)",
    "top_k_reports": "Top-K Reports",
    "top_k_seed_chunks": "Top-K Seed Chunks",
    "top_k_unlinked_chunks": "Top-K Unlinked Chunks",
    "path_max_hops": "PATH Max. Hops",
    "chunk_size": "Chunk Size (characters)",
    "chunk_overlap": "Chunk Overlap (characters)",
    "docling_settings": "Docling Settings (JSON)",
    "role_models": "LLM Overrides (role=model, …)",
}


def label_of(key: str) -> str:
    """The console's name for a setting: ``top_k_results`` → ``Top-K Results``."""
    return LABELS.get(key) or " ".join(w.capitalize() for w in key.split("_"))


@dataclass(frozen=True)
class Field:
    """One wizard field: the setting it edits and the component that edits it."""

    kind: str
    key: str
    component: gr.components.Component


def field_component(kind: str, key: str, *, visible: bool = True) -> gr.components.Component:
    """A component for one setting of a Topic kind: its default filled in, its description and values as help."""
    model = SETTINGS_MODELS[kind]
    info = model.model_fields[key]
    default = model().__getattribute__(key)
    label = f"{label_of(key)} · default {describe_default(info)}"
    help_text = f"{info.description} Values: {describe_type(info)}. Applies at {phase_of(model, key).replace('+', ' and ')}."
    common: dict[str, Any] = {
        "label": label,
        "info": help_text,
        "elem_id": f"wizard-{kind}-{key}".replace("_", "-"),
        "visible": visible,
    }
    annotation = info.annotation
    if isinstance(default, Enum):
        return gr.Dropdown([m.value for m in type(default)], value=default.value, **common)
    if isinstance(default, bool):
        return gr.Checkbox(value=default, **common)
    if isinstance(default, (int, float)):
        # No minimum/maximum on the component: Gradio would refuse a value out of range with a message that
        # names no field. The settings model refuses it instead, naming the field and its range.
        return gr.Number(value=default, precision=0 if isinstance(default, int) else None, **common)
    if isinstance(default, BaseModel):
        return gr.Textbox(value=default.model_dump_json(), **common)
    if isinstance(default, dict):
        return gr.Textbox(value=", ".join(f"{k}={v}" for k, v in default.items()), placeholder="router=small-model", **common)
    if isinstance(default, list) or get_origin(annotation) is list:
        return gr.Textbox(value=", ".join(str(v) for v in default), **common)
    return gr.Textbox(value=str(default), lines=2 if len(str(default)) > 60 else 1, **common)


def read_value(kind: str, key: str, raw: Any) -> Any:
    """A component's value as the settings model takes it.

    Raises:
        RagTopicsError: a JSON field that is not JSON, named by its label.
    """
    default = getattr(SETTINGS_MODELS[kind](), key)
    if isinstance(default, BaseModel):
        try:
            return json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise RagTopicsError(f"{label_of(key)} ({key}): not valid JSON ({exc.msg})") from exc
    if isinstance(default, list):
        return [part.strip() for part in str(raw or "").split(",") if part.strip()]
    if isinstance(default, int) and not isinstance(default, bool) and isinstance(raw, float) and raw.is_integer():
        return int(raw)
    return raw


def changed_settings(kind: str, values: dict[str, Any]) -> dict[str, Any]:
    """The settings among ``values`` (key → component value) that differ from the kind's defaults."""
    defaults = SETTINGS_MODELS[kind]()
    out = {}
    for key, raw in values.items():
        value = read_value(kind, key, raw)
        default = getattr(defaults, key)
        plain = (
            default.value if isinstance(default, Enum) else default.model_dump() if isinstance(default, BaseModel) else default
        )
        if value != plain:
            out[key] = value
    return out


def file_types_of(groups: list[list[str] | None]) -> list[str]:
    """The union of the single types chosen in each group, sorted."""
    return sorted({t for chosen in groups for t in (chosen or [])})


def create_from_wizard(
    rt: Runtime,
    kind_label: str,
    name: str,
    description: str,
    system_prompt: str,
    file_groups: list[list[str] | None],
    values: dict[str, Any],
) -> str:
    """Create the Topic the wizard describes; returns the status line (what went wrong names the field).

    Args:
        kind_label: ``RAG`` or ``GraphRAG``.
        file_groups: the chosen single types of each :data:`FILE_TYPE_GROUPS` group, in order.
        values: setting key → component value, for the chosen kind's fields.
    """
    kind = KINDS.get(kind_label)
    if kind is None:
        return f"**Not created:** Kind must be one of {', '.join(KINDS)}."
    try:
        settings = changed_settings(kind, values)
        settings["file_types"] = file_types_of(file_groups)
        if system_prompt:
            settings["custom_system_prompt"] = system_prompt
        topic = create_topic(rt, name or "", kind=kind, description=description or "", settings=settings)
    except RagTopicsError as exc:
        return f"**Not created:** {md_text(str(exc))}"
    return (
        f"Created {kind_label} Topic **{md_text(topic.name)}** ({len(topic.settings.file_types)} file types). "
        "Upload files on the Upload tab."
    )


def build(rt: Runtime) -> dict:
    """Lay out the wizard; returns ``{"create": event, "status", "name", "fields", "inputs"}``."""
    default_types = set(RagTopicSettings().file_types)
    fields: list[Field] = []
    with gr.Walkthrough(selected=1, elem_id="wizard") as walk:
        with gr.Step("1 · Name", id=1):
            kind = gr.Radio(
                list(KINDS),
                value=TOPIC_KINDS[FIRST_KIND].label,
                label="Kind",
                elem_id="wizard-kind",
                info="RAG: chunks, vectors and keywords. GraphRAG: also a knowledge graph with communities, "
                "and a router that picks the way per question.",
            )
            with gr.Row():
                name = gr.Textbox(label="Name", placeholder="e.g. Service manuals", elem_id="wizard-name")
                description = gr.Textbox(label="Description", info="What the Topic holds; shown to agents over MCP.")
            system_prompt = gr.Textbox(
                label="Custom System Prompt · default empty",
                lines=2,
                elem_id="wizard-prompt",
                info=RagTopicSettings.model_fields["custom_system_prompt"].description,
            )
            next1 = gr.Button("Next: files and chunking", elem_id="wizard-next-1")
        with gr.Step("2 · Files and chunking", id=2):
            gr.Markdown(
                "**File Types** · a file of any other type is refused at upload. Tick a group, or open it for single types."
            )
            groups = gr.CheckboxGroup(
                list(FILE_TYPE_GROUPS),
                label="Groups",
                elem_id="wizard-type-groups",
                value=[g for g, types in FILE_TYPE_GROUPS.items() if set(types) <= default_types],
            )
            singles = []
            for group, types in FILE_TYPE_GROUPS.items():
                with gr.Accordion(f"{group} ({len(types)} types)", open=False):
                    singles.append(
                        gr.CheckboxGroup(
                            types,
                            value=[t for t in types if t in default_types],
                            show_label=False,
                            elem_id=f"wizard-types-{group.split()[0].lower()}",
                        )
                    )
            fields += _kind_fields(0)
            with gr.Row():
                back2 = gr.Button("Back", elem_id="wizard-back-2")
                next2 = gr.Button("Next", elem_id="wizard-next-2")
        with gr.Step("3 · Graph", id=3):
            fields += _kind_fields(1)
            with gr.Row():
                back3 = gr.Button("Back", elem_id="wizard-back-3")
                next3 = gr.Button("Next", elem_id="wizard-next-3")
        with gr.Step("4 · Search", id=4):
            fields += _kind_fields(2)
            back4 = gr.Button("Back", elem_id="wizard-back-4")
    create = gr.Button("Create Topic", variant="primary", elem_id="wizard-create")
    status = gr.Markdown(elem_id="topic-status")

    settings_fields = [f for f in fields if f.key]
    per_kind = {name: [f.component for f in fields if f.kind == name] for name in TOPIC_KINDS}
    private: dict[str, Any] = {"api_visibility": "private"}

    def show_kind(label):
        shown = KINDS.get(label)
        return [gr.update(visible=name == shown) for name, components in per_kind.items() for _ in components]

    kind.change(show_kind, kind, [c for components in per_kind.values() for c in components], **private)
    for button, step in ((next1, 2), (back2, 1), (next2, 3), (back3, 2), (next3, 4), (back4, 3)):
        button.click(lambda s=step: (gr.Walkthrough(selected=s), ""), None, [walk, status], **private)  # no stale message
    groups.input(
        lambda chosen: [list(types) if g in (chosen or []) else [] for g, types in FILE_TYPE_GROUPS.items()],
        groups,
        singles,
        **private,
    )
    n_groups = len(singles)

    def on_create(kind_label, name_value, description_value, prompt_value, *rest):
        chosen_groups, raw = list(rest[:n_groups]), rest[n_groups:]
        wanted = KINDS.get(kind_label, FIRST_KIND)
        values = {f.key: v for f, v in zip(settings_fields, raw) if f.kind == wanted}
        status_line = create_from_wizard(rt, kind_label, name_value, description_value, prompt_value, chosen_groups, values)
        created = status_line.startswith("Created")
        return status_line, "" if created else gr.skip()  # a refused name stays, to be corrected

    inputs = [kind, name, description, system_prompt, *singles, *(f.component for f in settings_fields)]
    create.click(lambda: "", None, status, **private)  # an earlier attempt's message goes, even if the browser refuses a value
    event = create.click(on_create, inputs, [status, name], **private)
    return {"create": event, "status": status, "name": name, "kind": kind, "fields": settings_fields}


def _kind_fields(step_index: int) -> list[Field]:
    """The fields of one step for every kind; only the first kind's show at first."""
    made = []
    for kind in TOPIC_KINDS:
        keys = STEPS[kind][step_index][1]
        first = kind == FIRST_KIND
        if not keys:
            made.append(
                Field(
                    kind,
                    "",
                    gr.Markdown(f"A {TOPIC_KINDS[kind].label} Topic has no knowledge graph: nothing to set here.", visible=first),
                )
            )
            continue
        for key in keys:
            component = field_component(kind, key, visible=first)
            made.append(Field(kind, key, component))
    return made
