"""A failure at any step of storing a version leaves the previous version whole in all three stores.

A version is stored across the chunk index, the graph (GraphRAG) and the SQL row. Each test indexes a
first version, then injects a failure into one step of storing the next one (the chunk swap, a graph
write, the row write, the commit of the row after the chunk swap) and compares every store with what it
held before: the chunk hashes of the document, the index's file names and keyword counts, every node and
edge of the Topic's graph with all their properties, and the row's version fields; the previous chunks
are found by a search. The row then says ``failed``, naming the failure and that the previous version is still
searchable. Uploads of a RAG and of a GraphRAG Topic (with pictures in the graph too), and graph imports,
are covered; a clean retry afterwards stores the new version.
"""

from __future__ import annotations

import io
import itertools
import json

import pytest
import sqlalchemy.exc

from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.documents.versions import RowNotCommittedError
from ragtopics.errors import StateTransitionError
from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.store import GraphStore
from ragtopics.jobs.queue import job_progress
from ragtopics.storage import documents as document_store
from ragtopics.storage.chunk_index import ChunkIndex
from ragtopics.topics.topics import create_topic, get_topic
from tests.scripted_llm import capitalised_entities

GRAPH = {"graph_extraction_method": "LLM", "chunk_size": 120, "chunk_overlap": 0}
NLP = {"graph_extraction_method": "NLP", "chunk_size": 120, "chunk_overlap": 0}
RAG = {"chunk_size": 120, "chunk_overlap": 0}
FIRST = "Alderney ships pumps to Brecqhou every spring.\n\nCaldey repairs the pumps that Alderney ships."
SECOND = "Alderney ships pumps to Eriskay every autumn.\n\nFetlar repairs the pumps that Alderney ships."
OTHER = "Brecqhou buys valves from Dursey and from Alderney."


class Injected(RuntimeError):
    """The failure a test injects."""


def fail(*_args, **_kwargs):
    raise Injected("injected failure")


def fail_row(*_args, **_kwargs):
    raise StateTransitionError("injected failure: the row could not be written")


_finish_many = document_store.finish_many


def fail_commit(store, outcomes, before_commit=None):
    """The rows are written and the chunks swapped, then the transaction fails to commit (a full disk)."""

    def swap_then_fail() -> None:
        before_commit()
        raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception("injected failure: disk I/O error"))

    return _finish_many(store, outcomes, swap_then_fail)


#: Where a failure is injected: ``(object, attribute, replacement)``.
STEPS = {
    "chunk index": (ChunkIndex, "swap_documents", fail),  # the one swap of single and batched uploads
    "graph upsert": (GraphStore, "upsert", fail),  # after the dropped chunks were taken out of the graph
    "graph images": (GraphStore, "set_images", fail),  # the graph's last write: everything else is written
    "sql row": (document_store, "finish_many", fail_row),
    "sql commit": (document_store, "finish_many", fail_commit),  # after the chunk swap: it is undone
}


def graph_dump(rt, topic) -> tuple[list[str], list[str]]:
    """Every node (labels, properties) and edge (type, ends' ids, properties) of the Topic's graph, sorted."""
    store = graph_store(rt, get_topic(rt, topic.id))
    if not store.exists():
        return [], []
    nodes = store.graph.query("MATCH (n) RETURN labels(n), properties(n)").result_set
    edges = store.graph.query("MATCH (a)-[r]->(b) RETURN type(r), a.id, b.id, properties(r)").result_set
    return _sorted_json(nodes), _sorted_json(edges)


def _sorted_json(rows: list) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


def chunk_dump(rt, topic, document_id: str) -> list[dict]:
    """The stored chunk hashes of a document (every field, embedding included), by chunk id."""
    index = rt.chunk_index(topic.id)
    return [
        {k.decode(): v for k, v in sorted(rt.redis.hgetall(index.key(cid)).items())}
        for cid in sorted(index.document_chunk_ids(document_id))
    ]


def row_version(rt, document_id: str) -> dict:
    """The fields of a document row that name its searchable version."""
    row = get_document(rt, document_id)
    return {
        "content_sha256": row.content_sha256,
        "blob_path": row.blob_path,
        "chunk_count": row.chunk_count,
        "indexed_with": row.indexed_with,
        "warning": row.warning,
    }


