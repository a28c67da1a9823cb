"""A document's graph share read before a write is written back exactly, also over a write that completed,
and restoring twice ends in the same graph."""

from __future__ import annotations

from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.share import read_share, restore_share
from ragtopics.topics.topics import create_topic, get_topic
from tests.documents.test_version_failures import GRAPH, graph_dump, people


def test_a_share_is_restored_over_a_completed_write_and_restoring_again_changes_nothing(rt):
    topic = get_topic(rt, create_topic(rt, "Staff", kind="graphrag", settings=GRAPH).id)
    ingest_graph(rt, topic, "crew.json", parse_nodes_edges_json(people("Alderney", "Dursey")))
    first = ingest_graph(rt, topic, "staff.json", parse_nodes_edges_json(people("Alderney", "Brecqhou", "Caldey")))
    store = graph_store(rt, topic)
    doc_id = first["document_id"]
    before = graph_dump(rt, topic)
    old_ids = set(store.document_chunk_ids(doc_id))
    entity_ids = {e.id for e in store.all_entities()}
    share = read_share(store, doc_id, old_ids, entity_ids)

    ingest_graph(rt, topic, "staff.json", parse_nodes_edges_json(people("Alderney", "Eriskay", "Fetlar")))
    new_ids = set(store.document_chunk_ids(doc_id))
    assert graph_dump(rt, topic) != before and new_ids.isdisjoint(old_ids)
    # The scope a store_version call would have read: both versions' chunks and the entities the new one names.
    share.chunk_ids = sorted(old_ids | new_ids)
    share.planned_entities = sorted(e.id for e in store.all_entities())
    restore_share(store, share)
    assert graph_dump(rt, topic) == before
    restore_share(store, share)
    assert graph_dump(rt, topic) == before
    assert store.entity_by_name("Fetlar") is None and store.entity_by_name("Caldey") is not None
