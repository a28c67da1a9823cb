"""LOCAL and PATH search of a GraphRAG Topic on a small fixed graph, written through the real stores
(FalkorDB graph with entity vectors and the full-text index, RediSearch chunk index, bundled embedder)."""

from __future__ import annotations

import re

import pytest

from ragtopics.answer.context import RetrievalQuery
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.local import LocalRetriever, rank_chunks
from ragtopics.graph.model import Entity, Relationship, entity_id_for
from ragtopics.graph.path import MAX_NAME_LOOKUPS, PathRetriever, candidate_names, named_entities
from ragtopics.storage.chunk_index import ChunkRecord
from ragtopics.topics.topics import create_topic
from ragtopics.tracing.trace import Trace
from tests.redis_commands import CommandLog

TYPES = {
    "Radium": "ELEMENT",
    "Polonium": "ELEMENT",
    "Sorbonne": "ORGANIZATION",
    "Paris": "PLACE",
    "Szeged": "PLACE",
    "Hungary": "PLACE",
    "Zorblax Engine": "PRODUCT",
    "England": "PLACE",
    "Germany": "PLACE",
    "Britain": "PLACE",
    "Patent Registry": "ORGANIZATION",
    "Steam Engine": "PRODUCT",
    "Eriskay": "PLACE",
    "Outer Hebrides": "PLACE",
}
DESCRIPTIONS = {
    "Marie Curie": "A physicist and chemist who discovered radium.",
    "Pierre Curie": "A physicist, husband of Marie Curie.",
    "Radium": "A radioactive chemical element.",
    "Polonium": "A radioactive chemical element.",
    "Sorbonne": "A university in Paris.",
    "Paris": "The capital of France.",
    "Zorblax Engine": "A rotary engine.",
    "Hilda Varga": "An engineer.",
    "Szeged": "A city.",
    "Hungary": "A country in Central Europe.",
}

#: chunk id → (file, text, entity names, relationships as (source, target, description)).
CHUNKS = {
    "chunk-k1": (
        "curie.txt",
        "Marie Curie discovered radium and polonium in Paris.",
        ["Marie Curie", "Radium", "Polonium", "Paris"],
        [("Marie Curie", "Radium", "She discovered radium."), ("Marie Curie", "Polonium", "She discovered polonium.")],
    ),
    "chunk-k2": (
        "curie.txt",
        "Marie Curie married Pierre Curie, a physicist, in 1895.",
        ["Marie Curie", "Pierre Curie"],
        [("Marie Curie", "Pierre Curie", "Married in 1895.")],
    ),
    "chunk-k3": (
        "sorbonne.txt",
        "Pierre Curie taught physics at the Sorbonne.",
        ["Pierre Curie", "Sorbonne"],
        [("Pierre Curie", "Sorbonne", "He taught physics there.")],
    ),
    "chunk-k4": (
        "sorbonne.txt",
        "The Sorbonne is a university in Paris.",
        ["Sorbonne", "Paris"],
        [("Sorbonne", "Paris", "It is in Paris.")],
    ),
    "chunk-k5": (
        "varga.txt",
        "The Zorblax engine was invented by Hilda Varga.",
        ["Zorblax Engine", "Hilda Varga"],
        [("Zorblax Engine", "Hilda Varga", "Invented by her.")],
    ),
    "chunk-k6": (
        "varga.txt",
        "Varga grew up on a farm near Szeged and later moved to Budapest.",
        ["Hilda Varga", "Szeged"],
        [("Hilda Varga", "Szeged", "Grew up near Szeged.")],
    ),
    "chunk-k7": (
        "varga.txt",
        "Szeged is a city in the south of Hungary.",
        ["Szeged", "Hungary"],
        [("Szeged", "Hungary", "A city in it.")],
    ),
    "chunk-k8": (
        "engines.txt",
        "The steam engine was invented in England, the country where its inventors were born.",
        ["Steam Engine", "England"],
        [("Steam Engine", "England", "Invented there.")],
    ),
    "chunk-k9": (
        "engines.txt",
        "Which country an engine inventor was born in is listed in the Patent Registry.",
        ["Patent Registry"],
        [],
    ),
    "chunk-k10": (
        "engines.txt",
        "Jet engine inventors were born in Britain and Germany.",
        ["Britain", "Germany"],
        [("Britain", "Germany", "Both had jet engine inventors.")],
    ),
    "chunk-k11": (
        "island.txt",
        "Eriskay is an island in the Outer Hebrides.",
        ["Eriskay", "Outer Hebrides"],
        [("Eriskay", "Outer Hebrides", "An island of them.")],
    ),
}


