"""The operator corrects the graph: merge, split, rename, retype and delete an entity. Each correction changes the
stored graph at once and, kept as a rule of the Topic, survives a re-upload of the same file, a community rebuild,
and a delete and upload again (the graph then rebuilt from nothing), against the real Redis/FalkorDB."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.errors import InvalidSettingError, NotFoundError, StoreUnavailableError
from ragtopics.graph.corrections import Correction, compile_rules, correct, list_corrections
from ragtopics.graph.dedup import deduplicate
from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.model import Entity, Relationship, entity_id_for
from ragtopics.graph.refresh import run_rebuild
from ragtopics.graph.report import entity_info
from ragtopics.storage.locks import graph_write_lock
from ragtopics.topics.topics import create_topic
from ragtopics.tracing import reports

LLM = {"graph_extraction_method": "LLM", "chunk_size": 100, "chunk_overlap": 0}

#: What the scripted Graph Extraction model finds: each name written in a chunk, with its type.
KNOWN = {
    "International Business Machines": "ORGANIZATION",
    "IBM": "ORGANIZATION",
    "United States": "PLACE",
    "USA": "PLACE",
    "Pump P1": "PRODUCT",
    "Boiler": "PRODUCT",
    "Jaguar": "ANIMAL",
    "Gremlin": "PERSON",
}
#: One paragraph per chunk (each under 100 characters, two never fit one chunk).
PARAGRAPHS = (
    "International Business Machines built the control system of the old plant in the valley here.",
    "IBM shipped the control system to the plant in the year 1970 after a long and careful test.",
    "United States federal money bought the whole system for the plant and its many workers here.",
    "USA taxpayers paid for it in the end, as the report of the plant says on its very last page.",
    "Pump P1 feeds the Boiler with water from the river that runs past the plant to the sea.",
    "Jaguar is the name of the mascot painted on the Boiler of the plant, near its main door.",
    "Gremlin is what the workers call the fault that broke the Boiler once in a cold winter.",
)
PLANT = "\n\n".join(PARAGRAPHS).encode()


def extraction(body: dict) -> str:
    """Every known name in the chunk (no description: deduplication then decides by names alone), each tied to the next."""
    text = body["messages"][-1]["content"].split("Text:")[-1]
    names = [n for n in KNOWN if re.search(rf"\b{re.escape(n)}\b", text)]
    entities = [{"name": n, "type": KNOWN[n], "description": "", "aliases": []} for n in names]
    relationships = [
        {"source": a, "target": b, "description": f"{a} works with {b}.", "strength": 4} for a, b in itertools.pairwise(names)
    ]
    return json.dumps({"entities": entities, "relationships": relationships})


@pytest.fixture
def plant(rt, run_jobs, scripted_llm):
    scripted_llm.replies["graph_extraction"] = extraction
    scripted_llm.replies["deduplication"] = json.dumps({"decisions": []})
    topic = create_topic(rt, "Plant", kind="graphrag", settings=LLM)
    upload(rt, run_jobs, topic)
    return topic


def upload(rt, run_jobs, topic) -> None:
    doc = upload_file(rt, topic, "plant.txt", PLANT)
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error


def ends(store, entity: Entity) -> set[str]:
    """The names of the entities an entity has a relationship with."""
    around = store.neighbours([entity.id], hops=1, limit=50)
    return {e.name for e in around.entities if e.id != entity.id}


def assert_corrected(rt, topic) -> None:
    """The graph as the five corrections left it (asserted on the stored entities and relationships)."""
    store = graph_store(rt, topic)
    ibm, long_form = store.entity_by_name("IBM"), store.entity_by_name("International Business Machines")
    assert ibm.name == "IBM" and ibm.type == "ORGANIZATION" and ibm.id != long_form.id  # split stays apart
    assert "IBM" not in long_form.aliases and ibm.chunk_ids and long_form.chunk_ids and not ibm.chunk_ids & long_form.chunk_ids
    usa = store.entity_by_name("USA")  # merged stays merged
    assert usa.name == "United States" and "USA" in usa.aliases and len(usa.chunk_ids) == 2
    assert store.entities([entity_id_for("USA", "PLACE")]) == []
    pump = store.entity_by_name("Feed Pump P-1")  # renamed keeps its name
    assert pump.type == "PRODUCT" and "Pump P1" in pump.aliases and "Boiler" in ends(store, pump)
    assert store.entities([entity_id_for("Pump P1", "PRODUCT")]) == [] and store.entity_by_name("Pump P1").id == pump.id
    jaguar = store.entity_by_name("Jaguar")  # retyped keeps its type
    assert jaguar.type == "CONCEPT" and store.entities([entity_id_for("Jaguar", "ANIMAL")]) == []
    assert store.entity_by_name("Gremlin") is None  # deleted stays deleted, and so do its relationships
    boiler = store.entity_by_name("Boiler")
    assert ends(store, boiler) == {"Feed Pump P-1", "Jaguar"}
    assert store.vectors.missing([ibm.id, usa.id, pump.id, jaguar.id, boiler.id]) == set()  # every entity has its vector


def test_each_correction_survives_a_re_upload_a_community_rebuild_and_a_graph_rebuilt_from_nothing(rt, run_jobs, plant):
    store = graph_store(rt, plant)
    assert store.entity_by_name("IBM").name == "International Business Machines"  # merged by abbreviation
    assert store.entity_by_name("USA").id != store.entity_by_name("United States").id  # "USA" is not "US"

    made = [
        correct(rt, plant, "split", "IBM", "International Business Machines", by="otto"),
        correct(rt, plant, "merge", "USA", "United States"),
        correct(rt, plant, "rename", "Pump P1", "Feed Pump P-1"),
        correct(rt, plant, "retype", "Jaguar", "concept"),
        correct(rt, plant, "delete", "Gremlin"),
    ]
    assert [c.kind for c in list_corrections(rt, plant.id)] == ["split", "merge", "rename", "retype", "delete"]
    assert made[0].created_by == "otto" and made[0].outcome["created"] and made[0].outcome["mentions_moved"] == 1
    assert made[1].outcome["removed"] == [entity_id_for("USA", "PLACE")] and made[4].outcome["removed"]
    assert_corrected(rt, plant)
    history = entity_info(rt, plant, "USA")["history"]  # the entity's history: the CLI's --entity and the Graph tab
    assert [h["summary"] for h in history] == ['merged "USA" (PLACE) into "United States" (PLACE)']
    assert entity_info(rt, plant, "Jaguar")["history"][0]["summary"] == 'changed the type of "Jaguar" from ANIMAL to CONCEPT'

    reports.set_switch(rt, "upload", True)
    upload(rt, run_jobs, plant)  # the same file again
    assert_corrected(rt, plant)
    (report,) = reports.list_reports(rt, kind="upload")
    steps = _steps(reports.load_report(rt, report.id))
    applied = {a["kind"]: a["mentions"] for a in steps["corrections"]["data"]["applied"]}
    assert applied == {
        "merge": 1,
        "rename": 1,
        "retype": 1,
        "delete": 1,
    }  # the split needed nothing: nothing named IBM as an alias

    assert run_rebuild(rt, plant.id)["status"] == "done"  # a community rebuild changes no entity
    assert_corrected(rt, plant)

    delete_document(rt, plant, "plant.txt")
    assert graph_store(rt, plant).stats()["entities"] == 0
    upload(rt, run_jobs, plant)  # the graph rebuilt from nothing: the rules alone keep the corrections
    assert_corrected(rt, plant)
    kept_apart = _steps(reports.load_report(rt, reports.list_reports(rt, kind="upload")[0].id))["deduplicate"]["data"][
        "kept_apart"
    ]
    assert ["IBM", "International Business Machines", "operator split"] in kept_apart or [
        "International Business Machines",
        "IBM",
        "operator split",
    ] in kept_apart


def _steps(report: dict) -> dict[str, dict]:
    """A DEV report's steps by name (the last of each name), wherever they are in the tree."""
    found: dict[str, dict] = {}

    def walk(events) -> None:
        for event in events:
            found[event.get("step", "")] = event
            walk(event.get("children", []))

    walk(report.get("events", report.get("steps", [])))
    return found


