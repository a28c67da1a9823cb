"""The GraphRAG Topic kind: chunks plus a knowledge graph of entities, relationships and communities.

Its ways are PATH, LOCAL, GLOBAL and HYBRID (HYBRID when the router is unsure); PATH and LOCAL answers
are written whole and then shown word by word, GLOBAL and HYBRID stream (the GraphRAG specification,
"After the search"). An upload extracts the graph of its chunks (in jobs of their own), then stores its
graph share under the Topic's graph write lock together with the chunks. A document delete removes the
document's share of the graph; a Topic delete drops the graph.

The graph package (and its NLP library) is imported inside the methods: it loads only for GraphRAG
Topics, and ``graph/`` imports generic packages that look kinds up, so a module-level import here would
also close a cycle.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, ClassVar

import redis

from ragtopics.errors import ConfigurationError, InvalidSettingError
from ragtopics.kinds.base import GraphShare, KindDeleteStep, ProgressFn, StoreFn, TopicKind
from ragtopics.settings.topic import GraphRagTopicSettings, TopicSettings
from ragtopics.storage.locks import LOCK_WAIT_S, WORKER_LOCK_WAIT_S, graph_write_lock

if TYPE_CHECKING:
    from ragtopics.answer.context import Retriever, SearchProgress
    from ragtopics.documents.delete import Deletion
    from ragtopics.ingest.pipeline import IngestResult, PreparedVersion
    from ragtopics.prompts.templates import PromptTemplate
    from ragtopics.runtime import Runtime
    from ragtopics.storage.metadata import DocumentRow
    from ragtopics.topics.delete import TopicDeletion
    from ragtopics.topics.topics import Topic
    from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)


def _graph(settings: TopicSettings) -> GraphRagTopicSettings:
    if not isinstance(settings, GraphRagTopicSettings):
        raise ConfigurationError(f"a GraphRAG Topic has GraphRagTopicSettings, not {type(settings).__name__}")
    return settings


class GraphRagKind(TopicKind):
    """A GraphRAG Topic: DIRECT, ATTACHMENT, PATH, LOCAL, GLOBAL and HYBRID over chunks and a graph."""

    name: ClassVar[str] = "graphrag"
    label: ClassVar[str] = "GraphRAG"
    settings_model: ClassVar[type[TopicSettings]] = GraphRagTopicSettings
    routes: ClassVar[tuple[str, ...]] = ("DIRECT", "ATTACHMENT", "PATH", "LOCAL", "GLOBAL", "HYBRID")
    default_route: ClassVar[str] = "HYBRID"
    streamed_routes: ClassVar[frozenset[str]] = frozenset({"DIRECT", "ATTACHMENT", "GLOBAL", "HYBRID"})
    has_graph: ClassVar[bool] = True
    indexes_in_batches: ClassVar[bool] = False
    searches_in_thread: ClassVar[bool] = True
    fans_out_extraction: ClassVar[bool] = True

    def settings_of(self, topic: Topic) -> GraphRagTopicSettings:
        """The Topic's settings as :class:`GraphRagTopicSettings`.

        Raises:
            ConfigurationError: when they are of another model.
        """
        settings: GraphRagTopicSettings = super().settings_of(topic)
        return settings

    # -- routing ---------------------------------------------------------------------------

    def router_threshold(self, settings: TopicSettings) -> float:
        """Confidence Threshold."""
        return _graph(settings).confidence_threshold

    def direct_threshold(self, settings: TopicSettings) -> float | None:
        """DIRECT Confidence Threshold."""
        return _graph(settings).direct_confidence_threshold

    def allows_direct(self, settings: TopicSettings) -> bool:
        """Answer Without Searching."""
        return _graph(settings).answer_without_searching

    def named_entities(
        self, rt: Runtime, topic: Topic, question: str, router_names: tuple[str, ...], trace: Trace
    ) -> tuple[str, ...]:
        """The entities of the Topic's graph the question (or the router) names, by name or alias; traced."""
        from ragtopics.graph.ingest import graph_store  # see the module docstring
        from ragtopics.graph.path import named_entities  # see the module docstring

        with trace.step("named_entities", router=list(router_names)) as ev:
            found = named_entities(graph_store(rt, topic), question, router_names)
            ev.data["found"] = list(found)
        return found

    # -- searching -------------------------------------------------------------------------

    def retriever(
        self, rt: Runtime, topic: Topic, route: str, prompts: dict[str, PromptTemplate], progress: SearchProgress | None = None
    ) -> Retriever:
        """PATH, LOCAL, GLOBAL or HYBRID.

        Raises:
            ConfigurationError: for another way, or settings of another kind.
        """
        cfg = self.settings_of(topic)
        # See the module docstring: the graph retrievers load only for a GraphRAG Topic's search.
        from ragtopics.graph.global_search import GlobalRetriever
        from ragtopics.graph.hybrid import HybridRetriever  # see the module docstring
        from ragtopics.graph.local import LocalRetriever  # see the module docstring
        from ragtopics.graph.path import PathRetriever  # see the module docstring

        if route == "PATH":
            return PathRetriever(rt, topic, cfg)
        if route == "LOCAL":
            return LocalRetriever(rt, topic, cfg)
        if route == "GLOBAL":
            return GlobalRetriever(rt, topic, cfg, prompts["global_map"], progress=progress)
        if route == "HYBRID":
            return HybridRetriever(rt, topic, cfg, prompts["global_map"], prompts["follow_up_plan"], progress=progress)
        raise ConfigurationError(f"{route} is not a search way of a GraphRAG Topic")

    # -- storing a version -----------------------------------------------------------------

    def upload_work(self, extraction_calls: bool) -> str:
        """``graphrag-llm`` when the extraction calls a model, else ``graphrag-nlp`` (their rates differ)."""
        return "graphrag-llm" if extraction_calls else "graphrag-nlp"

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
        """Extract the version's graph (no lock; cached extractions are reused), then, under the Topic's graph
        write lock, deduplicate it against the graph and store it with the chunks (``store``).

        Concurrent uploads of a Topic thus plan against each other's graph.
        """
        from ragtopics.graph.ingest import complete_plan, extract_graph  # see the module docstring

        records = version.records
        extracted = extract_graph(
            rt, topic, records, report, trace, known_failures=graph_failures, extracted_elsewhere=extracted_elsewhere
        )
        try:
            with contextlib.ExitStack() as held:
                with trace.step("graph_lock"):  # waiting for the uploads of the Topic before this one
                    graph_fence = held.enter_context(graph_write_lock(rt.redis, topic.id, wait_s=WORKER_LOCK_WAIT_S))
                plan = complete_plan(rt, topic, records, extracted, report, trace)
                return store(GraphShare(plan, self._images(rt, topic, version, plan, trace), graph_fence))
        finally:
            extracted.cancel()  # the lock was not had: the entity names' embedding stops (complete_plan stops it too)

    def _images(self, rt: Runtime, topic: Topic, version: PreparedVersion, plan, trace: Trace) -> list:
        """Picture in the graph: the Image nodes of the version's stored pictures (see :mod:`ragtopics.graph.pictures`)."""
        if self.settings_of(topic).picture_handling != "PICTURE_IN_GRAPH" or not version.pictures:
            return []
        from ragtopics.graph.pictures import link_images  # see the module docstring
        from ragtopics.prompts.resolve import resolve_prompts  # see the module docstring

        pngs = dict(zip((row.id for row in version.pictures), (png for _, png in version.picture_pngs), strict=True))
        pictures = {row.id: (row.caption or "", row.description or "", pngs.get(row.id)) for row in version.pictures}
        chunk_pictures = {r.chunk_id: r.pictures.split() for r in version.records if r.pictures}
        template = resolve_prompts(rt, topic.id)["picture_entities"]
        return link_images(rt, plan.entities, chunk_pictures, pictures, trace, template)

    def fan_out(
        self, rt: Runtime, topic: Topic, doc: DocumentRow, job_id: str, version: PreparedVersion, trace: Trace
    ) -> IngestResult:
        """Park the prepared version and extract its chunks in small jobs; a last job stores it
        (:func:`~ragtopics.graph.fanout.park_and_fan_out`)."""
        from ragtopics.graph.fanout import park_and_fan_out  # see the module docstring

        result: IngestResult = park_and_fan_out(rt, topic, doc, job_id, version, trace)
        return result

    # -- lifecycle -------------------------------------------------------------------------

    def document_delete_steps(self) -> list[KindDeleteStep]:
        """``remove_graph_share`` before ``remove_files``."""
        return [KindDeleteStep("remove_graph_share", _remove_graph_share, before="remove_files")]

    def topic_delete_steps(self) -> list[KindDeleteStep]:
        """``drop_graph`` before ``drop_index``."""
        return [KindDeleteStep("drop_graph", _drop_graph, before="drop_index")]

    def check_settings(self, rt: Runtime, before: Topic | None, model: TopicSettings, changed: set[str] | None) -> None:
        """Refuse a Graph Database that is not configured, and moving a graph that holds entities to another one.

        Raises:
            InvalidSettingError: naming ``graph_database`` and why.
        """
        if changed is not None and "graph_database" not in changed:
            return
        cfg = _graph(model)
        from ragtopics.graph.databases import check_graph_database  # see the module docstring

        if cfg.graph_database:
            check_graph_database(rt, cfg.graph_database)
        if before is None:
            return
        was, now = self.settings_of(before).graph_database or "default", cfg.graph_database or "default"
        if was == now:
            return
        from ragtopics.graph.ingest import graph_store  # see the module docstring

        entities = graph_store(rt, before).stats()["entities"]
        if entities:
            raise InvalidSettingError(
                f"graph_database: the graph of Topic {before.name!r} already holds {entities} entities in "
                f"{was!r}; choose the graph database before the first upload, or create a new Topic"
            )

    def settings_saved(self, rt: Runtime, topic: Topic, changed: set[str] | None) -> None:
        """(Re)schedule the Refresh Cycle of a new Topic, or when it changed; a queue that cannot be reached is
        logged (the worker schedules it at start)."""
        if changed is not None and "refresh_cycle" not in changed:
            return
        from ragtopics.graph.refresh import schedule_refresh  # see the module docstring

        try:
            schedule_refresh(rt, topic)
        except redis.RedisError as exc:
            log.warning("could not schedule the Refresh Cycle of Topic %s: %s", topic.name, exc)

    def reembed(self, rt: Runtime, topic: Topic) -> None:
        """Replace the entity vectors with the configured model's (each made of the entity's name).

        An entity's vector is made once (:func:`~ragtopics.graph.ingest.embed_entities`), so a model change
        would otherwise leave every entity with a vector of the old model, or of another dimension.
        """
        from ragtopics.graph.ingest import embed_entities, graph_store  # see the module docstring

        store = graph_store(rt, topic)
        if not store.exists():
            return
        removed = store.vectors.clear()
        embedded = embed_entities(rt, store, [e.id for e in store.all_entities()])
        log.info(
            "Topic %r: %d entity vectors replaced by %d made with %s", topic.name, removed, embedded, rt.gateway.embedder.model
        )


