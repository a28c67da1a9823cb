"""Concurrent uploads into one GraphRAG Topic, and a writer that lost its lock.

Two uploads naming the same organisations under different names ("International Business Machines"
and "IBM") plan their deduplication under the Topic's graph write lock: run at once, they build the
graph one of the two sequential orders builds, with no entity stored twice. Two graph imports do the
same. A holder whose lock was taken over writes nothing: not the graph, not the chunks.
"""

from __future__ import annotations

import json
import threading

import pytest

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.errors import StoreUnavailableError
from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
from ragtopics.graph.ingest import graph_store
from ragtopics.ingest.pipeline import ingest_document
from ragtopics.storage import documents as document_store
from ragtopics.storage.locks import LockLostError, document_lock, graph_lock_key, graph_write_lock, lock_key
from ragtopics.topics.topics import create_topic
from tests.graph.test_upload import CURIE, NLP

FILES = {
    "long names.txt": (
        "International Business Machines opened a research laboratory in Zurich in 1956.\n\n"
        "The European Central Bank met in Frankfurt with International Business Machines."
    ),
    "short names.txt": (
        "IBM opened a research laboratory in Zurich, where the ECB later held a meeting.\n\n"
        "IBM and the ECB met again in Frankfurt in 1999."
    ),
}


def graph_of(rt, topic) -> tuple[frozenset[tuple[str, str]], int]:
    """The ``(name, type)`` of each entity of a Topic's graph, and how many entities it stores."""
    entities = list(graph_store(rt, topic).all_entities())
    return frozenset((e.name, e.type) for e in entities), len(entities)


def ingest_sequentially(rt, name: str, order: list[str]):
    topic = create_topic(rt, name, kind="graphrag", settings=NLP)
    for file_name in order:
        doc = upload_file(rt, topic, file_name, FILES[file_name].encode())
        assert ingest_document(rt, doc.id).status == "indexed"
    return graph_of(rt, topic)


def run_at_once(target, items: list) -> list[Exception]:
    """Run ``target(item)`` for every item in its own thread, all at once; returns what they raised."""
    errors: list[Exception] = []

    def guarded(item) -> None:
        try:
            target(item)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return errors


def test_concurrent_uploads_naming_the_same_entities_converge_to_a_sequential_graph(rt):
    expected = {ingest_sequentially(rt, "In order", list(FILES)), ingest_sequentially(rt, "Reversed", list(FILES)[::-1])}
    names, count = next(iter(expected))
    assert len(names) == count, "a sequential upload stores an entity twice"

    topic = create_topic(rt, "At once", kind="graphrag", settings=NLP)
    docs = [upload_file(rt, topic, file_name, text.encode()) for file_name, text in FILES.items()]
    both_extracting = threading.Barrier(len(docs))
    results: list[str] = []

    def upload(doc) -> None:
        waited = []

        def progress(phase: str, done: int, total: int) -> None:
            if phase == "extracting" and not waited:  # both have read their file before either plans its graph
                waited.append(True)
                both_extracting.wait(timeout=120)

        results.append(ingest_document(rt, doc.id, progress).status)

    errors = run_at_once(upload, docs)
    assert not errors and results == ["indexed", "indexed"], (errors, results)
    names, count = graph_of(rt, topic)
    assert len(names) == count, "an entity is stored twice"
    assert (names, count) in expected, f"{sorted(names)} is not what a sequential upload builds: {expected}"
    named = {name for name, _ in names}
    assert "IBM" not in named or "International Business Machines" not in named


IMPORTS = {
    "long names.json": {
        "nodes": [
            {"id": "a", "name": "International Business Machines", "type": "Organization", "description": "A computer maker."},
            {"id": "b", "name": "Zurich Research Laboratory", "type": "Organization", "description": "A laboratory in Zurich."},
        ],
        "edges": [{"source": "a", "target": "b", "description": "Opened the laboratory in 1956."}],
    },
    "short names.json": {
        "nodes": [
            {"id": "a", "name": "IBM", "type": "Organization", "description": "A computer maker."},
            {"id": "e", "name": "European Central Bank", "type": "Organization", "description": "A central bank."},
        ],
        "edges": [{"source": "e", "target": "a", "description": "Bought computers from IBM."}],
    },
}


def import_sequentially(rt, name: str, order: list[str]):
    topic = create_topic(rt, name, kind="graphrag", settings=NLP)
    for source in order:
        ingest_graph(rt, topic, source, parse_nodes_edges_json(json.dumps(IMPORTS[source]).encode()))
    return graph_of(rt, topic)


def test_concurrent_graph_imports_naming_the_same_entities_converge_to_a_sequential_graph(rt, monkeypatch):
    expected = {import_sequentially(rt, "In order", list(IMPORTS)), import_sequentially(rt, "Reversed", list(IMPORTS)[::-1])}
    names, count = next(iter(expected))
    assert len(names) == count == 3, f"a sequential import does not merge IBM: {sorted(names)}"

    topic = create_topic(rt, "At once", kind="graphrag", settings=NLP)
    both_embedded = threading.Barrier(len(IMPORTS))
    waited = threading.local()
    embed = rt.gateway.embed

    def embed_then_wait(texts, **kwargs):  # both imports have embedded their node chunks before either plans its graph
        vectors = embed(texts, **kwargs)
        if kwargs.get("purpose", "embedding") == "embedding" and not getattr(waited, "done", False):
            waited.done = True
            both_embedded.wait(timeout=120)
        return vectors

    monkeypatch.setattr(rt.gateway, "embed", embed_then_wait)

    def run(source: str) -> None:
        ingest_graph(rt, topic, source, parse_nodes_edges_json(json.dumps(IMPORTS[source]).encode()))

    errors = run_at_once(run, list(IMPORTS))
    assert errors == []
    names, count = graph_of(rt, topic)
    assert len(names) == count, "an entity is stored twice"
    assert (names, count) in expected, f"{sorted(names)} is not what a sequential import builds: {expected}"
    assert len(list(graph_store(rt, topic).all_relationships())) == 2


