"""Entity bridging in LOCAL search: a chunk's heading marks what it is about, and an entity named in one of the
first chunks brings in the chunk about it, without help from file names (opaque ``doc NNNN.txt`` files);
entity vectors survive the updates every upload makes to the entities they belong to."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ragtopics.answer.context import RetrievalQuery
from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import upload_file
from ragtopics.graph.ingest import chunk_subjects, extraction_text, graph_store, subject_keys
from ragtopics.graph.local import LocalRetriever
from ragtopics.graph.model import Entity
from ragtopics.storage.chunk_index import ChunkRecord
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.tracing.trace import Trace

#: Opaque file names, each passage under its title line (as the HotpotQA and MuSiQue sets are laid out).
FILES = {
    "doc 0001.txt": "Blue Harbor\n\nBlue Harbor is a 1986 drama film directed by Maren Holt. It was shot in Leland.",
    "doc 0002.txt": "Leland\n\nLeland is a town in Brunswick County, North Carolina, on the Cape Fear River.",
    "doc 0003.txt": "Harbor Lights\n\nHarbor Lights is a 1986 drama film shot in a harbor town of Maine.",
    "doc 0004.txt": "Red Harbor\n\nRed Harbor is a drama film directed by Maren Holt and shot in 1990.",
    "doc 0005.txt": "Film locations\n\nMany drama films of the 1980s were shot in small harbor towns.",
}
QUESTION = "In which county is the town where the film Blue Harbor was shot?"


def chunk_of(rt, topic, file_name: str) -> str:
    index = rt.chunk_index(topic.id)
    [hit] = [h for h in index.search_vector(rt.gateway.embed([FILES[file_name]])[0], 10) if h.file_name == file_name]
    return hit.chunk_id


def test_subject_keys_read_headings_and_title_lines_only():
    assert subject_keys("Leland, North Carolina\n\nLeland is a town.") == {"lelandnorthcarolina"}
    assert subject_keys("Intro text.\n\n## 2.1 Pump P-1\nThe pump runs.") == {"pumpp1"}
    assert subject_keys("The pump was installed in the\nnorth wing of the plant.") == set()  # a wrapped sentence
    assert subject_keys("Was it shot in Leland?\n\nYes.") == set()  # a question is no title
    record = ChunkRecord("c1", "d1", "doc 0736.txt", 0, "Lovers of Music\n\nA film.", np.zeros(0, dtype=np.float32))
    assert extraction_text(record) == "Lovers of Music\n\nA film."  # an opaque file name is not put above as a title
    assert extraction_text(replace(record, file_name="Lovers of Music (film).txt")).startswith("Lovers of Music (film)\n\n")
    mentions = [
        Entity("ent-1", "Leland", "PLACE", chunk_ids=frozenset({"c1", "c2"})),
        Entity("ent-2", "Cape Fear", "PLACE", aliases=("Cape Fear River",), chunk_ids=frozenset({"c2"})),
    ]
    assert chunk_subjects(mentions, {"c1": {"blueharbor"}, "c2": {"leland", "capefearriver"}}) == {
        ("ent-1", "c2"),
        ("ent-2", "c2"),
    }


def test_an_entity_named_in_a_first_chunk_brings_in_the_chunk_about_it(rt, run_jobs):
    topic = create_topic(rt, "Bridges", kind="graphrag", settings={"graph_extraction_method": "NLP"})
    for name, text in FILES.items():
        upload_file(rt, topic, name, text.encode())
    run_jobs()
    topic = get_topic(rt, topic.id)
    film, town = chunk_of(rt, topic, "doc 0001.txt"), chunk_of(rt, topic, "doc 0002.txt")
    store = graph_store(rt, topic)
    assert ("Leland", town) in store.chunks_about([film])[film]  # the town's passage is about Leland; the film's names it
    assert film not in {cid for _, cid in store.chunks_about([town]).get(town, [])}  # Blue Harbor is not named there

    dense = [h.file_name for h in rt.chunk_index(topic.id).search_vector(rt.gateway.embed([QUESTION])[0], 5)]
    assert dense.index("doc 0002.txt") > 1  # by similarity alone the town's passage is not second

    trace = Trace("chat", QUESTION)
    context = LocalRetriever(rt, topic, topic.settings).retrieve(RetrievalQuery(QUESTION), trace)
    files = [item.provenance[0].file_name for item in context.items if item.kind == "chunk"]
    assert files.index("doc 0002.txt") == files.index("doc 0001.txt") + 1
    bridges = next(e.data for e in trace.events if e.step == "rank_chunks")["bridges"]
    assert {"seed": film, "chunk": town, "name": "Leland"} in [{k: b[k] for k in ("seed", "chunk", "name")} for b in bridges]

    delete_document(rt, topic, "doc 0002.txt")  # what the town's passage was about goes with it
    assert town not in {cid for _, cid in graph_store(rt, topic).chunks_about([film]).get(film, [])}


def test_entity_vectors_survive_the_updates_of_later_uploads_and_go_with_their_entity(rt, run_jobs):
    topic = create_topic(rt, "Vectors", kind="graphrag", settings={"graph_extraction_method": "NLP"})
    upload_file(rt, topic, "a.txt", b"Marie Curie worked in Paris with Pierre Curie.")
    run_jobs()
    upload_file(rt, topic, "b.txt", b"Marie Curie was born in Warsaw, Poland.")  # updates Marie Curie
    run_jobs()
    store = graph_store(rt, get_topic(rt, topic.id))
    curie = store.entity_by_name("Marie Curie")
    assert curie is not None and len(curie.chunk_ids) == 2
    hits = store.search_entities(np.asarray(rt.gateway.embed(["Marie Curie"])[0]), 3)
    assert next((e.id, round(score, 3)) for e, score in hits) == (curie.id, 1.0)  # still indexed, its vector made of its name

    warsaw = store.entity_by_name("Warsaw")
    delete_document(rt, get_topic(rt, topic.id), "b.txt")
    assert store.entity_by_name("Warsaw") is None and store.vectors.missing([warsaw.id]) == {warsaw.id}
    assert store.vectors.missing([curie.id]) == set()
