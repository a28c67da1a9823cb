"""An entity that 20,000 chunks mention costs as much to read and write as one that one chunk mentions, and a
relationship found in thousands of chunks as much to read for a search as one found in one.

Provenance lives on the ``MENTIONED_IN`` edges; the entity node keeps a count and a bounded sample. A search reads a
relationship's count and a bounded sample of its chunks. The tests count what the store reads back from the real graph
(rows and their size), never time it.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from ragtopics.graph.dedup import partner_keys
from ragtopics.graph.model import Entity, entity_id_for
from ragtopics.graph.store import (
    _CHUNKS_ABOUT,
    _CHUNKS_ABOUT_NAMES,
    ENTITY_ABOUT_SAMPLE,
    ENTITY_CHUNK_SAMPLE,
    RELATIONSHIP_CHUNK_SAMPLE,
    GraphStore,
)
from tests.graph.test_store import client, eid, ent, rel, relationships_by_pair  # noqa: F401 - client: the flushed RESP2 client fixture
from tests.redis_commands import CommandLog

HUB_CHUNKS = 20_000
MID_CHUNKS = 2 * ENTITY_CHUNK_SAMPLE


@pytest.fixture
def store(client) -> GraphStore:
    return GraphStore(client, "topic-hub")


class ReadLog:
    """The rows and the size (characters of their repr) of every read the store makes, observed on the real replies."""

    def __init__(self, store: GraphStore):
        self.reads: list[tuple[int, int]] = []
        real = store._read

        def observed(query, params=None, **options):
            rows = real(query, params, **options)
            self.reads.append((len(rows), len(repr(rows))))
            return rows

        store._read = observed  # type: ignore[method-assign]

    def take(self) -> tuple[int, int]:
        """Rows and size of the reads since the last call."""
        rows, size = sum(r for r, _ in self.reads), sum(s for _, s in self.reads)
        self.reads.clear()
        return rows, size


#: A description of a usual length (extracted descriptions are a sentence or two).
SAID = "It is described at the length of a typical extracted description: a sentence or two about it."


def said(name: str) -> str:
    return f"{name}. {SAID}"


def cid(i: int) -> str:
    return f"c{i:05d}"


def write_hub(store: GraphStore) -> None:
    """ "Hub" in HUB_CHUNKS chunks (written in documents of 2,000), "Mid" in MID_CHUNKS, "One" in one; the same
    description length for each; "One" and "Mid" tied to "Hub"."""
    per_doc = 2000
    for d in range(HUB_CHUNKS // per_doc):
        chunks = [(cid(i), i) for i in range(d * per_doc, (d + 1) * per_doc)]
        entities = [ent("Hub", *[c for c, _ in chunks], description=said("Hub"))]
        if d == 0:
            entities += [
                ent("Mid", *[cid(i) for i in range(MID_CHUNKS)], description=said("Mid")),
                ent("One", cid(0), description=said("One")),
            ]
        store.upsert(
            f"doc-{d}", f"d{d}.txt", chunks, entities, [rel("One", "Hub", cid(0)), rel("Mid", "Hub", cid(1))] if d == 0 else []
        )


def test_reading_a_hub_entity_returns_as_much_as_reading_an_entity_of_one_chunk(store):
    write_hub(store)
    hub, mid, one = store.entities([eid("Hub"), eid("Mid"), eid("One")])
    assert (hub.chunk_count, mid.chunk_count, one.chunk_count) == (HUB_CHUNKS, MID_CHUNKS, 1)
    assert len(hub.chunk_ids) == len(mid.chunk_ids) == ENTITY_CHUNK_SAMPLE and one.chunk_ids == {cid(0)}
    assert hub.mentions == HUB_CHUNKS and store.chunk_ids_for([hub.id])[hub.id] == {cid(i) for i in range(HUB_CHUNKS)}

    reads = ReadLog(store)
    cost: dict[str, dict[str, tuple[int, int]]] = {}
    for name in ["Hub", "Mid", "One"]:
        cost[name] = {}
        store.entities([eid(name)])
        cost[name]["entities"] = reads.take()
        store.entities_by_names([name])
        cost[name]["name look-up"] = reads.take()
        store.neighbours([eid(name)], hops=0, limit=1)
        cost[name]["neighbours"] = reads.take()
        store.dedup_partners(partner_keys([Entity(entity_id_for(name, "PERSON"), name, "PERSON")]), leaving=[cid(1)])
        cost[name]["dedup partners"] = reads.take()
        store.chunks_of([eid(name)], 5)
        cost[name]["chunks (5)"] = reads.take()
    # the hub's reads are those of an entity with twice the sample: the same rows, the same size (but the count's digits)
    for what, (rows, size) in cost["Hub"].items():
        assert rows == cost["Mid"][what][0] and size - cost["Mid"][what][1] <= rows * len(str(HUB_CHUNKS)), (what, cost)
    for what, (rows, size) in cost["Hub"].items():
        one_rows, one_size = cost["One"][what]
        assert rows == one_rows, what
        # the difference is at most the sample of chunk ids (and the count's digits): the same order
        assert size <= one_size + rows * (ENTITY_CHUNK_SAMPLE * (len(repr(cid(0))) + 2) + 8), (what, size, one_size)
        assert size < 3 * one_size, (what, size, one_size)


def test_writing_and_removing_mentions_of_a_hub_reads_no_more_than_for_a_small_entity(store, client):
    write_hub(store)

    def props_size(name: str) -> int:
        rows = store.read("MATCH (e:Entity {id: $id}) RETURN properties(e)", {"id": eid(name)})
        return len(
            repr(
                {
                    k: v
                    for k, v in rows[0][0].items()
                    if k not in ("chunk_count", "id", "name", "name_key", "block_keys", "description")
                }
            )
        )

    assert props_size("Hub") == props_size("Mid")  # the node holds a sample, not the 20,000 ids

    reads = ReadLog(store)
    costs = {}
    for name, chunk in [("Hub", "n1"), ("One", "n2")]:
        with CommandLog(client) as log:
            store.upsert(f"new-{chunk}", f"{chunk}.txt", [(chunk, 0)], [ent(name, chunk, description="Seen again.")], [])
        costs[name] = (reads.take(), log.count("GRAPH.QUERY", "GRAPH.RO_QUERY"))
    (hub_rows, _), hub_queries = costs["Hub"]
    (one_rows, _), one_queries = costs["One"]
    assert hub_queries == one_queries and hub_rows == one_rows  # nothing read grows with the 20,000 mentions
    (hub,) = store.entities([eid("Hub")])
    assert hub.chunk_count == HUB_CHUNKS + 1 and hub.description == f"{said('Hub')} Seen again."

    report = store.remove_document("new-n1")
    (hub,) = store.entities([eid("Hub")])
    assert report.entities_kept == 1 and hub.chunk_count == HUB_CHUNKS and hub.description == said("Hub")

    # remove all but the last 10 of the hub's chunks: the count and the sample follow what is left
    store.remove_chunks([cid(i) for i in range(HUB_CHUNKS - 10)])
    (hub,) = store.entities([eid("Hub")])
    assert hub.chunk_count == 10 and hub.chunk_ids == {cid(i) for i in range(HUB_CHUNKS - 10, HUB_CHUNKS)}
    assert [(e.name, e.chunk_ids) for e in store.entities([eid("Mid"), eid("One")])] == [("One", {"n2"})]  # Mid is gone
    store.remove_chunks([cid(i) for i in range(HUB_CHUNKS - 10, HUB_CHUNKS)])
    assert store.entities([eid("Hub")]) == []


def test_removing_sampled_chunks_refills_the_sample_from_the_mentions_left(store):
    chunks = [(cid(i), i) for i in range(3 * ENTITY_CHUNK_SAMPLE)]
    store.upsert("doc-1", "a.txt", chunks, [ent("Hub", *[c for c, _ in chunks])], [])
    (hub,) = store.entities([eid("Hub")])
    first = sorted(hub.chunk_ids)
    store.remove_chunks(first[:5])
    (hub,) = store.entities([eid("Hub")])
    everything = store.chunk_ids_for([hub.id])[hub.id]
    assert hub.chunk_count == len(everything) == 3 * ENTITY_CHUNK_SAMPLE - 5
    assert len(hub.chunk_ids) == ENTITY_CHUNK_SAMPLE and hub.chunk_ids <= everything and not set(first[:5]) & hub.chunk_ids


def test_appending_to_descriptions_gives_what_a_rebuild_from_every_mention_gives(store):
    rng = random.Random(7)
    names = ["Acme", "Pump", "Valve", "Bolt"]
    sentences = [f"Fact {i} about it." for i in range(40)] + ["x" * 600 + "."]
    for d in range(12):
        chunks = [(f"d{d}-{j}", j) for j in range(3)]
        entities = []
        for c, _ in chunks:
            for name in rng.sample(names, 2):
                aliases = tuple(rng.sample([f"{name} Ltd", f"{name} Inc", name.upper()], rng.randint(0, 2)))
                entities.append(ent(name, c, description=" ".join(rng.sample(sentences, 2)), aliases=aliases))
        rels = [rel(entities[0].name, entities[1].name, chunks[0][0])] if entities[0].name != entities[1].name else []
        store.upsert(f"doc-{d}", f"{d}.txt", chunks, entities, rels)
        if d == 5:
            store.upsert(f"doc-{d}", f"{d}.txt", chunks[:1], [ent(names[0], chunks[0][0], description="Rewritten.")], [])
    before = {e.id: (e.description, e.aliases) for e in store.all_entities()}
    assert any(len(d) > 900 for d, _ in before.values())  # the bound was reached along the way

    assert store.rebuild_entities(before) == []  # a rebuild from every mention changes no description
    assert {e.id: (e.description, e.aliases) for e in store.all_entities()} == before


def test_a_graph_written_with_whole_chunk_lists_is_converted_at_the_next_write(store):
    store.upsert("doc-1", "a.txt", [(cid(i), i) for i in range(40)], [ent("Old", *[cid(i) for i in range(40)])], [])
    store.graph.query("MATCH (e:Entity) SET e.chunk_ids = $ids, e.chunk_count = NULL", {"ids": [cid(i) for i in range(40)]})
    (old,) = GraphStore(store.client, "topic-hub").entities([eid("Old")])
    assert old.chunk_count == 40 and len(old.chunk_ids) == ENTITY_CHUNK_SAMPLE  # read as before the conversion

    fresh = GraphStore(store.client, "topic-hub")
    fresh.ensure()
    rows = fresh.read("MATCH (e:Entity) RETURN e.chunk_count, size(e.chunk_ids)")
    assert rows == [[40, ENTITY_CHUNK_SAMPLE]] and fresh.count_mentions() == 0
    fresh.remove_chunks([cid(0)])
    assert fresh.entities([eid("Old")])[0].chunk_count == 39


#: Chunks in which the two hubs of the relationship test appear together.
TIE_CHUNKS = 2_000


def test_reading_a_hub_relationship_returns_as_much_as_reading_a_relationship_of_one_chunk(store):
    ids = [cid(i) for i in range(TIE_CHUNKS)]
    store.upsert(
        "doc-1",
        "a.txt",
        [(c, i) for i, c in enumerate(ids)],
        [ent("Hub", *ids), ent("Big", *ids), ent("One", cid(0)), ent("Two", cid(0))],
        [rel("Hub", "Big", *ids, description="Hub works with Big."), rel("One", "Two", cid(0), description="One knows Two.")],
    )
    reads = ReadLog(store)
    cost: dict[str, tuple[int, int]] = {}
    for a, b in [("Hub", "Big"), ("One", "Two")]:
        sub = store.neighbours([eid(a), eid(b)], hops=1, limit=2)
        cost[a] = reads.take()
        (tie,) = sub.relationships
        path = store.shortest_path(eid(a), eid(b), 2)
        cost[f"path {a}"] = reads.take()
        assert path is not None and path.relationships[0].chunk_ids == tie.chunk_ids
        if a == "Hub":
            assert tie.chunk_count == tie.mentions == TIE_CHUNKS and len(tie.chunk_ids) == RELATIONSHIP_CHUNK_SAMPLE
            assert tie.chunk_ids <= set(ids) and tie.description == "Hub works with Big."
        else:
            assert (tie.chunk_count, tie.chunk_ids) == (1, {cid(0)})
    for what in ["", "path "]:
        (rows, size), (one_rows, one_size) = cost[f"{what}Hub"], cost[f"{what}One"]
        assert rows == one_rows, (what, cost)
        # what differs is the samples of chunk ids and the counts' digits: both ends read twice, and the relationship
        assert size <= one_size + 5 * (ENTITY_CHUNK_SAMPLE * (len(repr(cid(0))) + 2) + 8), (what, cost)
        assert size < TIE_CHUNKS * (len(repr(cid(0))) + 2) // 10, (what, cost)  # the whole list is ten times this

    # the relationship keeps every chunk: whole-graph readers get them all, and a removal counts from them
    assert relationships_by_pair(store)[(eid("Hub"), eid("Big"))].chunk_ids == set(ids)
    store.remove_chunks(ids[:-10])
    (tie,) = store.neighbours([eid("Hub"), eid("Big")], hops=0, limit=2).relationships
    assert (tie.chunk_count, tie.chunk_ids, tie.description) == (10, set(ids[-10:]), "Hub works with Big.")
    store.remove_chunks(ids[-10:])
    assert store.neighbours([eid("Hub")], hops=1, limit=2).relationships == ()


def profile_records(store: GraphStore, query: str, params: dict) -> dict[str, int]:
    """GRAPH.PROFILE of a read on the real server: each operation (its line, stripped of its figures) → the records it
    produced (summed over operations of the same line)."""
    out: dict[str, int] = {}
    for line in store.graph.profile(query, params).plan:
        text = line.decode() if isinstance(line, bytes) else str(line)
        if "Records produced:" not in text:
            continue
        name = text.split("|")[0].strip()
        records = int(text.split("Records produced:")[1].split(",")[0])
        out[name] = out.get(name, 0) + records
    return out


def test_the_chunks_about_a_hub_are_found_without_walking_its_mentions(store):
    ids = [cid(i) for i in range(TIE_CHUNKS)]
    # "Hub" is named in 2,000 chunks of doc-1 and is the subject of one chunk of doc-2, which is also about "One"
    store.upsert("doc-1", "a.txt", [(c, i) for i, c in enumerate(ids)], [ent("Hub", *ids), ent("One", cid(0))], [])
    store.upsert(
        "doc-2",
        "hub.txt",
        [("about-hub", 0)],
        [ent("Hub", "about-hub"), ent("One", "about-hub")],
        [],
        subjects=[(eid("Hub"), "about-hub"), (eid("One"), "about-hub")],
    )
    reads = ReadLog(store)
    assert store.chunks_about([cid(5)]) == {cid(5): [("Hub", "about-hub")]}
    assert store.chunks_about_names(["Hub"]) == ["about-hub"]
    assert reads.take()[0] == 2

    for query, params in [(_CHUNKS_ABOUT, {"ids": [cid(5)]}), (_CHUNKS_ABOUT_NAMES, {"keys": ["hub"]})]:
        ops = profile_records(store, query, params)
        assert max(ops.values()) <= 10, ops  # a few records, not one per mention of the hub (2,000 before)

    # a graph written before the list existed: its mentions are walked (the same answer) until fill_about runs
    store.graph.query("MATCH (e:Entity) REMOVE e.about")
    assert store.chunks_about([cid(5)]) == {cid(5): [("Hub", "about-hub")]}
    assert max(profile_records(store, _CHUNKS_ABOUT, {"ids": [cid(5)]}).values()) >= TIE_CHUNKS
    assert store.fill_about() == 2 and store.fill_about() == 0
    assert store.read("MATCH (e:Entity) RETURN e.name, e.about ORDER BY e.name") == [
        ["Hub", ["about-hub"]],
        ["One", ["about-hub"]],
    ]
    assert store.chunks_about_names(["Hub", "One"]) == ["about-hub"]


def test_the_about_list_is_bounded_and_refilled_when_its_chunks_are_removed(store):
    many = 3 * ENTITY_ABOUT_SAMPLE
    chunks = [(f"a{i:03d}", i) for i in range(many)]
    store.upsert(
        "doc-1", "hub.txt", chunks, [ent("Hub", *[c for c, _ in chunks])], [], subjects=[(eid("Hub"), c) for c, _ in chunks]
    )
    store.upsert("doc-2", "b.txt", [("b0", 0)], [ent("Hub", "b0")], [])

    def about() -> list[str]:
        return store.read("MATCH (e:Entity {id: $id}) RETURN e.about", {"id": eid("Hub")})[0][0]

    first = about()
    assert len(first) == ENTITY_ABOUT_SAMPLE and set(first) <= {c for c, _ in chunks}
    store.remove_chunks(first[:5])
    after = about()
    assert len(after) == ENTITY_ABOUT_SAMPLE and not set(first[:5]) & set(after)  # refilled from the mentions left
    assert set(store.chunks_about(["b0"])["b0"]) == {("Hub", c) for c in after}
    store.remove_chunks([c for c, _ in chunks if c not in first[:5]])
    assert about() == [] and store.chunks_about(["b0"]) == {}


def test_a_merge_moves_the_chunks_about_an_entity_to_its_target(store):
    from ragtopics.graph.entity_edits import move_mentions  # entity_edits builds on the store module

    store.upsert("doc-1", "curie.txt", [("k1", 0)], [ent("M. Curie", "k1")], [], subjects=[(eid("M. Curie"), "k1")])
    store.upsert("doc-2", "other.txt", [("k2", 0)], [ent("Marie Curie", "k2"), ent("M. Curie", "k2")], [])
    (source,) = store.entities([eid("M. Curie")])
    move_mentions(store, source, "Marie Curie", "PERSON")
    assert store.read("MATCH (e:Entity) RETURN e.name, e.about") == [["Marie Curie", ["k1"]]]
    assert store.chunks_about_names(["Marie Curie"]) == ["k1"] and store.chunks_about(["k2"]) == {"k2": [("Marie Curie", "k1")]}


#: Ties of the hub in the tests of reading relationships by their two ends.
HUB_TIES = 600


def write_hub_ties(store: GraphStore) -> list[str]:
    """ "Hub" tied to HUB_TIES entities, each in a chunk of its own with the hub; returns those entities' names."""
    names = [f"Member {i:03d}" for i in range(HUB_TIES)]
    chunks = [(cid(i), i) for i in range(HUB_TIES)]
    store.upsert(
        "doc-1",
        "members.txt",
        chunks,
        [ent("Hub", *[c for c, _ in chunks]), *[ent(n, cid(i)) for i, n in enumerate(names)]],
        [
            rel("Hub", n, cid(i), strength=1.0 + i % 3, description=f"Hub counts {n} among its members.")
            for i, n in enumerate(names)
        ],
    )
    return names