@pytest.fixture
def curie(rt):
    topic = create_topic(rt, "Fenced", kind="graphrag", settings=NLP)
    doc = upload_file(rt, topic, "curie.txt", CURIE.encode())
    assert ingest_document(rt, doc.id).status == "indexed"
    return topic, get_document(rt, doc.id)


def stored_state(rt, topic, doc) -> tuple:
    store = graph_store(rt, topic)
    entities = sorted((e.id, e.name, e.description, tuple(sorted(e.chunk_ids))) for e in store.all_entities())
    return entities, store.stats(), sorted(rt.chunk_index(topic.id).document_chunk_ids(doc.id))


def test_a_holder_whose_document_lock_was_taken_over_writes_nothing(rt, curie):
    topic, doc = curie
    before = stored_state(rt, topic, doc)
    assert before[0] and before[2]
    with document_lock(rt.redis, doc.id) as fence:
        rt.redis.set(lock_key(doc.id), b"the-next-holder")  # it expired while this holder stalled, and was taken
        store = graph_store(rt, topic).fence_writes(fence)
        with pytest.raises(LockLostError):
            store.remove_document(doc.id)
        with pytest.raises(LockLostError):
            store.remove_chunks(before[2])
        with pytest.raises(LockLostError):
            rt.chunk_index(topic.id).replace_document(doc.id, [], fence=fence)
    assert stored_state(rt, topic, doc) == before


def test_a_holder_whose_graph_lock_was_taken_over_writes_nothing(rt, curie):
    topic, doc = curie
    before = stored_state(rt, topic, doc)
    with graph_write_lock(rt.redis, topic.id) as graph_fence, document_lock(rt.redis, doc.id) as fence:
        both = fence.joined(graph_fence)
        store = graph_store(rt, topic).fence_writes(both)
        store.ensure()  # both locks held: fenced queries run (and their replies parse)
        assert store.document_chunk_ids(doc.id) == before[2]
        rt.redis.set(graph_lock_key(topic.id), b"another-upload")
        with pytest.raises(LockLostError):
            store.remove_document(doc.id)
    assert stored_state(rt, topic, doc) == before


SHARED = {
    "old.txt": "Marie Curie worked in Paris with Henri Becquerel.\n\nPierre Curie met Marie Curie at the Sorbonne.",
    "new.txt": "Marie Curie lectured in Warsaw with Henri Becquerel.\n\nIrene Curie studied in Warsaw with Marie Curie.",
}


def graph_agrees_with_index(rt, topic) -> None:
    """The graph's chunks are the chunk index's, and every entity is mentioned by one of them."""
    store = graph_store(rt, topic)
    index = rt.chunk_index(topic.id)
    graph_chunks = {row[0] for row in store.read("MATCH (c:Chunk) RETURN c.id")}
    indexed = {cid for row in document_store.topic_documents(rt.metadata, topic.id) for cid in index.document_chunk_ids(row.id)}
    assert graph_chunks == indexed
    unmentioned = store.read("MATCH (e:Entity) WHERE NOT (e)-[:MENTIONED_IN]->(:Chunk) RETURN e.name")
    assert not unmentioned
    for entity in store.all_entities():
        assert set(entity.chunk_ids) <= indexed, entity.name


def test_a_delete_waits_for_an_upload_writing_the_graph_and_never_interleaves_with_it(rt, monkeypatch):
    """A delete's provenance rebuild runs under the graph write lock: inside an upload's graph write it is refused
    as busy (the document stays ``deleting``), and deleting again afterwards leaves a graph true to the index."""
    from ragtopics.graph import ingest as graph_ingest
    from ragtopics.kinds import graphrag

    topic = create_topic(rt, "Interleaved", kind="graphrag", settings=NLP)
    old = upload_file(rt, topic, "old.txt", SHARED["old.txt"].encode())
    assert ingest_document(rt, old.id).status == "indexed"
    new = upload_file(rt, topic, "new.txt", SHARED["new.txt"].encode())

    monkeypatch.setattr(graphrag, "LOCK_WAIT_S", 0.2)  # the upload below holds the lock until it has written
    complete_plan = graph_ingest.complete_plan
    refused: list[Exception] = []

    def plan_then_delete(*args, **kwargs):  # the upload holds the graph write lock here, its plan read from the graph
        plan = complete_plan(*args, **kwargs)
        try:
            delete_document(rt, topic, "old.txt")
        except StoreUnavailableError as exc:
            refused.append(exc)
        return plan

    monkeypatch.setattr(graph_ingest, "complete_plan", plan_then_delete)
    assert ingest_document(rt, new.id).status == "indexed"
    assert len(refused) == 1 and "busy" in str(refused[0])
    assert get_document(rt, old.id).status == "deleting"
    assert not rt.chunk_index(topic.id).document_chunk_ids(old.id)  # its chunks went first
    monkeypatch.undo()

    removed = delete_document(rt, topic, "old.txt")  # deleting again finishes the delete
    assert removed["rows"] == 1 and document_store.get_document(rt.metadata, old.id) is None
    graph_agrees_with_index(rt, topic)
    store = graph_store(rt, topic)
    assert store.entity_by_name("Pierre Curie") is None and store.entity_by_name("Irene Curie") is not None
    marie = store.entity_by_name("Marie Curie")
    assert "Warsaw" in marie.description and "Sorbonne" not in marie.description
