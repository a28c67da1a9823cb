"""Graph ingestion: nodes and edges from JSON, CSV or a FalkorDB graph become entities, relationships and
searchable node chunks of a pseudo-document, deduplicated against uploads, replaced on re-import and removed
by the normal document delete."""

from __future__ import annotations

import json

import pytest

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import get_document, list_documents, source_link, upload_file
from ragtopics.errors import InvalidSettingError, NotFoundError, RefusedFileError
from ragtopics.graph.graph_ingestion import (
    ORIGIN,
    ingest_graph,
    is_graph_ingestion,
    parse_nodes_edges_csv,
    parse_nodes_edges_json,
    read_falkordb_graph,
    safe_url,
    source_name,
)
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.lifecycle import recompute_due
from ragtopics.graph.report import graph_stats
from ragtopics.graph.store import falkordb_for
from ragtopics.topics.topics import create_topic
from ragtopics.ui.cli import main

LLM = {"graph_extraction_method": "LLM", "chunk_size": 200, "chunk_overlap": 0}

PEOPLE = {
    "nodes": [
        {
            "id": "mc",
            "name": "Marie Curie",
            "type": "Person",
            "description": "Physicist and chemist who discovered polonium.",
            "aliases": ["Maria Sklodowska"],
        },
        {"id": "pc", "name": "Pierre Curie", "type": "Person", "description": "French physicist."},
        {"id": "up", "name": "University of Paris", "type": "Organization", "description": "A university in Paris."},
    ],
    "edges": [
        {"source": "mc", "target": "pc", "description": "Married Pierre Curie in 1895.", "strength": 3},
        {"source": "mc", "target": "University of Paris", "description": "Taught at the university."},
        {"source": "pc", "target": "Nobody", "description": "Unknown."},
    ],
}


def people(**changes) -> bytes:
    return json.dumps({**PEOPLE, **changes}).encode()


def graph_topic(rt, name: str = "Scientists"):
    return create_topic(rt, name, kind="graphrag", settings=LLM)


def relationships_by_name(store) -> dict[tuple[str, str], object]:
    names = {e.id: e.name for e in store.all_entities()}
    return {(names[r.source_id], names[r.target_id]): r for r in store.all_relationships()}


def test_a_json_import_writes_entities_relationships_and_searchable_node_chunks(rt):
    topic = graph_topic(rt)
    report = ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))

    assert report["source"] == "people.json (graph ingestion)" and report["format"] == "json"
    assert (report["nodes"], report["chunks"], report["entities"], report["relationships"]) == (3, 3, 3, 2)
    assert report["skipped_edges"] == [{"edge": "edge #3", "source": "pc", "target": "Nobody", "reason": "no node 'Nobody'"}]

    doc = get_document(rt, report["document_id"])
    assert doc.status == "indexed" and doc.chunk_count == 3 and doc.file_name == "people.json (graph ingestion)"
    assert doc.blob_path == "" and source_link(rt, doc.id) == ""  # no file behind it: no download
    assert doc.indexed_with["origin"] == ORIGIN and doc.indexed_with["graph"]["method"] == "GRAPH INGESTION"
    assert "1 node(s) or edge(s) left out" in doc.warning
    assert is_graph_ingestion(doc.file_name) and source_name(doc.file_name) == "people.json"

    index = rt.chunk_index(topic.id)
    chunk_ids = set(index.document_chunk_ids(doc.id))
    store = graph_store(rt, topic)
    marie = store.entity_by_name("Maria Sklodowska")  # the alias finds her
    assert marie.name == "Marie Curie" and marie.type == "PERSON" and marie.description.startswith("Physicist and chemist")
    assert marie.chunk_ids and marie.chunk_ids <= chunk_ids
    rels = relationships_by_name(store)
    assert set(rels) == {("Marie Curie", "Pierre Curie"), ("Marie Curie", "University of Paris")}
    married = rels[("Marie Curie", "Pierre Curie")]
    assert married.strength == pytest.approx(3.0) and married.description == "Married Pierre Curie in 1895."
    assert married.chunk_ids <= marie.chunk_ids  # provenance: Marie Curie's node chunk
    assert store.chunks_about_names(["Maria Sklodowska", "Marie Curie"]) == [
        hit.chunk_id
        for hit in index.search_vector(rt.gateway.embed(["Marie Curie"])[0], 3)
        if hit.text.startswith("Marie Curie:")
    ]  # her node's chunk is about her

    question = rt.gateway.embed(["Who discovered polonium?"])[0]
    hit = index.search_vector(question, k=1)[0]
    assert hit.file_name == "people.json (graph ingestion)" and hit.document_id == doc.id
    assert hit.text.startswith("Marie Curie: Physicist and chemist") and "- Pierre Curie: Married" in hit.text
    assert store.search_entities(question, k=1)[0][0].name == "Marie Curie"
    assert recompute_due(rt, topic.id) == "people.json (graph ingestion) was imported"
    assert graph_stats(rt, topic)["documents"] == 1


