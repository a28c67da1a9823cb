"""The RAG Topic kind: chunks in a vector (and keyword) index, one search way (SEARCH), no graph."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ragtopics.errors import ConfigurationError
from ragtopics.kinds.base import TopicKind
from ragtopics.settings.topic import RagTopicSettings, TopicSettings

if TYPE_CHECKING:
    from ragtopics.answer.context import Retriever, SearchProgress
    from ragtopics.prompts.templates import PromptTemplate
    from ragtopics.runtime import Runtime
    from ragtopics.topics.topics import Topic


class RagKind(TopicKind):
    """A RAG Topic: DIRECT, ATTACHMENT and SEARCH; every answer streams; small files share indexing jobs."""

    name: ClassVar[str] = "rag"
    label: ClassVar[str] = "RAG"
    settings_model: ClassVar[type[TopicSettings]] = RagTopicSettings
    routes: ClassVar[tuple[str, ...]] = ("DIRECT", "ATTACHMENT", "SEARCH")
    default_route: ClassVar[str] = "SEARCH"
    streamed_routes: ClassVar[frozenset[str]] = frozenset(routes)
    has_graph: ClassVar[bool] = False
    indexes_in_batches: ClassVar[bool] = True
    searches_in_thread: ClassVar[bool] = False
    fans_out_extraction: ClassVar[bool] = False

    def settings_of(self, topic: Topic) -> RagTopicSettings:
        """The Topic's settings as :class:`RagTopicSettings`.

        Raises:
            ConfigurationError: when they are of another model.
        """
        settings: RagTopicSettings = super().settings_of(topic)
        return settings

    def router_threshold(self, settings: TopicSettings) -> float:
        """Router Confidence Threshold."""
        if not isinstance(settings, RagTopicSettings):
            raise ConfigurationError(f"a RAG Topic has RagTopicSettings, not {type(settings).__name__}")
        return settings.router_confidence_threshold

    def direct_threshold(self, settings: TopicSettings) -> float | None:
        """None: DIRECT needs the Router Confidence Threshold too."""
        return None

    def allows_direct(self, settings: TopicSettings) -> bool:
        """Always: a RAG Topic may answer thanks and small talk without searching."""
        return True

    def retriever(
        self, rt: Runtime, topic: Topic, route: str, prompts: dict[str, PromptTemplate], progress: SearchProgress | None = None
    ) -> Retriever:
        """SEARCH: dense, keyword or hybrid search over the chunks, then the optional rerank."""
        # rag/ imports answer/, which looks kinds up: a module-level import here would close a cycle.
        from ragtopics.rag.retriever import ChunkRetriever

        return ChunkRetriever(rt, topic.id, self.settings_of(topic), prompts["rerank"])
