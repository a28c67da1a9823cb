"""The Topic kind as one object: lookup, routes and thresholds read from typed settings, retrievers,
the kind's step of storing a version, its delete steps and what follows a settings change, on real
Redis and FalkorDB, asserting on stored state."""

from __future__ import annotations

import pytest

from ragtopics.answer.context import RetrievalQuery
from ragtopics.answer.routing import default_route, routes_for
from ragtopics.documents.delete import DOCUMENT_DELETE_STEPS, delete_document, delete_steps
from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.errors import ConfigurationError, InvalidSettingError
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.lifecycle import recompute_due
from ragtopics.graph.refresh import next_refresh
from ragtopics.kinds import KINDS, GraphRagKind, RagKind, kind_named, kind_of
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.settings.topic import GraphRagTopicSettings, RagTopicSettings
from ragtopics.topics.delete import TOPIC_DELETE_STEPS, delete_topic
from ragtopics.topics.topics import create_topic, get_topic, reembed_topic, update_settings
from ragtopics.tracing.trace import Trace

NLP = {"graph_extraction_method": "NLP", "chunk_size": 120, "chunk_overlap": 0}
CURIE = (
    "Marie Curie was a physicist who worked in Paris at the University of Paris.\n\n"
    "Pierre Curie shared the Nobel Prize in Physics with Marie Curie and Henri Becquerel."
)
EINSTEIN = "Albert Einstein visited Paris in 1922 and lectured at the Collège de France."


def test_every_kind_is_found_by_name_and_by_topic_with_its_own_settings_model_and_ways(rt):
    plain = create_topic(rt, "Plain")
    graph = create_topic(rt, "Graph", kind="graphrag", settings=NLP)

    assert list(KINDS) == ["rag", "graphrag"]
    assert isinstance(kind_of(plain), RagKind) and isinstance(kind_of(graph), GraphRagKind)
    assert kind_of(get_topic(rt, "Graph")) is KINDS["graphrag"] is kind_named("graphrag")
    for topic in (plain, graph):
        kind = kind_of(topic)
        assert type(topic.settings) is kind.settings_model
        assert tuple(r.value for r in routes_for(topic.kind)) == kind.routes
        assert default_route(topic.kind).value == kind.default_route == kind.routes[-1]
    with pytest.raises(ConfigurationError, match="unknown Topic kind 'wiki'; known kinds: rag, graphrag"):
        kind_named("wiki")


def test_thresholds_and_direct_answers_come_from_the_kinds_typed_settings(rt):
    plain = create_topic(rt, "Plain", settings={"router_confidence_threshold": 0.3})
    graph = create_topic(
        rt,
        "Graph",
        kind="graphrag",
        settings={"confidence_threshold": 0.4, "direct_confidence_threshold": 0.9, "answer_without_searching": False},
    )
    rag, graphrag = kind_of(plain), kind_of(graph)

    assert (rag.router_threshold(plain.settings), rag.direct_threshold(plain.settings), rag.allows_direct(plain.settings)) == (
        0.3,
        None,
        True,
    )
    assert rag.route_threshold(plain.settings, "DIRECT") == rag.route_threshold(plain.settings, "SEARCH") == 0.3
    assert graphrag.router_threshold(graph.settings) == 0.4 and graphrag.allows_direct(graph.settings) is False
    assert graphrag.route_threshold(graph.settings, "DIRECT") == 0.9 and graphrag.route_threshold(graph.settings, "LOCAL") == 0.4
    with pytest.raises(ConfigurationError, match="RagTopicSettings"):
        rag.router_threshold(graph.settings)
    with pytest.raises(ConfigurationError, match="is a GraphRAG Topic but has RagTopicSettings"):
        graphrag.settings_of(plain)
    assert isinstance(graphrag.settings_of(graph), GraphRagTopicSettings) and isinstance(rag.settings_of(plain), RagTopicSettings)


def test_each_kind_makes_the_retriever_of_its_ways_and_says_which_answers_stream(rt, run_jobs):
    plain = create_topic(rt, "Plain", settings={"min_similarity_score": 0})
    graph = create_topic(rt, "Graph", kind="graphrag", settings=NLP)
    upload_file(rt, plain, "curie.txt", CURIE.encode())
    run_jobs()

    found = (
        kind_of(plain)
        .retriever(rt, plain, "SEARCH", resolve_prompts(rt, plain.id))
        .retrieve(RetrievalQuery("Where did Marie Curie work?"), Trace("chat", "q"))
    )
    assert found.route == "SEARCH" and found.items and found.items[0].file_names == ["curie.txt"]
    prompts = resolve_prompts(rt, graph.id)
    made = {
        route: type(kind_of(graph).retriever(rt, graph, route, prompts)).__name__
        for route in ("PATH", "LOCAL", "GLOBAL", "HYBRID")
    }
    assert made == {"PATH": "PathRetriever", "LOCAL": "LocalRetriever", "GLOBAL": "GlobalRetriever", "HYBRID": "HybridRetriever"}
    with pytest.raises(ConfigurationError, match="SEARCH is not a search way of a GraphRAG Topic"):
        kind_of(graph).retriever(rt, graph, "SEARCH", prompts)
    assert kind_of(plain).streams_answer("SEARCH") and not kind_of(plain).searches_in_thread
    assert [r for r in ("PATH", "LOCAL", "GLOBAL", "HYBRID") if kind_of(graph).streams_answer(r)] == ["GLOBAL", "HYBRID"]


