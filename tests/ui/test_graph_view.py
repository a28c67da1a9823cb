"""The Graph tab: an entity's neighbourhood drawn as SVG (coloured by community, labelled), and the community list."""

from __future__ import annotations

import re

from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
from ragtopics.graph.model import Entity, Relationship
from ragtopics.graph.refresh import run_rebuild
from ragtopics.topics.topics import create_topic
from ragtopics.tracing import reports
from ragtopics.ui.graph_view import NO_COMMUNITY, communities_table, neighbourhood, neighbourhood_svg
from tests.graph.test_graph_ingestion import LLM, people


def entity(name: str, description: str = "") -> Entity:
    return Entity(
        id=name.lower(), name=name, type="THING", description=description, aliases=frozenset(), chunk_ids=frozenset({"c1"})
    )


def test_the_picture_draws_every_entity_and_labels_every_relationship():
    ents = [entity("Pump <P-7>"), entity("Valve"), entity("Boiler")]
    rels = [Relationship("pump <p-7>", "valve", "feeds the valve"), Relationship("valve", "boiler", "opens into")]
    svg = neighbourhood_svg(ents, rels, {"pump <p-7>": "c1", "valve": "c1"}, "pump <p-7>")
    assert svg.startswith("<svg") and svg.count("class='rt-entity'") == 3 and svg.count("class='rt-rel'") == 2
    assert "data-entity='Pump &lt;P-7&gt;'" in svg and "<P-7>" not in svg  # names are escaped
    assert "feeds the valve" in svg and "opens into" in svg
    fills = re.findall(r"<circle [^>]*fill='(#[0-9A-Fa-f]{6})'", svg)
    assert fills[0] == fills[1] != NO_COMMUNITY and fills[2] == NO_COMMUNITY  # one community, one colour
    assert "r='16'" in svg and "stroke='#111827'" in svg  # the centre stands out
    assert neighbourhood_svg(ents, rels, {}, "pump <p-7>") == neighbourhood_svg(ents, rels, {}, "pump <p-7>")  # same layout


def test_an_entity_neighbourhood_and_the_communities_of_a_real_graph(rt):
    topic = create_topic(rt, "Scientists", kind="graphrag", settings=LLM)
    ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))
    reports.set_switch(rt, "communities", True)
    run_rebuild(rt, topic.id)

    svg, details = neighbourhood(rt, "Scientists", "maria sklodowska", 1)  # an alias finds the entity
    assert "data-entity='Marie Curie'" in svg and "data-entity='Pierre Curie'" in svg and "Married Pierre Curie" in svg
    assert details.startswith("**Marie Curie** (PERSON) · 2 entities around it") and "Also called: Maria Sklodowska" in details
    assert "→ **Pierre Curie**: Married Pierre Curie in 1895." in details
    rows = communities_table(rt, "Scientists")
    assert rows and sum(r[1] for r in rows) >= 3 and all(r[0] and r[3] for r in rows)
    assert "No entity called <b>Nobody</b>" in neighbourhood(rt, "Scientists", "Nobody", 1)[0]
    assert "Choose a GraphRAG Topic" in neighbourhood(rt, "Missing", "Marie Curie", 1)[0]
    (report,) = reports.list_reports(rt, kind="communities")  # the rebuild was reported while its switch was on
    assert report.topic_name == "Scientists" and report.steps > 0
