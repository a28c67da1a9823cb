"""The Topic kind as one object: what a RAG and a GraphRAG Topic do differently, behind one interface.

The generic packages (``answer/``, ``ingest/``, ``documents/``, ``topics/``, ``worker/``, ``ui/``, ``api/``)
look a Topic's kind up (:func:`ragtopics.kinds.kind_of`) and call it, instead of testing the kind's name.
A kind owns:

- its settings model, and the thresholds the router reads from it;
- its ways (routes) in display order, the safe way taken when the router is unsure, and which ways
  stream their answer while it is written;
- its retriever factory, and whether a search runs in a thread of its own (to show its progress);
- its step of storing a version (:meth:`TopicKind.store_upload`: nothing for RAG, the graph share for
  GraphRAG), handed to the one owner of a version's stores (:mod:`ragtopics.documents.versions`);
- its delete steps (:meth:`TopicKind.document_delete_steps`, :meth:`TopicKind.topic_delete_steps`);
- what follows a change of its settings (a Refresh Cycle to schedule) and a re-embed (entity vectors).

The pattern is fast-graphrag's policy objects (``_policies/_base.py``): behaviour varies through an
object, not through branches spread over the callers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ragtopics.errors import ConfigurationError
from ragtopics.settings.topic import TopicSettings

if TYPE_CHECKING:
    from ragtopics.answer.context import Retriever, SearchProgress
    from ragtopics.ingest.pipeline import IngestResult, PreparedVersion
    from ragtopics.prompts.templates import PromptTemplate
    from ragtopics.runtime import Runtime
    from ragtopics.storage.locks import Fence
    from ragtopics.storage.metadata import DocumentRow
    from ragtopics.topics.topics import Topic
    from ragtopics.tracing.trace import Trace

#: ``report(phase, done, total)``: progress of an upload.
ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class KindDeleteStep:
    """A kind's own step of a delete sequence.

    Attributes:
        name: the step's name (unique in its sequence).
        run: the step; idempotent.
        before: the generic step it runs before (``remove_files``, ``drop_index``, ...).
    """

    name: str
    run: Callable[[Any], None]
    before: str


@dataclass(frozen=True, slots=True)
class GraphShare:
    """A version's share of the graph, planned by a GraphRAG kind under the Topic's graph write lock.

    Attributes:
        plan: the planned writes (a :class:`~ragtopics.graph.ingest.GraphPlan`).
        images: the Image nodes of the version's pictures (Picture in the graph), maybe empty.
        fence: the fence of the Topic's graph write lock, held while the version is stored.
    """

    plan: Any
    images: list = field(default_factory=list)
    fence: Fence | None = None


#: ``store(share)``: stores the version (the share is None for a kind without a graph); returns its result.
StoreFn = Callable[[GraphShare | None], "IngestResult"]


class TopicKind(ABC):
    """What one Topic kind does its own way; one instance per kind in :data:`ragtopics.kinds.KINDS`.

    Class attributes:
        name: the kind as stored with the Topic (``"rag"``, ``"graphrag"``).
        label: the kind as the console writes it (``"RAG"``, ``"GraphRAG"``).
        settings_model: the pydantic model of the kind's settings.
        routes: the kind's ways (route names) in display order; DIRECT and ATTACHMENT first.
        default_route: the way taken whenever the router is unsure, and after a DIRECT answer that
            needed the documents.
        streamed_routes: the ways whose answer streams while it is written; the others are written
            whole first and then shown word by word.
        has_graph: whether the Topic keeps a knowledge graph (Graph tab, graph costs, graph checks).
        indexes_in_batches: whether small files may share one indexing job (their chunks embedded together).
        searches_in_thread: whether a search runs in a thread of its own, so that its progress
            ("reading 8 summaries") shows before the first token and Stop ends its model calls.
        fans_out_extraction: whether an upload's per-chunk extraction continues in jobs of its own.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    settings_model: ClassVar[type[TopicSettings]]
    routes: ClassVar[tuple[str, ...]]
    default_route: ClassVar[str]
    streamed_routes: ClassVar[frozenset[str]]
    has_graph: ClassVar[bool]
    indexes_in_batches: ClassVar[bool]
    searches_in_thread: ClassVar[bool]
    fans_out_extraction: ClassVar[bool]

    def __repr__(self) -> str:
        return f"<{self.label} Topic kind>"

    # -- settings and routing ----------------------------------------------------------

    def settings_of(self, topic: Topic) -> Any:
        """The Topic's settings as this kind's model (typed reads instead of ``getattr``).

        Raises:
            ConfigurationError: when the stored settings are of another kind's model.
        """
        if not isinstance(topic.settings, self.settings_model):
            raise ConfigurationError(f"Topic {topic.name!r} is a {self.label} Topic but has {type(topic.settings).__name__}")
        return topic.settings

    @abstractmethod
    def router_threshold(self, settings: TopicSettings) -> float:
        """The confidence the router needs for a search way (a threshold of 0 takes every way it names)."""

    @abstractmethod
    def direct_threshold(self, settings: TopicSettings) -> float | None:
        """The confidence the router needs for DIRECT (None: the search ways' threshold)."""

    @abstractmethod
    def allows_direct(self, settings: TopicSettings) -> bool:
        """Whether the Topic may answer without searching (DIRECT)."""

    def route_threshold(self, settings: TopicSettings, route: str) -> float | None:
        """The confidence the router needed for ``route`` (a DEV report's explanation of a routed turn)."""
        direct = self.direct_threshold(settings) if route == "DIRECT" else None
        return direct if direct is not None else self.router_threshold(settings)

    def named_entities(
        self, rt: Runtime, topic: Topic, question: str, router_names: tuple[str, ...], trace: Trace
    ) -> tuple[str, ...]:
        """The things the question (or the router) names that the Topic knows by name; a routing signal.

        A kind without a graph knows no names: ``()``.
        """
        return ()

    # -- searching and answering ---------------------------------------------------------

    @abstractmethod
    def retriever(
        self, rt: Runtime, topic: Topic, route: str, prompts: dict[str, PromptTemplate], progress: SearchProgress | None = None
    ) -> Retriever:
        """The search way for ``route``.

        Args:
            route: one of the kind's search ways.
            prompts: the named prompts as they apply to the Topic.
            progress: where a long search reports its steps (and is told to stop).

        Raises:
            ConfigurationError: ``route`` is not a search way of the kind, or the settings are of another kind.
        """

    def streams_answer(self, route: str) -> bool:
        """Whether the answer of ``route`` streams while it is written (else it is written whole, then shown)."""
        return route in self.streamed_routes

    # -- storing a version -----------------------------------------------------------------

    def upload_work(self, extraction_calls: bool) -> str:
        """What the upload work per chunk is measured under in the cost figures (``rag``, ``graphrag-nlp``, ...)."""
        return self.name

    def store_upload(
        self,
        rt: Runtime,
        topic: Topic,
        version: PreparedVersion,
        store: StoreFn,
        report: ProgressFn,
        trace: Trace,
        *,
        graph_failures: dict[str, str] | None = None,
        extracted_elsewhere: set[str] | None = None,
    ) -> IngestResult:
        """Store an uploaded version: the kind's own step first, then ``store`` (the row and the chunk swap,
        through :func:`~ragtopics.documents.versions.store_version`).

        A kind without a graph has no step of its own: ``store(None)``.
        """
        return store(None)

    def fan_out(
        self, rt: Runtime, topic: Topic, doc: DocumentRow, job_id: str, version: PreparedVersion, trace: Trace
    ) -> IngestResult:
        """Park a prepared version and continue its per-chunk work in jobs of its own.

        Raises:
            ConfigurationError: the kind does not fan out (see :attr:`fans_out_extraction`).
        """
        raise ConfigurationError(f"a {self.label} Topic's upload does not fan out")

    # -- lifecycle -------------------------------------------------------------------------

    def document_delete_steps(self) -> list[KindDeleteStep]:
        """The kind's own steps of a document delete, each with the generic step it runs before."""
        return []

    def topic_delete_steps(self) -> list[KindDeleteStep]:
        """The kind's own steps of a Topic delete, each with the generic step it runs before."""
        return []

    def check_settings(self, rt: Runtime, before: Topic | None, model: TopicSettings, changed: set[str] | None) -> None:
        """Refuse settings that validate but do not fit the installation or the Topic's stored data.

        Args:
            before: the Topic as it is (None when it is being created).
            model: the new settings.
            changed: the keys changed (None when the Topic is being created).

        Raises:
            InvalidSettingError: naming the setting and why.
        """
        return  # a kind's settings table validates everything it has by default

    def settings_saved(self, rt: Runtime, topic: Topic, changed: set[str] | None) -> None:
        """Follow a change of the Topic's settings (``changed``: the keys; None for a new Topic)."""
        return  # nothing follows by default

    def reembed(self, rt: Runtime, topic: Topic) -> None:
        """Make the kind's own vectors again with the configured embedding model (the chunks are re-indexed apart)."""
        return  # by default a kind has no vectors but its chunks'