def test_a_relationship_is_read_by_its_two_ends_without_walking_the_ties_of_a_hub(store):
    from ragtopics.graph.share import _RELATED_PAIRS  # the graph share builds on the store module
    from ragtopics.graph.store import _RELATIONSHIP_TEXTS, _TIE_DESCRIPTIONS

    names = write_hub_ties(store)
    pairs = [[eid("Hub"), eid(names[7])], [eid("Hub"), eid(names[300])]]
    assert store.relationship_descriptions([tuple(p) for p in pairs]) == {
        (eid("Hub"), eid(names[7])): f"Hub counts {names[7]} among its members.",
        (eid("Hub"), eid(names[300])): f"Hub counts {names[300]} among its members.",
    }
    for query in (_TIE_DESCRIPTIONS, _RELATIONSHIP_TEXTS, _RELATED_PAIRS):
        ops = profile_records(store, query, {"pairs": pairs})
        # both ends by their index, then the edge between them: a few records, not one per tie of the hub (600)
        assert max(ops.values()) <= 10, (query, ops)


def test_a_search_reads_the_subgraph_without_descriptions_and_the_items_shown_get_theirs(store):
    from ragtopics.graph.local import graph_items
    from ragtopics.storage.chunk_index import ChunkHit

    names = write_hub_ties(store)
    seeds = [eid("Hub"), eid(names[0]), eid(names[1])]
    full = store.neighbours(seeds, hops=1, limit=40)
    lean = store.neighbours(seeds, hops=1, limit=40, descriptions=False)
    assert len(full.relationships) == 39 and lean.entities == full.entities
    assert [replace(r, description="") for r in full.relationships] == list(lean.relationships)
    assert all(r.description for r in full.relationships)

    chunks = {
        c: ChunkHit(c, "doc-1", "members.txt", 0, "text", 0.5 + i / 1000)
        for i, c in enumerate(sorted({c for r in full.relationships for c in r.chunk_ids}))
    }
    ppr = {e.id: 1.0 / (1 + i) for i, e in enumerate(full.entities)}
    reads = ReadLog(store)
    shown = graph_items(lean, ppr, chunks, describe=store.relationship_descriptions)
    assert reads.take()[0] == sum(1 for i in shown if i.kind == "relationship")  # one query, a row per item shown
    assert shown == graph_items(full, ppr, chunks)
    assert any(i.kind == "relationship" and "among its members" in i.text for i in shown)


def test_the_share_read_before_a_new_documents_write_does_not_walk_the_ties_of_a_hub_it_names(store):
    from ragtopics.graph.share import _ENTITY_SCOPE, read_share  # the graph share builds on the store module

    names = write_hub_ties(store)
    planned = [eid("Hub"), eid(names[0])]
    sent: list[dict] = []
    real = store.read

    def observed(query, params=None):
        if query == _ENTITY_SCOPE:
            sent.append(params)
        return real(query, params)

    store.read = observed  # type: ignore[method-assign]
    share = read_share(store, "doc-2", ["new-chunk"], planned, [(eid("Hub"), eid(names[0]))])
    assert set(share.entities) == set(planned) and list(share.relationships) == [(eid("Hub"), eid(names[0]))]
    ops = profile_records(store, _ENTITY_SCOPE, sent[0])
    assert max(ops.values()) <= 10, ops  # not a record per tie of the hub (600)

    # a re-upload of doc-1 still reads what its stored chunks' relationships are (the hub's ties named there)
    again = read_share(store, "doc-1", [cid(0), cid(1)], planned)
    assert set(again.relationships) == {(eid("Hub"), eid(names[0])), (eid("Hub"), eid(names[1]))}
