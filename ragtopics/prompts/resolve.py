"""Prompt overrides: shared defaults (Admin → LLM Configuration) and per-Topic edits (Prompts tab).

Resolution order for a Topic: its own override, then the shared override, then the
built-in default of :mod:`ragtopics.prompts.templates`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtopics.errors import NotFoundError
from ragtopics.prompts.templates import DEFAULTS, PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.storage.prompts import prompt_overrides, write_override

SHARED = "shared"


def resolve_prompts(rt: Runtime, topic_id: str | None = None) -> dict[str, PromptTemplate]:
    """Every named prompt as it applies to a Topic (or to all Topics when ``topic_id`` is None)."""
    scopes = [SHARED] + ([topic_id] if topic_id else [])
    overrides = prompt_overrides(rt.metadata, scopes)
    resolved: dict[str, PromptTemplate] = {}
    for name, default in DEFAULTS.items():
        text = overrides.get((topic_id, name)) if topic_id else None
        text = text if text is not None else overrides.get((SHARED, name))
        resolved[name] = default if text is None else PromptTemplate(name, text, default.description)
    return resolved


@dataclass(frozen=True, slots=True)
class IngestPrompts:
    """The prompts an upload uses, resolved once per ingest job for its Topic.

    Attributes:
        context_line: SEMANTIC chunking's context line per chunk.
        keywords: HYBRID retrieval's LLM keyword enrichment.
        narrate: Import Strategy NARRATE's rewrite of a record.
        describe_picture: Describe pictures' vision-model description.
    """

    context_line: PromptTemplate
    keywords: PromptTemplate
    narrate: PromptTemplate
    describe_picture: PromptTemplate


def resolve_ingest_prompts(rt: Runtime, topic_id: str) -> IngestPrompts:
    """The upload-time prompts as they apply to a Topic (its overrides, then the shared ones, then the defaults)."""
    prompts = resolve_prompts(rt, topic_id)
    return IngestPrompts(
        context_line=prompts["context_line"],
        keywords=prompts["keywords"],
        narrate=prompts["narrate"],
        describe_picture=prompts["describe_picture"],
    )


def set_prompt(rt: Runtime, scope: str, name: str, text: str) -> PromptTemplate:
    """Store an edited prompt for ``scope`` (``"shared"`` or a Topic id); an empty text resets it.

    Raises:
        NotFoundError: for an unknown prompt name.
        PromptTemplateError: when the text does not use exactly the default's variables.
    """
    default = DEFAULTS.get(name)
    if default is None:
        raise NotFoundError(f"no prompt called {name!r}; prompts: {', '.join(DEFAULTS)}")
    if not text.strip():
        write_override(rt.metadata, scope, name, None)
        return default
    template = default.with_text(text)  # checks the variables before anything is stored
    write_override(rt.metadata, scope, name, text)
    return template