def test_a_bad_correction_is_refused_and_changes_nothing(rt, run_jobs, plant):
    before = graph_store(rt, plant).stats()
    with pytest.raises(NotFoundError, match="no entity called 'Nobody'"):
        correct(rt, plant, "merge", "Nobody", "Boiler")
    with pytest.raises(InvalidSettingError, match="already one entity"):
        correct(rt, plant, "merge", "IBM", "International Business Machines")
    with pytest.raises(InvalidSettingError, match="is not an alias of 'Boiler'"):
        correct(rt, plant, "split", "Jaguar", "Boiler")
    with pytest.raises(InvalidSettingError, match="already of type ANIMAL"):
        correct(rt, plant, "retype", "Jaguar", "animal")
    with pytest.raises(InvalidSettingError, match="give the new name"):
        correct(rt, plant, "rename", "Jaguar", " ")
    with pytest.raises(InvalidSettingError, match="no correction 'explode'"):
        correct(rt, plant, "explode", "Jaguar")
    assert list_corrections(rt, plant.id) == [] and graph_store(rt, plant).stats() == before
    rag = create_topic(rt, "Plain", kind="rag")
    with pytest.raises(InvalidSettingError, match="only GraphRAG Topics"):
        correct(rt, rag, "delete", "Jaguar")