def test_a_csv_import_reads_nodes_and_edges_by_column(rt):
    topic = graph_topic(rt)
    nodes = (
        b"id,name,type,description,aliases,extra\n"
        b"p12,Pump P-12,part,Feeds the cooling loop.,P12;Pump 12,x\n"
        b"v3,Valve V-3,part,Closes the loop.,,\n"
        b"\n"
        b"c1,Cooling loop,system,,,\n"
    )
    edges = b"source,target,description,strength\np12,c1,Feeds it.,2.5\nValve V-3,Cooling loop,,\nv3,v3,self,1\n"
    report = ingest_graph(rt, topic, "plant.csv", parse_nodes_edges_csv(nodes, edges))

    assert (report["entities"], report["relationships"]) == (3, 2)
    assert [s["reason"] for s in report["skipped_edges"]] == ["source and target are the same node"]
    store = graph_store(rt, topic)
    pump = store.entity_by_name("pump 12")
    assert pump.name == "Pump P-12" and pump.type == "PART" and set(pump.aliases) >= {"P12", "Pump 12"}
    rels = relationships_by_name(store)
    assert rels[("Pump P-12", "Cooling loop")].strength == pytest.approx(2.5)
    assert rels[("Valve V-3", "Cooling loop")].strength == pytest.approx(1.0)
    assert store.entity_by_name("Cooling loop").type == "SYSTEM"
    assert rt.chunk_index(topic.id).count() == 3


def curie_extraction(body: dict) -> str:
    """A scripted Graph Extraction model: Marie Curie and Paris, related, in every chunk."""
    return json.dumps(
        {
            "entities": [
                {"name": "Marie Curie", "type": "PERSON", "description": "Marie Curie was a physicist."},
                {"name": "Paris", "type": "PLACE", "description": "Paris is a city."},
            ],
            "relationships": [{"source": "Marie Curie", "target": "Paris", "description": "She worked in Paris.", "strength": 5}],
        }
    )


def test_an_imported_duplicate_of_an_uploaded_entity_merges_and_a_delete_removes_only_the_imports_orphans(
    rt, run_jobs, scripted_llm
):
    scripted_llm.replies["graph_extraction"] = curie_extraction
    scripted_llm.replies["deduplication"] = json.dumps({"decisions": []})
    topic = graph_topic(rt)
    upload = upload_file(rt, topic, "curie.txt", b"Marie Curie was a physicist who worked in Paris.")
    run_jobs()
    assert get_document(rt, upload.id).status == "indexed"
    store = graph_store(rt, topic)
    uploaded = store.entity_by_name("Marie Curie")

    data = people(
        nodes=[{"id": "mc", "name": "marie curie", "type": "person", "description": "Discovered polonium."}, *PEOPLE["nodes"][1:]]
    )
    report = ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(data))
    assert {"kept": "Marie Curie", "merged": "marie curie", "rule": "normalized", "score": 1.0} in report["merges"]
    merged = store.entity_by_name("Marie Curie")
    imported_chunks = set(rt.chunk_index(topic.id).document_chunk_ids(report["document_id"]))
    assert merged.id == uploaded.id and uploaded.chunk_ids < merged.chunk_ids
    assert merged.chunk_ids - uploaded.chunk_ids <= imported_chunks
    assert "Discovered polonium." in merged.description
    assert store.stats()["entities"] == 4  # Marie Curie, Paris, Pierre Curie, University of Paris

    removed = delete_document(rt, topic, "people.json (graph ingestion)")
    assert removed["chunks"] == 3 and removed["entities"] == 2 and removed["entities_kept"] == 1
    assert store.entity_by_name("Pierre Curie") is None and store.entity_by_name("University of Paris") is None
    assert store.entity_by_name("Marie Curie").chunk_ids == uploaded.chunk_ids
    assert set(relationships_by_name(store)) == {("Marie Curie", "Paris")}
    assert [d.file_name for d in list_documents(rt, topic)] == ["curie.txt"]
    assert recompute_due(rt, topic.id) == "people.json (graph ingestion) was deleted and 2 other changes"  # upload, import


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"nodes": [{"name": "A"}, {"id": "b"}]}', "node #2 has no name"),
        (b'{"nodes": [{"name": "A"}], "edges": [{"source": "A"}]}', "edge #1 has no target"),
        (
            b'{"nodes": [{"name": "A"}, {"name": "B"}], "edges": [{"source": "A", "target": "B", "strength": -1}]}',
            "edge #1: strength -1 is not a number >= 0",
        ),
        (b'{"nodes": [{"name": "A", "aliases": [1]}]}', "node #1: aliases must be a list"),
        (b'[{"name": "A"}]', 'one JSON object with a list "nodes"'),
        (b'{"nodes": [', "not valid JSON"),
    ],
)
def test_bad_json_is_refused_naming_the_row(data, message):
    with pytest.raises(RefusedFileError, match=message):
        parse_nodes_edges_json(data)