def test_only_a_graph_kind_knows_the_names_a_question_holds(rt, run_jobs):
    plain = create_topic(rt, "Plain")
    graph = create_topic(rt, "Graph", kind="graphrag", settings=NLP)
    upload_file(rt, plain, "curie.txt", CURIE.encode())
    upload_file(rt, graph, "curie.txt", CURIE.encode())
    run_jobs()
    trace = Trace("chat", "q")

    assert kind_of(plain).named_entities(rt, plain, "Who was Marie Curie?", (), trace) == ()
    assert "Marie Curie" in kind_of(graph).named_entities(rt, graph, "Who was Marie Curie?", (), trace)
    assert [e.step for e in trace.events] == ["named_entities"]  # traced once, by the kind that looked


def test_a_graph_kind_stores_its_share_of_the_graph_with_the_version_and_a_rag_kind_stores_chunks_only(rt, run_jobs):
    plain = create_topic(rt, "Plain")
    graph = create_topic(rt, "Graph", kind="graphrag", settings=NLP)
    rag_doc = upload_file(rt, plain, "curie.txt", CURIE.encode())
    graph_doc = upload_file(rt, graph, "curie.txt", CURIE.encode())
    run_jobs()

    rag_row, graph_row = get_document(rt, rag_doc.id), get_document(rt, graph_doc.id)
    assert rag_row.status == graph_row.status == "indexed"
    assert "graph" not in rag_row.indexed_with and graph_row.indexed_with["graph"]["entities"] > 0
    store = graph_store(rt, graph)
    assert set(store.document_chunk_ids(graph_doc.id)) == set(rt.chunk_index(graph.id).document_chunk_ids(graph_doc.id))
    assert recompute_due(rt, graph.id) == "curie.txt was uploaded"
    assert not graph_store(rt, plain).exists()  # nothing of a graph for a RAG Topic


def test_delete_steps_are_the_kinds_explicit_steps_not_an_import_side_effect(rt, run_jobs):
    import ragtopics.kinds.graphrag  # noqa: F401 - importing the kind adds nothing to the generic sequences

    assert [n for n, _ in DOCUMENT_DELETE_STEPS] == ["remove_chunks", "cancel_job", "remove_traces", "remove_files"]
    assert "drop_graph" not in [n for n, _ in TOPIC_DELETE_STEPS]
    graph_steps = [
        n for n, _ in delete_steps(DOCUMENT_DELETE_STEPS, kind_of(create_topic(rt, "G", kind="graphrag")).document_delete_steps())
    ]
    assert graph_steps == ["remove_chunks", "cancel_job", "remove_traces", "remove_graph_share", "remove_files"]
    assert delete_steps(DOCUMENT_DELETE_STEPS, RagKind().document_delete_steps()) == DOCUMENT_DELETE_STEPS


def test_a_document_delete_runs_the_graph_kinds_step_and_a_topic_delete_drops_the_graph(rt, run_jobs):
    plain = create_topic(rt, "Plain")
    graph = create_topic(rt, "Graph", kind="graphrag", settings=NLP)
    for topic in (plain, graph):
        upload_file(rt, topic, "curie.txt", CURIE.encode())
        upload_file(rt, topic, "einstein.txt", EINSTEIN.encode())
    run_jobs()
    entities = graph_store(rt, graph).stats()["entities"]

    rag_removed = delete_document(rt, plain, "einstein.txt")
    graph_removed = delete_document(rt, graph, "einstein.txt")
    assert rag_removed["chunks"] >= 1 and "entities" not in rag_removed
    assert graph_removed["chunks"] >= 1 and graph_removed["entities"] >= 1
    assert graph_store(rt, graph).stats()["entities"] == entities - graph_removed["entities"]
    assert recompute_due(rt, graph.id).startswith("einstein.txt was deleted")

    chunks = rt.chunk_index(graph.id).count()
    deletion = delete_topic(rt, "Graph")
    assert deletion.removed["chunks"] == chunks and deletion.removed["graph_entities"] == entities - graph_removed["entities"]
    assert not graph_store(rt, graph).exists()
    names = {n.decode() if isinstance(n, bytes) else n for n in rt.redis.execute_command("FT._LIST")}
    assert not any(n.startswith(f"rt-{graph.id}-") for n in names) and f"rt-{plain.id}-chunks" in names
    assert "graph_entities" not in delete_topic(rt, "Plain").removed


def test_settings_changes_follow_the_kind_refresh_cycle_and_graph_database(rt, run_jobs):
    graph = create_topic(rt, "Graph", kind="graphrag", settings={**NLP, "refresh_cycle": "1h"})
    plain = create_topic(rt, "Plain")
    assert next_refresh(rt, graph.id) is not None and next_refresh(rt, plain.id) is None

    update_settings(rt, "Graph", {"refresh_cycle": "off"})
    assert next_refresh(rt, graph.id) is None
    with pytest.raises(InvalidSettingError, match="graph_database"):
        update_settings(rt, "Graph", {"graph_database": "nowhere"})
    assert get_topic(rt, "Graph").settings.graph_database == ""  # nothing stored


def test_a_reembed_makes_the_graph_kinds_entity_vectors_again(rt, run_jobs):
    graph = create_topic(rt, "Graph", kind="graphrag", settings=NLP)
    upload_file(rt, graph, "curie.txt", CURIE.encode())
    run_jobs()
    store = graph_store(rt, graph)
    ids = [e.id for e in store.all_entities()]
    store.vectors.delete(ids[:1])  # as if made by another model: the re-embed makes every vector again
    assert store.vectors.missing(ids) == set(ids[:1])

    jobs = reembed_topic(rt, "Graph", lambda rt_, row: "job")
    assert jobs == ["job"] and rt.chunk_index(graph.id).count() == 0
    assert ids and store.vectors.missing(ids) == set()