def test_a_rename_in_case_keeps_the_entity_and_a_rule_follows_a_later_rename(rt, run_jobs, plant):
    correct(rt, plant, "rename", "Boiler", "BOILER")
    store = graph_store(rt, plant)
    boiler = store.entity_by_name("boiler")
    assert boiler.name == "BOILER" and boiler.id == entity_id_for("Boiler", "PRODUCT") and len(boiler.chunk_ids) == 3
    correct(rt, plant, "rename", "BOILER", "Steam Boiler")
    correct(rt, plant, "merge", "Pump P1", "Steam Boiler")  # a merge into a renamed entity
    upload(rt, run_jobs, plant)
    store = graph_store(rt, plant)
    steam = store.entity_by_name("Boiler")
    assert steam.name == "Steam Boiler" and {"Boiler", "Pump P1"} <= set(steam.aliases) and len(steam.chunk_ids) == 3
    assert store.entity_by_name("Pump P1").id == steam.id and "Pump P1" not in ends(store, steam)


def test_rules_compile_in_order_a_later_rule_replaces_an_earlier_one():
    def rule(i, kind, name, type_, names, target=("", "")):
        return Correction(i, kind, name, type_, tuple(names), *target)

    rules = compile_rules(
        [
            rule(1, "merge", "A", "T", ["A", "A."], ("B", "T")),
            rule(2, "rename", "B", "T", ["B", "A"], ("C", "T")),
            rule(3, "delete", "D", "T", ["D"]),
            rule(4, "merge", "D", "T", ["D"], ("C", "T")),
            rule(5, "split", "A", "T", ["A"], ("C", "T")),
        ]
    )
    assert rules.redirect == {("b", "T"): ("C", "T", 2), ("d", "T"): ("C", "T", 4)}  # A follows B to C, then is split off
    assert rules.deleted == {} and rules.apart == {frozenset({("a", "T"), ("c", "T")}): 5}
    extracted = [Entity(entity_id_for(n, "T"), n, "T", "", (), frozenset({"c1"})) for n in ("A", "B", "D", "E")]
    extracted.append(Entity(entity_id_for("C", "T"), "C", "T", "", ("A",), frozenset({"c2"})))
    kept, ids, applied = rules.rewrite(extracted)
    assert [(e.name, e.aliases) for e in kept] == [("A", ()), ("C", ("B",)), ("C", ("D",)), ("E", ()), ("C", ())]
    assert ids[entity_id_for("B", "T")] == entity_id_for("C", "T") and applied == {2: 1, 4: 1, 5: 1}
    rels = [
        Relationship(entity_id_for("B", "T"), entity_id_for("D", "T"), "", 1.0, frozenset({"c1"})),
        Relationship(entity_id_for("A", "T"), entity_id_for("E", "T"), "", 1.0, frozenset({"c1"})),
    ]
    gone = compile_rules([rule(1, "delete", "E", "T", ["E"])])
    assert gone.apply(extracted, rels)[1] == rels[:1]  # the relationship to a deleted entity goes with it