@pytest.mark.parametrize(
    "nodes, edges, message",
    [
        (b"id,title\n1,A\n", None, "the nodes file has no column 'name'"),
        (b"name,type\nA,x\n,y\n", None, "line 3 of the nodes file has no name"),
        (b"name\nA\nB\n", b"source,to\nA,B\n", "the edges file has no column 'target'"),
        (b"name\nA\nB\n", b"source,target,strength\nA,B,1\nB,A,lots\n", "line 3 of the edges file: strength 'lots'"),
        (b"name\n\xff\n", None, "not UTF-8"),
    ],
)
def test_bad_csv_is_refused_naming_the_row_or_column(nodes, edges, message):
    with pytest.raises(RefusedFileError, match=message):
        parse_nodes_edges_csv(nodes, edges)


def test_a_refused_import_writes_nothing_and_leaves_an_earlier_import_as_it_was(rt):
    topic = graph_topic(rt)
    with pytest.raises(RefusedFileError, match="no nodes"):
        ingest_graph(rt, topic, "empty.json", parse_nodes_edges_json(b'{"nodes": [], "edges": []}'))
    assert list_documents(rt, topic) == [] and not graph_store(rt, topic).exists() and rt.chunk_index(topic.id).count() == 0

    ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))
    before = (graph_store(rt, topic).stats(), rt.chunk_index(topic.id).count(), get_document(rt, list_documents(rt, topic)[0].id))
    clash = people(nodes=[*PEOPLE["nodes"], {"id": "mc", "name": "Someone Else"}])
    with pytest.raises(RefusedFileError, match=r"people.json was refused: node #4 has the id 'mc' of node #1 \('Marie Curie'\)"):
        ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(clash))
    after = (graph_store(rt, topic).stats(), rt.chunk_index(topic.id).count(), get_document(rt, before[2].id))
    assert after[:2] == before[:2] and after[2].updated_at == before[2].updated_at and after[2].status == "indexed"

    rag = create_topic(rt, "Plain", kind="rag")
    with pytest.raises(InvalidSettingError, match="needs a GraphRAG Topic"):
        ingest_graph(rt, rag, "people.json", parse_nodes_edges_json(people()))


def test_a_re_import_replaces_the_previous_share(rt):
    topic = graph_topic(rt)
    first = ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))
    store = graph_store(rt, topic)
    old_chunks = set(rt.chunk_index(topic.id).document_chunk_ids(first["document_id"]))

    nodes = [
        {**PEOPLE["nodes"][0], "description": "Won two Nobel Prizes."},
        PEOPLE["nodes"][1],
        {"id": "so", "name": "Sorbonne", "type": "Organization"},
    ]
    edges = [{"source": "mc", "target": "so", "description": "Studied at the Sorbonne."}, PEOPLE["edges"][0]]
    second = ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people(nodes=nodes, edges=edges)))

    assert second["document_id"] == first["document_id"] and second["removed"]["entities_removed"] >= 1
    assert store.entity_by_name("University of Paris") is None and store.entity_by_name("Sorbonne") is not None
    assert store.entity_by_name("Marie Curie").description == "Won two Nobel Prizes."  # not appended to the old one
    assert set(relationships_by_name(store)) == {("Marie Curie", "Sorbonne"), ("Marie Curie", "Pierre Curie")}
    new_chunks = set(rt.chunk_index(topic.id).document_chunk_ids(first["document_id"]))
    assert len(new_chunks) == 3 and new_chunks != old_chunks and rt.chunk_index(topic.id).count() == 3
    assert {c for e in store.all_entities() for c in e.chunk_ids} <= new_chunks
    assert store.stats()["chunks"] == 3 and len(list_documents(rt, topic)) == 1
    assert second["merges"] == []  # the previous import's entities are replaced, not merged with