def eid(name: str) -> str:
    return entity_id_for(name, TYPES.get(name, "PERSON"))


@pytest.fixture
def topic(rt):
    """A GraphRAG Topic holding :data:`CHUNKS` as five documents, with entity vectors and the full-text index."""
    topic = create_topic(rt, "Physics", kind="graphrag")
    store, index = graph_store(rt, topic), rt.chunk_index(topic.id)
    vectors = rt.gateway.embed([text for _, text, _, _ in CHUNKS.values()])
    by_file: dict[str, list[str]] = {}
    for cid, (file_name, *_rest) in CHUNKS.items():
        by_file.setdefault(file_name, []).append(cid)
    for file_name, ids in by_file.items():
        doc = f"doc-{file_name.split('.')[0]}"
        index.replace_document(
            doc,
            [
                ChunkRecord(
                    cid, doc, file_name, n, CHUNKS[cid][1], vectors[list(CHUNKS).index(cid)], keywords=CHUNKS[cid][1].lower()
                )
                for n, cid in enumerate(ids)
            ],
        )
        entities = [
            Entity(eid(name), name, TYPES.get(name, "PERSON"), DESCRIPTIONS.get(name, ""), (), frozenset({cid}))
            for cid in ids
            for name in CHUNKS[cid][2]
        ]
        rels = [Relationship(eid(a), eid(b), desc, 1.0, frozenset({cid})) for cid in ids for a, b, desc in CHUNKS[cid][3]]
        store.upsert(doc, file_name, [(cid, n) for n, cid in enumerate(ids)], entities, rels)
    names = sorted({name for _, _, found, _ in CHUNKS.values() for name in found})
    texts = [f"{n}: {DESCRIPTIONS[n]}" if n in DESCRIPTIONS else n for n in names]
    store.set_embeddings([eid(n) for n in names], rt.gateway.embed(texts))
    store.ensure_keyword_index()
    return topic


def local(rt, topic, question: str, *, entities: tuple[str, ...] = (), **settings):
    trace = Trace("chat", question)
    cfg = topic.settings.model_copy(update=settings)
    return LocalRetriever(rt, topic, cfg).retrieve(RetrievalQuery(question, entities=entities), trace), trace


def path(rt, topic, question: str, **settings):
    trace = Trace("chat", question)
    cfg = topic.settings.model_copy(update=settings)
    return PathRetriever(rt, topic, cfg).retrieve(RetrievalQuery(question), trace), trace


def step(trace: Trace, name: str) -> dict:
    return next(e.data for e in trace.events if e.step == name)


def chunk_ids(context) -> list[str]:
    return [item.id for item in context.items if item.kind == "chunk"]


def test_each_seed_strategy_takes_its_seeds_from_its_own_source(rt, topic):
    nodes = step(local(rt, topic, "Who discovered radium?", seed_strategy="NODES")[1], "seeds")["sources"]
    chunks = step(local(rt, topic, "Who discovered radium?", seed_strategy="CHUNKS")[1], "seeds")["sources"]
    context, trace = local(rt, topic, "Who discovered radium?", seed_strategy="FUSED")
    fused = step(trace, "seeds")

    assert set(nodes) == {"named", "nodes"} and "Radium" in nodes["nodes"]
    assert set(chunks) == {"named", "chunks"} and set(chunks["chunks"][:2]) == {"Polonium", "Radium"}  # rarest first
    assert chunks["chunks"][2:4] == ["Paris", "Marie Curie"]  # each in two chunks
    assert set(fused["sources"]) == {"named", "nodes", "chunks", "keywords"}
    assert "Radium" in fused["sources"]["keywords"]  # the full-text index holds the name
    assert fused["seeds"][0] == "Radium"  # first in all three lists
    assert chunk_ids(context)[0] == "chunk-k1" and context.route == "LOCAL" and context.note == ""
    first = context.items[0]
    assert first.provenance[0].file_name == "curie.txt" and first.provenance[0].chunk_ids == ("chunk-k1",)
    assert 0.3 < first.score <= 1.0  # the chunk's cosine to the question


def test_a_named_entity_is_always_a_seed(rt, topic):
    _, trace = local(rt, topic, "Who discovered radium?", entities=("Eriskay",), seed_strategy="NODES", top_k_nodes=1)
    assert step(trace, "seeds")["seeds"][0] == "Eriskay" and step(trace, "seeds")["sources"]["named"] == ["Eriskay"]


