"""Relationship descriptions that reach MAX_DESCRIPTION_CHARS, written and removed by the thousand, on the real FalkorDB.

A 5,000-chunk upload of short paragraphs ("Pump P-n at <station> Station is serviced by <crew> Crew.") ties each
station to each crew in about 70 chunks, each with a sentence of its own: those relationships' descriptions fill
up, and the graph write merging them was refused by FalkorDB ("Property values can only be of primitive types or
arrays of primitive types") or crashed the server. These tests write the same shape, smaller, and compare every
stored description with :func:`merged_sentences` over the relationship's chunks.
"""

from __future__ import annotations

from ragtopics.graph.model import Entity, Relationship, entity_id_for
from ragtopics.graph.store import MAX_DESCRIPTION_CHARS, GraphStore, merged_sentences
from tests.graph.test_store import client, store  # noqa: F401 (fixtures)

#: Stations and crews: every (station, crew) pair is a relationship (STATIONS * CREWS of them).
STATIONS, CREWS = 20, 15
#: Chunks per relationship, each with its own sentence: more than MAX_DESCRIPTION_CHARS holds.
PER_PAIR = 24


def sentence(n: int) -> str:
    return f"Pump P-{n} is serviced at this station by this crew on every second day."


def write_pairs(store: GraphStore) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """One document whose chunk n names station n % STATIONS and crew n // STATIONS % CREWS; returns each
    relationship's ``(chunk id, sentence)`` in chunk order."""
    total = STATIONS * CREWS * PER_PAIR
    chunks = [(f"c{n:06d}", n) for n in range(total)]
    station = [entity_id_for(f"Station {s}", "PLACE") for s in range(STATIONS)]
    crew = [entity_id_for(f"Crew {c}", "ORGANIZATION") for c in range(CREWS)]
    entities: list[Entity] = []
    relationships: list[Relationship] = []
    said: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for n, (cid, _) in enumerate(chunks):
        s, c = n % STATIONS, n // STATIONS % CREWS
        entities += [
            Entity(station[s], f"Station {s}", "PLACE", "", (), frozenset({cid})),
            Entity(crew[c], f"Crew {c}", "ORGANIZATION", "", (), frozenset({cid})),
        ]
        relationships.append(Relationship(station[s], crew[c], sentence(n), 1.0, frozenset({cid})))
        said.setdefault((station[s], crew[c]), []).append((cid, sentence(n)))
    store.upsert("doc-pumps", "pumps.txt", chunks, entities, relationships)
    return {pair: sorted(rows) for pair, rows in said.items()}


def stored_descriptions(store: GraphStore) -> dict[tuple[str, str], str]:
    return {(r.source_id, r.target_id): r.description for r in store.all_relationships()}


def test_thousands_of_relationships_whose_descriptions_fill_up_are_written_whole(store):
    said = write_pairs(store)

    stored = stored_descriptions(store)
    assert len(stored) == STATIONS * CREWS
    assert stored == {pair: merged_sentences(text for _, text in rows) for pair, rows in said.items()}
    for pair, rows in said.items():  # each one filled up: its first chunk's sentence first, no room for another
        assert stored[pair].startswith(rows[0][1] + " ") and len(stored[pair]) > MAX_DESCRIPTION_CHARS - len(rows[0][1]) - 1


def test_removing_chunks_rebuilds_full_descriptions_from_the_chunks_left(store):
    said = write_pairs(store)
    total = STATIONS * CREWS * PER_PAIR
    gone = {f"c{n:06d}" for n in range(total) if n // (STATIONS * CREWS) % 3 == 0}  # a third of each relationship's

    report = store.remove_chunks(gone)

    assert report.relationships_kept == STATIONS * CREWS and report.relationships_removed == 0
    assert stored_descriptions(store) == {
        pair: merged_sentences(text for cid, text in rows if cid not in gone) for pair, rows in said.items()
    }