def test_an_import_from_another_falkordb_graph_on_the_same_server(rt):
    source = falkordb_for(rt.redis).select_graph("inventors")
    source.query(
        "CREATE (a:Person {name: 'Ada Lovelace', born: 1815}), "
        "(b:Person {name: 'Charles Babbage', description: 'Mathematician and inventor.'}), "
        "(e:Machine {title: 'Analytical Engine'}), (x:Thing {weight: 3}), "
        "(a)-[:WORKED_WITH {strength: 2}]->(b), (b)-[:DESIGNED]->(e), (a)-[:TOUCHED]->(x)"
    )
    topic = graph_topic(rt)
    url = rt.settings.effective_redis_url
    imported = read_falkordb_graph(url, "inventors")
    assert imported.skipped_nodes and imported.skipped_nodes[0]["reason"] == "no name or title property"

    report = ingest_graph(rt, topic, "inventors", imported)
    assert (report["entities"], report["relationships"], len(report["skipped_edges"])) == (3, 2, 1)
    store = graph_store(rt, topic)
    assert store.entity_by_name("Ada Lovelace").description == "born: 1815"
    assert store.entity_by_name("Analytical Engine").type == "MACHINE"
    rels = relationships_by_name(store)
    assert rels[("Ada Lovelace", "Charles Babbage")].strength == pytest.approx(2.0)
    assert rels[("Charles Babbage", "Analytical Engine")].description == "designed"
    doc = get_document(rt, report["document_id"])
    assert doc.file_name == "inventors (graph ingestion)" and doc.indexed_with["location"] == {"url": url, "graph": "inventors"}
    assert len(source.ro_query("MATCH (n) RETURN n").result_set) == 4  # the source graph is only read

    with pytest.raises(NotFoundError, match="no graph 'missing'"):
        read_falkordb_graph(url, "missing")
    assert safe_url("redis://user:secret@host:6380/0") == "redis://user:***@host:6380/0"


def test_the_cli_imports_json_csv_and_falkordb_and_keeps_stats_and_entity(rt, tmp_path, capsys):
    topic = graph_topic(rt)
    path = tmp_path / "people.json"
    path.write_bytes(people())
    assert main(["graph", topic.name, "--import", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"] == "people.json (graph ingestion)" and report["relationships"] == 2

    (tmp_path / "plant.csv").write_text("name,type\nPump P-12,part\nCooling loop,system\n")
    (tmp_path / "plant-edges.csv").write_text("source,target\nPump P-12,Cooling loop\n")
    assert main(["graph", topic.name, "--import", str(tmp_path / "plant.csv"), "--edges", str(tmp_path / "plant-edges.csv")]) == 0
    assert json.loads(capsys.readouterr().out)["relationships"] == 1

    falkordb_for(rt.redis).select_graph("tiny").query("CREATE (:Person {name: 'Ada Lovelace'})")
    assert main(["graph", topic.name, "--from-falkordb", rt.settings.effective_redis_url, "--graph", "tiny"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "tiny (graph ingestion)"

    assert main(["graph", topic.name, "--stats"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 3
    assert main(["graph", topic.name, "--entity", "Marie Curie"]) == 0
    assert json.loads(capsys.readouterr().out)["relationships"][0]["target"] == "Pierre Curie"

    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"nodes": [{"id": "x"}]}')
    assert main(["graph", topic.name, "--import", str(bad)]) == 2
    assert "error: bad.json was refused: node #1 has no name" in capsys.readouterr().err
    assert main(["graph", topic.name, "--import", str(path), "--edges", str(path)]) == 2
    assert main(["graph", topic.name, "--from-falkordb", rt.settings.effective_redis_url]) == 2
    assert "--graph NAME" in capsys.readouterr().err
    assert main(["docs", topic.name, "--delete", "people.json (graph ingestion)"]) == 0
    assert graph_store(rt, topic).entity_by_name("Marie Curie") is None


def test_a_re_import_after_the_chunk_index_was_dropped_still_replaces_the_graph_share(rt):
    topic = graph_topic(rt)
    ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))
    rt.chunk_index(topic.id).drop()  # what a re-embed does; a graph ingestion has no file to read again
    ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people(nodes=PEOPLE["nodes"][:2], edges=[])))
    store = graph_store(rt, topic)
    assert store.entity_by_name("University of Paris") is None and store.stats()["chunks"] == 2
    assert rt.chunk_index(topic.id).count() == 2