def test_hop_depth_decides_which_chunks_are_collected(rt, topic):
    only = {
        "seed_strategy": "NODES",
        "top_k_nodes": 1,
        "top_k_unlinked_chunks": 0,
        "max_cited_chunks": 10,
        "local_keyword_search": False,
    }  # keyword hits are found without the graph
    seed_only, trace0 = local(rt, topic, "Tell me about Pierre Curie, the husband", hop_depth=0, **only)
    one_hop, trace1 = local(rt, topic, "Tell me about Pierre Curie, the husband", hop_depth=1, **only)

    assert step(trace0, "seeds")["seeds"] == ["Pierre Curie"]
    assert step(trace0, "expand")["names"] == ["Pierre Curie"]
    assert set(chunk_ids(seed_only)) == {"chunk-k2", "chunk-k3"}
    assert set(step(trace1, "expand")["names"]) == {"Pierre Curie", "Marie Curie", "Sorbonne"}
    assert set(chunk_ids(one_hop)) == {"chunk-k1", "chunk-k2", "chunk-k3", "chunk-k4"}


def test_max_subgraph_nodes_and_max_cited_chunks_are_honoured(rt, topic):
    context, trace = local(
        rt,
        topic,
        "Who discovered radium?",
        seed_strategy="NODES",
        top_k_nodes=1,
        hop_depth=3,
        max_subgraph_nodes=2,
        max_cited_chunks=2,
    )
    expanded = step(trace, "expand")
    assert expanded["entities"] == 2 and expanded["names"][0] == step(trace, "seeds")["seeds"][0]
    assert step(trace, "collect_chunks")["fetched"] > 2
    assert len(chunk_ids(context)) == 2
    entities = [i for i in context.items if i.kind == "entity"]
    assert {i.text.split(" (")[0] for i in entities} == set(expanded["names"])
    for item in entities:  # provenance: the documents of the entity's chunks, each naming those chunks
        assert item.provenance and all(
            CHUNKS[c][0] == p.file_name and item.text.split(" (")[0] in CHUNKS[c][2] for p in item.provenance for c in p.chunk_ids
        )
    relationships = [i for i in context.items if i.kind == "relationship"]
    assert len(relationships) == 1 and relationships[0].text.split(" —[")[0] in expanded["names"]


def test_nothing_above_the_min_similarity_score_gives_an_empty_context_with_a_note(rt, topic):
    context, trace = local(rt, topic, "Who discovered radium?", seed_strategy="NODES", min_similarity_score=0.99)
    assert context.items == () and "Min. Similarity Score (0.99)" in context.note
    assert step(trace, "local")["note"] == context.note
    fused, _ = local(rt, topic, "Qwxzvbn plorkt?", min_similarity_score=0.5)
    assert fused.items == () and "Min. Similarity Score" in fused.note


def test_personalized_pagerank_keeps_the_bridging_chunk_that_cosine_alone_would_drop(rt, topic):
    question = "In which country was the inventor of the Zorblax engine born?"
    context, trace = local(
        rt, topic, question, seed_strategy="NODES", top_k_nodes=1, hop_depth=2, max_cited_chunks=3, local_keyword_search=False
    )  # keyword hits ("inventor", "born") are not the graph's
    ranked = {r["chunk_id"]: r for r in step(trace, "rank_chunks")["top"]}
    by_cosine = sorted(ranked, key=lambda cid: -ranked[cid]["cosine"])

    assert step(trace, "seeds")["seeds"] == ["Zorblax Engine"]
    assert by_cosine.index("chunk-k6") >= 4  # the bridge shares few words with the question
    assert chunk_ids(context)[0] == "chunk-k5"
    assert "chunk-k6" in chunk_ids(context)  # Zorblax Engine → Hilda Varga → Szeged
    assert ranked["chunk-k6"]["ppr"] > max(ranked[c]["ppr"] for c in ("chunk-k8", "chunk-k9", "chunk-k10"))
    assert "chunk-k8" not in chunk_ids(context) and "chunk-k10" not in chunk_ids(context)


def test_rank_chunks_fuses_pagerank_and_cosine_orders():
    ppr = {"a": 0.5, "b": 0.3, "c": 0.1, "d": 0.05, "e": 0.01}
    cosine = {"a": 0.1, "b": 0.8, "c": 0.5, "d": 0.4, "e": 0.9}
    # second in both orders beats first in one and last in the other; a and e tie, the higher cosine first
    assert rank_chunks(ppr, cosine)[:3] == ["b", "e", "a"]


