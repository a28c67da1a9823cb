"""Leiden communities and their reports, against the real embedded Redis (FalkorDB + RediSearch) and the scripted model."""

from __future__ import annotations

import json
import random

import igraph
import leidenalg
import numpy as np
import pytest

from ragtopics.graph.communities import (
    MAX_CONSECUTIVE_MODEL_FAILURES,
    PROMPT_MAX_CHARS,
    Community,
    TopicTerms,
    community_content,
    detect_communities,
    graph_report,
    half_graph_growth,
    head_noun,
    in_half,
    keyness,
    last_run,
    rebuild,
    report_prompt,
    run_key,
    summary_sentences,
)
from ragtopics.graph.community_index import CommunityIndex, CommunityRecord
from ragtopics.graph.model import Entity, Relationship, entity_id_for
from ragtopics.graph.store import GraphStore
from ragtopics.llm.gateway import MAX_CONCURRENT_CALLS
from ragtopics.tracing.trace import Trace

BRAKES = ["Brake Pedal", "Brake Caliper", "Brake Fluid", "Master Cylinder"]
CURIES = ["Marie Curie", "Pierre Curie", "Radium", "Sorbonne"]
LONELY = "Lonely Widget"
TYPES = {
    "Brake Pedal": "PART",
    "Brake Caliper": "PART",
    "Brake Fluid": "PRODUCT",
    "Master Cylinder": "PART",
    "Radium": "ELEMENT",
    "Sorbonne": "ORGANIZATION",
    LONELY: "PRODUCT",
}


def eid(name: str) -> str:
    return entity_id_for(name, TYPES.get(name, "PERSON"))


def ent(name: str, chunk: str, description: str = "") -> Entity:
    text = description or f"{name} is part of the story."
    return Entity(eid(name), name, TYPES.get(name, "PERSON"), text, (), frozenset({chunk}))


def rel(a: str, b: str, chunk: str, strength: float = 3.0) -> Relationship:
    return Relationship(eid(a), eid(b), f"{a} works with {b}.", strength, frozenset({chunk}))


def clique(names: list[str], chunk: str) -> list[Relationship]:
    return [rel(a, b, chunk) for i, a in enumerate(names) for b in names[i + 1 :]]


def write_graph(store: GraphStore) -> None:
    """Two clusters of four (doc-a: brakes, doc-b: the Curies) joined by one weak bridge (in doc-b), and a lone entity."""
    lonely = ent(LONELY, "cz", "A widget nobody mentions again.")
    store.upsert("doc-a", "brakes.txt", [("ca", 0), ("cz", 1)], [*(ent(n, "ca") for n in BRAKES), lonely], clique(BRAKES, "ca"))
    store.upsert(
        "doc-b",
        "curie.txt",
        [("cb", 0)],
        [ent(n, "cb") for n in CURIES],
        [*clique(CURIES, "cb"), rel("Master Cylinder", "Sorbonne", "cb", strength=0.5)],
    )


@pytest.fixture
def store(rt) -> GraphStore:
    graph = GraphStore(rt.redis, "topic-c")
    write_graph(graph)
    return graph


@pytest.fixture
def index(rt) -> CommunityIndex:
    embedder = rt.gateway.embedder
    return CommunityIndex(rt.redis, "topic-c", dims=embedder.dims, embedding_model=embedder.model)


