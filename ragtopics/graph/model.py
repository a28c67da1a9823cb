"""The typed shapes of a GraphRAG Topic's knowledge graph, shared by extraction, deduplication, storage and search.

Extraction (LLM or NLP) returns a :class:`ChunkExtraction` per chunk; deduplication
maps extracted names onto graph :class:`Entity` ids and records each
:class:`MergeRecord`; the graph store keeps entities and relationships with the set
of chunk ids they came from (their provenance), so a document delete removes only
what nothing else supports.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from ragtopics.errors import ConfigurationError
from ragtopics.settings.topic import GraphRagTopicSettings


class ExtractedEntity(BaseModel):
    """An entity as one chunk's extraction names it."""

    name: str = Field(description="The entity's name as written in the text, e.g. 'Pump P-12' or 'Marie Curie'.")
    type: str = Field(description="A short upper-case type, e.g. PERSON, ORGANIZATION, PLACE, PRODUCT, PART, EVENT, CONCEPT.")
    description: str = Field("", description="One or two sentences on what the text says about the entity.")
    aliases: list[str] = Field(default_factory=list, description="Other names or abbreviations the text uses for it.")


class ExtractedRelationship(BaseModel):
    """A relationship between two entities of the same chunk's extraction."""

    source: str = Field(description="Name of the source entity (one of the listed entities).")
    target: str = Field(description="Name of the target entity (one of the listed entities).")
    description: str = Field("", description="How the two are related, in the text's words.")
    strength: float = Field(
        1.0, ge=0.0, le=10.0, description="How strongly the text ties them, 0-10 (co-occurrence count for NLP)."
    )


class ChunkExtraction(BaseModel):
    """The entities and relationships found in one chunk (one typed result for both extraction methods)."""

    entities: list[ExtractedEntity] = Field(default_factory=list)
    relationships: list[ExtractedRelationship] = Field(default_factory=list)


def normalize_name(name: str) -> str:
    """A name reduced for matching: NFKC, case-folded, punctuation and spaces removed (``"Pump P-12"`` → ``"pumpp12"``)."""
    text = unicodedata.normalize("NFKC", name).casefold()
    return re.sub(r"[\W_]+", "", text)


def entity_id_for(name: str, type_: str) -> str:
    """Stable id of a graph entity: ``ent-`` + 16 hex digits of SHA-1 over the normalised name and the type."""
    return "ent-" + hashlib.sha1(f"{normalize_name(name)}\0{type_.upper()}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Entity:
    """An entity of the graph.

    Attributes:
        id: :func:`entity_id_for` of its canonical name and type.
        name: the canonical name (the first name seen, or the one a merge kept).
        type: upper-case type.
        description: merged description (bounded in length by the writer).
        aliases: other names merged into it (surface forms, abbreviations).
        chunk_ids: the chunks that mention it (provenance). Written: all of them. Read from the graph: at
            most :data:`~ragtopics.graph.store.ENTITY_CHUNK_SAMPLE` of them (all when it has no more), so a
            read costs the same whatever the provenance; ``GraphStore.chunks_of`` reads more.
        chunk_count: how many chunks mention it, when read from the graph; 0 when written (see :attr:`mentions`).
    """

    id: str
    name: str
    type: str
    description: str = ""
    aliases: tuple[str, ...] = ()
    chunk_ids: frozenset[str] = field(default_factory=frozenset)
    chunk_count: int = 0

    @property
    def mentions(self) -> int:
        """How many chunks mention it: ``chunk_count`` when known, else the size of ``chunk_ids``."""
        return max(self.chunk_count, len(self.chunk_ids))


@dataclass(frozen=True, slots=True)
class Relationship:
    """An undirected-for-search, directed-as-written relationship between two entities.

    Attributes:
        source_id, target_id: entity ids.
        description: merged description.
        strength: summed strength over its mentions.
        chunk_ids: the chunks it was found in (provenance). Written: all of them. Read for a search
            (``GraphStore.neighbours``, paths): at most
            :data:`~ragtopics.graph.store.RELATIONSHIP_CHUNK_SAMPLE` of them, the first found, so a tie
            between two hubs costs a read as much as any other; ``GraphStore.all_relationships`` reads all.
        chunk_count: how many chunks it was found in, when read from the graph; 0 when written (see :attr:`mentions`).
    """

    source_id: str
    target_id: str
    description: str = ""
    strength: float = 1.0
    chunk_ids: frozenset[str] = field(default_factory=frozenset)
    chunk_count: int = 0

    @property
    def mentions(self) -> int:
        """How many chunks it was found in: ``chunk_count`` when known, else the size of ``chunk_ids``."""
        return max(self.chunk_count, len(self.chunk_ids))


@dataclass(frozen=True, slots=True)
class MergeRecord:
    """One deduplication decision that merged two names (kept for the DEV report).

    Attributes:
        kept: the name that stays (canonical).
        merged: the name merged into it.
        rule: ``same_name``, ``normalized``, ``abbreviation``, ``alias``, ``fuzzy`` or ``model``.
        score: the rule's score (1.0 for exact rules; rapidfuzz ratio / 100 for fuzzy).
    """

    kept: str
    merged: str
    rule: str
    score: float = 1.0


def graph_settings(
    topic: Any, why: str = "only GraphRAG Topics have a graph", error: type[ConfigurationError] = ConfigurationError
) -> GraphRagTopicSettings:
    """The settings of a Topic that keeps a graph, typed.

    Args:
        topic: the Topic (anything with ``name``, ``kind`` and ``settings``).
        why: the end of the message when the Topic keeps no graph.
        error: the error class raised then.

    Raises:
        ConfigurationError (or ``error``): the Topic's settings are not a GraphRAG Topic's:
        ``"Topic 'Plain' is a rag Topic; only GraphRAG Topics have a graph"``.
    """
    if not isinstance(topic.settings, GraphRagTopicSettings):
        raise error(f"Topic {topic.name!r} is a {topic.kind} Topic; {why}")
    return topic.settings