def test_path_answers_from_the_chain_and_the_chunks_behind_it(rt, topic):
    context, trace = path(rt, topic, "How is Radium related to the Sorbonne?")

    assert context.route == "PATH" and context.note == ""
    chain = context.items[0]
    assert chain.kind == "path"
    assert chain.text == (
        "Radium —[She discovered radium.]— Marie Curie —[Married in 1895.]— Pierre Curie —[He taught physics there.]— Sorbonne"
    )
    assert {p.file_name for p in chain.provenance} == {"curie.txt", "sorbonne.txt"}
    assert chunk_ids(context)[:3] == ["chunk-k1", "chunk-k2", "chunk-k3"]  # one per relationship, in chain order
    assert set(chunk_ids(context)) == {"chunk-k1", "chunk-k2", "chunk-k3", "chunk-k4"}  # also the entities' chunks
    assert step(trace, "path")["chain"] == ["Radium", "Marie Curie", "Pierre Curie", "Sorbonne"]
    assert [r["how"] for r in step(trace, "path")["entities"]] == ["name", "name"]


def test_path_resolves_a_misspelt_name_by_fuzzy_matching(rt, topic):
    context, trace = path(rt, topic, "How is Marie Curei connected to the Sorbonne?")
    assert context.route == "PATH"
    assert step(trace, "path")["entities"][0] | {"score": 0} == {
        "entity": "Marie Curie",
        "name": "Marie Curei",
        "how": "fuzzy",
        "score": 0,
    }
    assert step(trace, "path")["chain"] == ["Marie Curie", "Pierre Curie", "Sorbonne"]


def test_path_with_one_entity_falls_back_to_local_with_a_note(rt, topic):
    context, trace = path(rt, topic, "How is Radium related to the weather?")
    assert context.route == "LOCAL" and context.note == "PATH found one entity (Radium); LOCAL instead"
    assert step(trace, "path")["fallback"] == "PATH found one entity (Radium)"
    assert "chunk-k1" in chunk_ids(context) and step(trace, "local")


def test_path_without_a_chain_falls_back_to_local_with_a_note(rt, topic):
    apart, trace = path(rt, topic, "How is Radium related to Hungary?")
    assert apart.route == "LOCAL" and apart.note == "no chain of at most 4 hops between Radium and Hungary; LOCAL instead"
    assert apart.items and "no chain" in step(trace, "path")["fallback"]

    too_long, _ = path(rt, topic, "How is Radium related to the Sorbonne?", path_max_hops=2)
    assert too_long.route == "LOCAL"
    assert too_long.note == "no chain of at most 2 hops between Radium and Sorbonne; LOCAL instead"


LONG_QUESTION = (
    "Did Marie Curie of the Royal Swedish Academy of Sciences and Hilda Varga of the Budapest Technical "
    "University ever meet Pierre Curie at the Sorbonne in Paris or Szeged in Hungary?"
)


def test_the_names_of_a_question_are_looked_up_in_one_graph_query(rt, topic):
    store = graph_store(rt, topic)
    assert len(candidate_names(LONG_QUESTION)) > MAX_NAME_LOOKUPS  # the most a routed turn looks up
    with CommandLog(rt.redis) as log:
        found = named_entities(store, LONG_QUESTION, ["Radium"])
    assert log.count("GRAPH.RO_QUERY", "GRAPH.QUERY") == 1
    one_by_one: dict[str, str] = {}  # what a look-up per name finds (as before), skipping names inside found ones
    tried: list[str] = []
    for name in list(dict.fromkeys(["Radium", *candidate_names(LONG_QUESTION)]))[:MAX_NAME_LOOKUPS]:
        if (
            len(one_by_one) < 5
            and not any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", t) for t in tried)
            and (entity := store.entity_by_name(name)) is not None
        ):
            one_by_one.setdefault(entity.id, entity.name)
            tried.append(name)
    assert found == tuple(one_by_one.values()) and {"Radium", "Marie Curie", "Pierre Curie"} <= set(found)

    with CommandLog(rt.redis) as log:
        context, trace = path(rt, topic, LONG_QUESTION)
    assert context.route == "PATH" and len(step(trace, "resolve_entities")["names"]) == 40  # (the trace keeps 40)
    # one query resolves every name; the others are the chain, its entity look-ups and the vector searches
    name_queries = [c for c in log.commands if c[0].startswith("GRAPH.") and "name_key" in " ".join(c)]
    assert len(name_queries) == 1


def test_candidate_names_try_capitalised_runs_before_content_words():
    names = candidate_names('How is the University of Paris related to "Hilda Varga" and radium?')
    assert names[:2] == ["Hilda Varga", "University of Paris"]
    assert names.index("Paris") < names.index("radium") and "How" not in names and "of" not in names


def test_relation_words_are_not_taken_for_names():
    names = candidate_names("How is Nobody Foo related to Zeta Bar?")
    assert "related" not in names and {"Nobody Foo", "Zeta Bar"} <= set(names)
    assert not {"connected", "linked"} & set(candidate_names("How are apples connected or linked to pears?"))