def index_dump(rt, topic) -> tuple[dict, dict]:
    """The chunk index's file names and keyword counts (a count at 0 is as good as none)."""
    index = rt.chunk_index(topic.id)
    terms = {k: v for k, v in rt.redis.hgetall(index.terms_key).items() if v != b"0"}
    return rt.redis.hgetall(index.names_key), terms


def state(rt, topic, document_id: str) -> tuple:
    return chunk_dump(rt, topic, document_id), graph_dump(rt, topic), row_version(rt, document_id), index_dump(rt, topic)


def assert_failed_keeping_the_previous_version(rt, topic, document_id: str, before: tuple) -> None:
    chunks, graph, row, _ = state(rt, topic, document_id)
    assert chunks == before[0]  # the previous chunks, still searchable
    # The previous graph share, every description and provenance list as it was (nodes, then edges).
    assert (sorted(set(graph[0]) - set(before[1][0])), sorted(set(before[1][0]) - set(graph[0]))) == ([], [])
    assert (sorted(set(graph[1]) - set(before[1][1])), sorted(set(before[1][1]) - set(graph[1]))) == ([], [])
    assert graph == before[1]
    assert row == before[2]
    assert index_dump(rt, topic) == before[3]
    assert not list(rt.redis.scan_iter(f"rt:{topic.id}:parked:*"))  # nothing of the failed swap is left
    doc = get_document(rt, document_id)
    assert doc.status == "failed" and "injected failure" in doc.error
    assert doc.error.endswith("(the previous version is still searchable)")


def assert_previous_version_found(rt, topic, document_id: str) -> None:
    hits = rt.chunk_index(topic.id).search_vector(rt.gateway.embed(["Caldey repairs the pumps"])[0], 3)
    assert hits and hits[0].document_id == document_id and "Caldey" in hits[0].text


def uploaded(rt, topic, name: str, data: bytes, run_jobs) -> str:
    doc = upload_file(rt, topic, name, data)
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed", get_document(rt, doc.id).error
    return doc.id


@pytest.mark.parametrize("step", list(STEPS))
def test_a_failed_graphrag_re_upload_leaves_the_previous_version_whole(rt, run_jobs, scripted_llm, monkeypatch, step):
    scripted_llm.replies["graph_extraction"] = capitalised_entities
    topic = create_topic(rt, f"Islands {step}", kind="graphrag", settings=GRAPH)
    uploaded(rt, topic, "other.txt", OTHER.encode(), run_jobs)  # shares Alderney and Brecqhou with the file
    doc_id = uploaded(rt, topic, "pumps.txt", FIRST.encode(), run_jobs)
    before = state(rt, topic, doc_id)
    store = graph_store(rt, topic)
    assert store.entity_by_name("Caldey") is not None and store.entity_by_name("Eriskay") is None

    monkeypatch.setattr(*STEPS[step])
    doc = upload_file(rt, topic, "pumps.txt", SECOND.encode())
    run_jobs()
    assert job_progress(rt, doc.job_id).status == "failed"
    assert_failed_keeping_the_previous_version(rt, topic, doc_id, before)
    assert_previous_version_found(rt, topic, doc_id)

    monkeypatch.undo()  # a clean retry stores the new version
    upload_file(rt, topic, "pumps.txt", SECOND.encode())
    run_jobs()
    assert get_document(rt, doc_id).status == "indexed"
    store = graph_store(rt, topic)
    assert store.entity_by_name("Caldey") is None and store.entity_by_name("Eriskay") is not None
    assert set(store.document_chunk_ids(doc_id)) == set(rt.chunk_index(topic.id).document_chunk_ids(doc_id))


