"""The Topic kinds: :data:`KINDS` by name, :func:`kind_of` a Topic (see :mod:`ragtopics.kinds.base`)."""

from __future__ import annotations

from typing import Protocol

from ragtopics.errors import ConfigurationError
from ragtopics.kinds.base import GraphShare, KindDeleteStep, TopicKind
from ragtopics.kinds.graphrag import GraphRagKind
from ragtopics.kinds.rag import RagKind

#: Every Topic kind by the name stored with a Topic, in the order the console offers them.
KINDS: dict[str, TopicKind] = {kind.name: kind for kind in (RagKind(), GraphRagKind())}


class HasKind(Protocol):
    """Anything that names its Topic kind (a Topic, a Topic row)."""

    @property
    def kind(self) -> str: ...


def kind_named(name: str) -> TopicKind:
    """The Topic kind called ``name`` (``"rag"``, ``"graphrag"``).

    Raises:
        ConfigurationError: for an unknown kind, naming the known ones.
    """
    try:
        return KINDS[name]
    except KeyError:
        raise ConfigurationError(f"unknown Topic kind {name!r}; known kinds: {', '.join(KINDS)}") from None


def kind_of(topic: HasKind) -> TopicKind:
    """The kind of a Topic.

    Raises:
        ConfigurationError: when the Topic names an unknown kind.
    """
    return kind_named(topic.kind)


__all__ = ["KINDS", "GraphRagKind", "GraphShare", "HasKind", "KindDeleteStep", "RagKind", "TopicKind", "kind_named", "kind_of"]