def script_reports(scripted_llm) -> None:
    def reply(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        title = "The brake system" if "Brake Pedal" in prompt else "The Curie family and radium"
        return json.dumps({"title": title, "summary": f"{title} is a group of closely related things."})

    scripted_llm.replies["community_report"] = reply


def members(communities: list[Community]) -> set[frozenset[str]]:
    return {frozenset(c.entity_ids) for c in communities}


# ----------------------------------------------------------------------------- detection


def test_two_clusters_and_a_bridge_give_two_communities_and_a_singleton(store):
    communities = detect_communities(store.all_entities(), store.all_relationships(), resolution=1.0)

    assert members(communities) == {frozenset(map(eid, BRAKES)), frozenset(map(eid, CURIES)), frozenset({eid(LONELY)})}
    brakes = next(c for c in communities if eid("Brake Pedal") in c.entity_ids)
    assert len(brakes.relationship_keys) == 6  # the clique's relationships, not the bridge
    assert brakes.id.startswith("community-") and len(brakes.content_hash) == 40
    assert [c.size for c in communities] == [4, 4, 1]


def test_detection_is_deterministic_whatever_the_input_order(store):
    entities, relationships = list(store.all_entities()), list(store.all_relationships())
    first = detect_communities(entities, relationships, resolution=1.0)
    rng = random.Random(7)
    shuffled_e, shuffled_r = entities[:], relationships[:]
    rng.shuffle(shuffled_e)
    rng.shuffle(shuffled_r)

    assert detect_communities(entities, relationships, resolution=1.0) == first
    assert detect_communities(shuffled_e, shuffled_r, resolution=1.0) == first


def planted(n_groups: int, size: int, seed: int = 1) -> tuple[list[Entity], list[Relationship]]:
    """Groups of ``size`` entities, ~5 ties per entity, 90 % of them inside the group."""
    rng = random.Random(seed)
    entities = [Entity(f"ent-{i:06d}", f"E{i}", "THING", "", (), frozenset({"c"})) for i in range(n_groups * size)]
    rels = []
    for i in range(len(entities)):
        for _ in range(5):
            j = (i // size) * size + rng.randrange(size) if rng.random() < 0.9 else rng.randrange(len(entities))
            if j != i:
                rels.append(Relationship(entities[i].id, entities[j].id, "", 1.0 + rng.random(), frozenset({"c"})))
    return entities, rels


def test_planted_graph_is_deterministic_and_resolution_controls_size():
    entities, rels = planted(20, 15)
    first = detect_communities(entities, rels, resolution=1.0)
    reversed_input = detect_communities(entities[::-1], rels[::-1], resolution=1.0)
    coarse = detect_communities(entities, rels, resolution=0.1)
    fine = detect_communities(entities, rels, resolution=5.0)

    assert reversed_input == first
    assert len(coarse) < len(first) <= len(fine)
    assert len(first) == 20  # the planted groups


def test_igraph_leiden_optimises_leidenalg_rb_configuration_quality():
    """The objective is modularity with a resolution: as good as leidenalg's RBConfigurationVertexPartition."""
    entities, rels = planted(20, 15, seed=3)
    ids = sorted(e.id for e in entities)
    position = {e: i for i, e in enumerate(ids)}
    graph = igraph.Graph(n=len(ids), edges=[(position[r.source_id], position[r.target_id]) for r in rels])
    graph.es["weight"] = [r.strength for r in rels]
    for resolution in (0.5, 1.0, 2.0):
        ours = detect_communities(entities, rels, resolution=resolution)
        label = {eid: n for n, c in enumerate(ours) for eid in c.entity_ids}
        quality = leidenalg.RBConfigurationVertexPartition(
            graph, initial_membership=[label[i] for i in ids], weights="weight", resolution_parameter=resolution
        ).quality()
        reference = leidenalg.find_partition(
            graph, leidenalg.RBConfigurationVertexPartition, weights="weight", resolution_parameter=resolution, seed=42
        ).quality()
        assert quality >= reference * 0.99


def test_graph_without_relationships_is_all_singletons():
    entities = [Entity(f"ent-{i}", f"E{i}", "THING", "", (), frozenset({"c"})) for i in range(3)]
    assert [c.size for c in detect_communities(entities, [], resolution=1.0)] == [1, 1, 1]
    with pytest.raises(ValueError):
        detect_communities(entities, [], resolution=0)


# ----------------------------------------------------------------------------- reports


def test_graph_report_lists_the_strongest_members_and_relationships(store):
    entities, relationships = list(store.all_entities()), list(store.all_relationships())
    communities = detect_communities(entities, relationships, resolution=1.0)
    brakes = next(c for c in communities if eid("Brake Pedal") in c.entity_ids)
    content = community_content(brakes, {e.id: e for e in entities}, {(r.source_id, r.target_id): r for r in relationships})

    report = graph_report(content)

    assert report.method == "graph"
    assert report.title == "Brake Caliper, Brake Fluid and Brake Pedal (+1 more)"  # equal degree: by name
    # In the documents' words: the sentences that tie the members first, each once, then what they say of each member.
    sentences = report.summary.split(". ")
    assert " works with " in sentences[0] and len(sentences) == len(set(sentences))
    assert report.summary.index("works with") < report.summary.index("Brake Pedal is part of the story.")
    assert "(PART)" not in report.summary
    assert set(report.key_entities) == set(BRAKES)
    assert len(report.key_relationships) == 5 and all(" works with " in line for line in report.key_relationships)


def test_graph_report_titles_a_community_by_its_named_members_before_noun_phrases():
    ids = {
        n: entity_id_for(n, t)
        for n, t in [
            ("the film", "CONCEPT"),
            ("rare photographs", "CONCEPT"),
            ("Maximum Overdrive", "WORK"),
            ("Stephen King", "PERSON"),
        ]
    }
    entities = [
        Entity(i, n, "CONCEPT" if n[0].islower() else "X", f"{n} is mentioned.", (), frozenset({"c"})) for n, i in ids.items()
    ]
    rels = [
        Relationship(ids["the film"], ids["rare photographs"], "The film has rare photographs.", 9.0, frozenset({"c"})),
        Relationship(
            ids["Maximum Overdrive"], ids["Stephen King"], "Stephen King directed Maximum Overdrive.", 1.0, frozenset({"c"})
        ),
        Relationship(ids["the film"], ids["Stephen King"], "The film is by Stephen King.", 1.0, frozenset({"c"})),
    ]
    community = detect_communities(entities, rels, resolution=0.01)[0]
    content = community_content(community, {e.id: e for e in entities}, {(r.source_id, r.target_id): r for r in rels})

    report = graph_report(content)

    assert report.title.startswith("Stephen King, Maximum Overdrive and ")  # named members first, by their ties
    assert report.summary.startswith("The film has rare photographs.")  # the strongest tie's sentence


def test_report_prompt_is_bounded():
    entities = [Entity(f"ent-{i:04d}", f"Entity number {i}", "THING", "word " * 200, (), frozenset({"c"})) for i in range(300)]
    rels = [Relationship(entities[i].id, entities[i + 1].id, "tie " * 200, 1.0, frozenset({"c"})) for i in range(299)]
    community = detect_communities(entities, rels, resolution=0.01)[0]
    content = community_content(community, {e.id: e for e in entities}, {(r.source_id, r.target_id): r for r in rels})

    prompt = report_prompt(content)

    assert len(prompt) < PROMPT_MAX_CHARS + 1000
    assert "more entities)" in prompt and "more relationships)" in prompt


# ----------------------------------------------------------------------------- rebuild


def test_rebuild_writes_once_then_keeps_and_rewrites_only_what_changed(rt, store, index, scripted_llm):
    script_reports(scripted_llm)
    calls: list[tuple[str, int, int]] = []

    first = rebuild("topic-c", store, index, rt.gateway, resolution=1.0, progress=lambda *a: calls.append(a))

    assert (first.written, first.kept, first.deleted, first.communities, first.skipped_small) == (2, 0, 0, 3, 1)
    assert first.model_calls == 2 and first.method == "model"
    assert len(scripted_llm.prompts("community_report")) == 2
    assert index.count() == 2
    assert calls[0] == ("detect", 0, 1) and ("reports", 2, 2) in calls and calls[-1] == ("write", 1, 1)
    titles = {h.title for h in index.get(list(index.get_hashes()))}
    assert titles == {"The brake system", "The Curie family and radium"}
    hit = index.search_text(["brake"], 5)[0]
    assert hit.title == "The brake system" and hit.method == "model"
    assert set(hit.key_entities) == set(BRAKES)  # from the graph, not the model
    assert set(hit.entity_ids) == set(map(eid, BRAKES))  # membership is kept in the report

    scripted_llm.requests.clear()
    second = rebuild("topic-c", store, index, rt.gateway, resolution=1.0)

    assert (second.written, second.kept, second.deleted) == (0, 2, 0)
    assert scripted_llm.prompts("community_report") == []

    before = index.get_hashes()
    store.upsert("doc-c", "more.txt", [("cc", 0)], [ent("Radium", "cc", "Radium glows in the dark.")], [])
    third = rebuild("topic-c", store, index, rt.gateway, resolution=1.0)

    assert (third.written, third.kept, third.deleted) == (1, 1, 0)
    assert len(scripted_llm.prompts("community_report")) == 1
    assert "Radium glows in the dark." in scripted_llm.prompts("community_report")[0]["messages"][-1]["content"]
    after = index.get_hashes()
    curies = next(cid for cid in after if after[cid][0] != before.get(cid, ("",))[0])
    assert set(index.get([curies])[0].entity_ids) == set(map(eid, CURIES))
    assert set(after) == set(before)  # same membership, same ids; only the Curies' hash changed

    store.remove_document("doc-b")
    store.remove_document("doc-c")
    scripted_llm.requests.clear()
    fourth = rebuild("topic-c", store, index, rt.gateway, resolution=1.0)

    assert (fourth.written, fourth.kept, fourth.deleted, fourth.communities) == (0, 1, 1, 2)
    assert scripted_llm.prompts("community_report") == []
    assert index.count() == 1 and index.search_text(["radium"], 5) == []


def test_last_run_is_recorded_under_the_topic_prefix(rt, store, index, scripted_llm):
    script_reports(scripted_llm)
    assert last_run(rt.redis, "topic-c") is None

    result = rebuild("topic-c", store, index, rt.gateway, resolution=1.0)

    assert last_run(rt.redis, "topic-c") == result
    assert run_key("topic-c").startswith("rt:topic-c:") and result.entities == 9 and result.finished_at > 0


def test_graph_only_with_the_bundled_model(reconfigure, store, index, scripted_llm):
    rt = reconfigure(LLM_MODEL="SmolLM2-135M-Instruct")  # served under the bundled model's name: too small to summarise

    result = rebuild("topic-c", store, index, rt.gateway, resolution=1.0)

    assert (result.written, result.method, result.model_calls) == (2, "graph", 0)
    assert scripted_llm.prompts("community_report") == []
    hits = index.search_text(["curie"], 5)
    assert hits[0].method == "graph" and "Marie Curie" in hits[0].title
    assert "Marie Curie works with Pierre Curie." in hits[0].summary and "Marie Curie is part of the story." in hits[0].summary


def test_failed_model_calls_fall_back_to_the_graph_and_are_retried_next_run(rt, store, index, scripted_llm):
    trace = Trace("communities", "topic-c")
    first = rebuild("topic-c", store, index, rt.gateway, resolution=1.0, trace=trace)  # no scripted reply: HTTP 400

    assert (first.written, first.model_calls, first.model_failures) == (2, 2, 2)
    assert {h.method for h in index.get(list(index.get_hashes()))} == {"graph"}
    assert [e.step for e in trace.events].count("community_report_failed") == 2

    script_reports(scripted_llm)
    trace = Trace("communities", "topic-c")
    second = rebuild("topic-c", store, index, rt.gateway, resolution=1.0, trace=trace)

    assert (second.written, second.kept, second.model_failures) == (2, 0, 0)  # graph reports upgraded
    assert {h.method for h in index.get(list(index.get_hashes()))} == {"model"}
    model_calls = [e.data for e in trace.events if e.step == "model_call" and e.data.get("prompt_name") == "community_report"]
    assert len(model_calls) == 2 and "Entities:" in model_calls[0]["messages"][-1]["content"]


def test_an_unreachable_model_is_given_up_after_a_few_failures(rt, index, scripted_llm):
    graph = GraphStore(rt.redis, "topic-c")
    names = [[f"Part {g}-{i}" for i in range(3)] for g in range(10)]
    graph.upsert(
        "doc",
        "parts.txt",
        [("c", 0)],
        [ent(n, "c") for group in names for n in group],
        [r for group in names for r in clique(group, "c")],
    )

    result = rebuild("topic-c", graph, index, rt.gateway, resolution=1.0)

    assert result.written == 10 and result.method == "model"
    assert result.model_calls <= MAX_CONSECUTIVE_MODEL_FAILURES + MAX_CONCURRENT_CALLS - 1
    assert len(scripted_llm.prompts("community_report")) == result.model_calls


# ----------------------------------------------------------------------------- index


def test_community_index_put_search_delete_and_drop(rt, index):
    vectors = rt.gateway.embed(["Brake system: pedal, caliper and fluid.", "The Curies discovered radium."])
    records = [
        CommunityRecord(
            "community-a",
            "Brake system",
            "Pedal, caliper and fluid stop the car.",
            ("ent-1", "ent-2"),
            "h1",
            vectors[0],
            ("Brake Pedal",),
            ("Brake Pedal - Caliper: pushes",),
            "model",
        ),
        CommunityRecord(
            "community-b", "The Curies", "Marie and Pierre Curie discovered radium.", ("ent-3", "ent-4"), "h2", vectors[1]
        ),
    ]
    index.put(records)

    assert index.count() == 2
    assert index.get_hashes() == {"community-a": ("h1", "model"), "community-b": ("h2", "graph")}
    near = index.search_vector(rt.gateway.embed(["radium discovery"])[0], 2)
    assert near[0].community_id == "community-b" and near[0].score > near[1].score
    text = index.search_text(["E-4711", "caliper"], 5)
    assert [h.community_id for h in text] == ["community-a"] and text[0].score > 0
    assert text[0].key_relationships == ("Brake Pedal - Caliper: pushes",) and text[0].entity_ids == ("ent-1", "ent-2")
    assert index.search_text(["the", "and"], 5) == [] and index.search_text([], 5) == []
    docs = rt.redis.ft(index.index.name).search("@entity_ids:{ent\\-3}").docs
    assert [d.id for d in docs] == [index.key("community-b")]

    index.put([], delete_ids=["community-a", "community-x"])
    assert index.get_hashes() == {"community-b": ("h2", "graph")}
    assert index.delete(["community-b"]) == 1 and index.count() == 0
    with pytest.raises(ValueError):
        index.put([CommunityRecord("community-c", "t", "s", (), "h", np.zeros(3, dtype=np.float32))])

    index.put(records)
    index.drop()
    assert not index.index.exists() and list(rt.redis.scan_iter(match="rt:topic-c:*")) == []


def test_the_half_graph_counts_the_communities_that_half_the_chunks_make_and_those_the_other_half_leaves_alone():
    """X and Z come from chunks of the kept half, Y from the other half, which also names Z's first member:
    the half graph has X and Z; in the whole graph X is unchanged, Z is touched, Y is new."""
    inside = [c for c in (f"chunk-{i}" for i in range(100)) if in_half(c)][:2]
    outside = [c for c in (f"chunk-{i}" for i in range(100)) if not in_half(c)][:2]
    groups = {"X": ["Xa", "Xb", "Xc"], "Y": ["Ya", "Yb", "Yc"], "Z": ["Za", "Zb", "Zc"]}
    chunk = {"X": inside[0], "Y": outside[0], "Z": inside[1]}
    entities = [ent(n, chunk[g]) for g, names in groups.items() for n in names]
    entities = [
        e if e.name != "Za" else Entity(e.id, e.name, e.type, e.description, (), frozenset({inside[1], outside[1]}))
        for e in entities
    ]
    relationships = [rel(a, b, chunk[g]) for g, names in groups.items() for a, b in zip(names, names[1:] + names[:1])]
    whole = detect_communities(entities, relationships, resolution=1.0)
    assert sorted(c.size for c in whole) == [3, 3, 3]
    assert half_graph_growth(entities, relationships, whole, resolution=1.0) == (6, 2, 1)
    assert half_graph_growth([], [], [], resolution=1.0) == (0, 0, 0)


def test_distinctive_terms_rank_what_is_frequent_inside_and_rare_outside():
    assert [head_noun(p) for p in ("public use airport", "Bollywood actresses", "the cities", "Oahu", "a majority")] == [
        "airport",
        "actress",
        "city",
        "",
        "",
    ]
    assert keyness(10, 20, 10, 200) > keyness(2, 20, 2, 200) > 0  # more evidence, more key
    assert keyness(2, 20, 20, 200) == 0.0  # as frequent inside as outside: not key
    # Three airports in Canada against four films in Hollywood: "Canada" is whom the airport community names in
    # most of its chunks and nowhere else, "airports" the kind of thing its sentences are about.
    towns = ["Alder", "Birch", "Cedar", "Dogwood"]
    chunks = {f"a{i}": f"{towns[i]} Airport is a public use airport in Canada." for i in range(3)}
    chunks |= {f"f{i}": f"{towns[i]} Film is a drama film made in Hollywood." for i in range(4)}
    entities = [
        Entity(
            entity_id_for(f"{towns[i]} {kind}", "PLACE"),
            f"{towns[i]} {kind}",
            "PLACE",
            chunks[f"{kind[0].lower()}{i}"],
            (),
            frozenset({f"{kind[0].lower()}{i}"}),
        )
        for kind, n in (("Airport", 3), ("Film", 4))
        for i in range(n)
    ]
    for name, prefix, kind in (("Canada", "a", "PLACE"), ("Hollywood", "f", "PLACE"), ("public use airport", "a", "CONCEPT")):
        own = [c for c in chunks if c.startswith(prefix)]
        entities.append(Entity(entity_id_for(name, kind), name, kind, " ".join(chunks[c] for c in own), (), frozenset(own)))
    entities.append(
        Entity(
            entity_id_for("drama film", "CONCEPT"), "drama film", "CONCEPT", "", (), frozenset(c for c in chunks if c[0] == "f")
        )
    )
    airports = [e for e in entities if e.name.endswith("Airport") or e.name == "Canada"]
    rels = [Relationship(a.id, airports[-1].id, a.description, 2.0, a.chunk_ids) for a in airports[:-1]]
    community = detect_communities(airports, rels, resolution=0.01)[0]
    content = community_content(community, {e.id: e for e in entities}, {(r.source_id, r.target_id): r for r in rels})

    report = graph_report(content, TopicTerms.of(entities))

    assert report.title.startswith("Canada: airports (Alder Airport, Birch Airport")  # names, kinds, then members
    assert list(report.sources) == [chunks["a0"], chunks["a1"], chunks["a2"]]  # each sentence once, from its chunk
    assert report.sources[chunks["a1"]] == "a1"


def test_a_clipped_description_run_into_the_next_sentence_gives_only_the_whole_sentence():
    ids = {n: entity_id_for(n, "X") for n in ("Alû", "Lilu")}
    entities = [Entity(i, n, "X", f"{n} is a spirit of old stories.", (), frozenset({"c"})) for n, i in ids.items()]
    merged = (
        "It roams at night and terrifies people while they sleep, and possession by Alû results in unconsciousness, and… "
        "A lilu or lilû is a masculine Akkadian word for a spirit, related to Alû, demon."
    )
    rels = [Relationship(ids["Alû"], ids["Lilu"], merged, 5.0, frozenset({"c"}))]
    community = detect_communities(entities, rels, resolution=0.01)[0]
    content = community_content(community, {e.id: e for e in entities}, {(r.source_id, r.target_id): r for r in rels})

    sentences = summary_sentences(content)

    assert "A lilu or lilû is a masculine Akkadian word for a spirit, related to Alû, demon." in sentences
    assert not any("…" in s or s.startswith("It roams") for s in sentences)