def _remove_graph_share(d: Deletion) -> None:
    """Remove the document's share of the graph; entities other documents also mention stay, with what those say.

    Removes the document's chunk ids from every entity's and relationship's provenance, deletes what is
    left without any, and rebuilds the description, aliases and strength of what stays from the chunks
    left (an entity keeps its vector, made of its name); then marks a community recompute as due.
    Counts ``entities`` and ``relationships`` removed, ``entities_kept`` and ``relationships_kept`` (rebuilt
    from the chunks left), and ``descriptions_changed`` (kept entities whose description lost text).

    Runs under the Topic's graph write lock, its writes fenced with it, as an upload's graph write does:
    the removal reads what the entities' remaining chunks say and writes it back, so an upload writing
    the same entities in between would lose its text, or plan against entities the removal deletes
    (and put back, if it then failed, what the removal took out).

    Raises:
        StoreUnavailableError: the graph write lock stayed busy for :data:`~ragtopics.storage.locks.LOCK_WAIT_S`
            (the document stays ``deleting``; deleting it again finishes the delete).
    """
    from ragtopics.graph.ingest import graph_store  # see the module docstring
    from ragtopics.graph.lifecycle import mark_recompute_due  # see the module docstring
    from ragtopics.topics.topics import get_topic  # topics/ looks kinds up: a module-level import would be a cycle

    topic = get_topic(d.rt, d.topic_id)
    if not graph_store(d.rt, topic).exists():
        return
    with graph_write_lock(d.rt.redis, d.topic_id, wait_s=LOCK_WAIT_S) as fence:
        store = graph_store(d.rt, topic).fence_writes(fence)
        report = store.remove_document(d.document.id)  # entities that stay keep their vectors (made of their names)
    d.count("entities", report.entities_removed)
    d.count("relationships", report.relationships_removed)
    d.count("entities_kept", report.entities_kept)
    d.count("relationships_kept", report.relationships_kept)
    d.count("descriptions_changed", len(report.rebuilt))
    mark_recompute_due(d.rt, d.topic_id, f"{d.document.file_name} was deleted")
    log.info("graph share of %s removed: %s", d.document.file_name, report)


def _drop_graph(t: TopicDeletion) -> None:
    """Delete the Topic's graph (its RediSearch indexes go with every other index named for the Topic)."""
    from ragtopics.graph.ingest import graph_store  # see the module docstring

    store = graph_store(t.rt, t.topic)
    if store.exists():
        t.count("graph_entities", store.stats().get("entities", 0))
        store.drop()