def test_a_graph_import_applies_the_rules_too(rt, plant):
    correct(rt, plant, "delete", "Gremlin")
    correct(rt, plant, "retype", "Jaguar", "CONCEPT")
    imported = parse_nodes_edges_json(
        json.dumps(
            {
                "nodes": [
                    {"id": "g", "name": "Gremlin", "type": "PERSON"},
                    {"id": "j", "name": "Jaguar", "type": "ANIMAL"},
                    {"id": "b", "name": "Boiler", "type": "PRODUCT"},
                ],
                "edges": [{"source": "g", "target": "b"}, {"source": "j", "target": "b"}],
            }
        ).encode()
    )
    result = ingest_graph(rt, plant, "extra.json", imported)
    store = graph_store(rt, plant)
    assert store.entity_by_name("Gremlin") is None and store.entity_by_name("Jaguar").type == "CONCEPT"
    assert any(s["reason"] == "an end is an entity the operator deleted" for s in result["skipped_edges"])


def test_a_correction_waits_for_the_graph_write_lock_and_changes_nothing_without_it(rt, plant):
    # An upload writing the graph holds the lock.
    with graph_write_lock(rt.redis, plant.id), pytest.raises(StoreUnavailableError, match="is busy"):
        correct(rt, plant, "delete", "Gremlin", wait_s=0.2)
    assert list_corrections(rt, plant.id) == [] and graph_store(rt, plant).entity_by_name("Gremlin") is not None
    correct(rt, plant, "delete", "Gremlin", wait_s=0.2)  # the lock is free again
    assert graph_store(rt, plant).entity_by_name("Gremlin") is None


def test_deduplication_never_merges_a_split_pair_by_any_rule():
    names = {
        "International Business Machines": "ORGANIZATION",
        "IBM": "ORGANIZATION",
        "I.B.M.": "ORGANIZATION",
        "J. R. R. Tolkien": "PERSON",
        "J. R. R. Tolkein": "PERSON",
    }  # an abbreviation, a swap of two letters
    incoming = [Entity(entity_id_for(n, t), n, t, "", (), frozenset({f"c{i}"})) for i, (n, t) in enumerate(names.items())]
    merged = deduplicate(incoming, [])
    assert len({merged.mapping[e.id] for e in incoming}) == 2  # without a rule: IBM and Tolkien, once each
    split = [
        frozenset({("ibm", "ORGANIZATION"), ("internationalbusinessmachines", "ORGANIZATION")}),
        frozenset({("jrrtolkien", "PERSON"), ("jrrtolkein", "PERSON")}),
    ]
    kept = deduplicate(incoming, [], apart=split)
    groups = {e.name: kept.mapping[e.id] for e in incoming}
    assert groups["IBM"] == groups["I.B.M."] != groups["International Business Machines"]  # one name, written twice
    assert groups["J. R. R. Tolkien"] != groups["J. R. R. Tolkein"]
    assert sum(k.reason == "operator split" for k in kept.kept_apart) == 2