@pytest.mark.parametrize("step", ["chunk index", "sql row", "sql commit"])
def test_a_failed_rag_re_upload_leaves_the_previous_version_whole(rt, run_jobs, monkeypatch, step):
    topic = create_topic(rt, f"Manuals {step}", settings=RAG)
    uploaded(rt, topic, "other.txt", OTHER.encode(), run_jobs)
    doc_id = uploaded(rt, topic, "pumps.txt", FIRST.encode(), run_jobs)
    before = state(rt, topic, doc_id)

    monkeypatch.setattr(*STEPS[step])
    doc = upload_file(rt, topic, "pumps.txt", SECOND.encode())
    run_jobs()
    assert job_progress(rt, doc.job_id).status == "failed"
    assert_failed_keeping_the_previous_version(rt, topic, doc_id, before)
    assert_previous_version_found(rt, topic, doc_id)

    monkeypatch.undo()
    upload_file(rt, topic, "pumps.txt", SECOND.encode())
    run_jobs()
    assert get_document(rt, doc_id).status == "indexed"
    assert "Eriskay" in "".join(c["text"].decode() for c in chunk_dump(rt, topic, doc_id))
    assert not list(rt.redis.scan_iter(f"rt:{topic.id}:parked:*"))  # the swap that stayed deleted what it parked


def people(*names: str) -> bytes:
    nodes = [{"id": n.lower(), "name": n, "type": "Person", "description": f"{n} works at the plant."} for n in names]
    edges = [{"source": a.lower(), "target": b.lower(), "description": f"{a} trains {b}."} for a, b in itertools.pairwise(names)]
    return json.dumps({"nodes": nodes, "edges": edges}).encode()


@pytest.mark.parametrize("step", list(STEPS))
def test_a_failed_graph_re_import_leaves_the_previous_import_whole(rt, monkeypatch, step):
    topic = get_topic(rt, create_topic(rt, f"Staff {step}", kind="graphrag", settings=GRAPH).id)
    ingest_graph(rt, topic, "crew.json", parse_nodes_edges_json(people("Alderney", "Dursey")))  # shares Alderney
    first = ingest_graph(rt, topic, "staff.json", parse_nodes_edges_json(people("Alderney", "Brecqhou", "Caldey")))
    doc_id = first["document_id"]
    before = state(rt, topic, doc_id)

    monkeypatch.setattr(*STEPS[step])
    with pytest.raises((Injected, StateTransitionError, RowNotCommittedError)):
        ingest_graph(rt, topic, "staff.json", parse_nodes_edges_json(people("Alderney", "Eriskay", "Fetlar")))
    assert_failed_keeping_the_previous_version(rt, topic, doc_id, before)

    monkeypatch.undo()
    ingest_graph(rt, topic, "staff.json", parse_nodes_edges_json(people("Alderney", "Eriskay", "Fetlar")))
    assert get_document(rt, doc_id).status == "indexed"
    store = graph_store(rt, topic)
    assert store.entity_by_name("Caldey") is None and store.entity_by_name("Fetlar") is not None


def pictured_docx(person: str, colour: tuple[int, int, int]) -> bytes:
    from tests.ingest.test_docling import png_bytes
    from tests.ingest.test_docling_chunks import docx_bytes

    def build(document):
        document.add_paragraph(f"{person} worked with Henri Becquerel in Paris on radioactivity for many years.")
        document.add_picture(io.BytesIO(png_bytes(colour)))
        document.add_paragraph(f"Figure 1: {person} in the laboratory")

    return docx_bytes(build)


@pytest.mark.parametrize("step", ["sql row", "sql commit"])
def test_a_failed_re_upload_with_pictures_in_the_graph_keeps_the_previous_image_nodes(rt, run_jobs, monkeypatch, step):
    topic = create_topic(rt, f"Pictured {step}", kind="graphrag", settings={**NLP, "chunk_size": 1000, "file_types": "docx"})
    doc_id = uploaded(rt, topic, "lab.docx", pictured_docx("Marie Curie", (200, 30, 30)), run_jobs)
    before = state(rt, topic, doc_id)
    assert graph_store(rt, topic).stats()["images"] == 1

    monkeypatch.setattr(*STEPS[step])  # the graph share (its Image node and SHOWS edges too) is written by then
    upload_file(rt, topic, "lab.docx", pictured_docx("Pierre Curie", (30, 30, 200)))
    run_jobs()
    assert_failed_keeping_the_previous_version(rt, topic, doc_id, before)
    store = graph_store(rt, topic)
    marie = store.entity_by_name("Marie Curie")
    assert store.stats()["images"] == 1 and len(store.images_of([marie.id])[marie.id]) == 1
