"""Provenance of derived text: a re-upload or a delete leaves nothing in the graph of what only the removed
chunks said (entity descriptions and aliases, relationship descriptions and strengths), with the offline NLP
extraction and with a model's extraction; re-embedding a Topic leaves the graph with exactly the index's chunks."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ragtopics.answer.context import RetrievalQuery
from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import enqueue_document, get_document, upload_file
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.local import LocalRetriever
from ragtopics.graph.report import entity_info
from ragtopics.topics.topics import create_topic, get_topic, reembed_topic, update_settings
from ragtopics.tracing.trace import Trace
from ragtopics.ui.cli import main

#: Names the scripted extraction finds, with the aliases it reports when the text gives them.
KNOWN = {"Pump P-1": ("PRODUCT", "PX-1"), "Acme Corporation": ("ORGANIZATION", "")}


def sentence_extraction(body: dict) -> str:
    """A scripted Graph Extraction reply: each known name in the chunk, described by the sentences that name it,
    and one relationship between two known names in the same sentence, described by that sentence."""
    text = body["messages"][-1]["content"].split("Text:")[-1]
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    entities, relationships = [], []
    for name, (type_, alias) in KNOWN.items():
        said = [s for s in sentences if name in s]
        if said:
            aliases = [alias] if alias and alias in text else []
            entities.append({"name": name, "type": type_, "description": " ".join(said), "aliases": aliases})
    for s in sentences:
        if all(name in s for name in KNOWN):
            relationships.append({"source": "Pump P-1", "target": "Acme Corporation", "description": s, "strength": 4})
    return json.dumps({"entities": entities, "relationships": relationships})


#: (Topic settings, the name the extraction gives the pump): the offline NLP method names it by its code.
METHODS = {
    "NLP": ({"graph_extraction_method": "NLP", "chunk_size": 400, "chunk_overlap": 0}, "P-1"),
    "LLM": ({"graph_extraction_method": "LLM", "chunk_size": 400, "chunk_overlap": 0}, "Pump P-1"),
}
RECALLED = "Pump P-1, also called PX-1, was recalled in 2021 by Acme Corporation."
IN_SERVICE = "Pump P-1 is in service at Acme Corporation."
MADE = "Pump P-1 is made by Acme Corporation."


def topic_for(rt, scripted_llm, method: str, name: str):
    scripted_llm.replies["graph_extraction"] = sentence_extraction
    return create_topic(rt, name, kind="graphrag", settings=METHODS[method][0])


def pump_and_tie(rt, topic, pump: str) -> tuple[dict, dict]:
    """The pump as ``ragtopics graph T --entity`` shows it, and its relationship with Acme Corporation."""
    info = entity_info(rt, get_topic(rt, topic.id), pump)
    [tie] = [r for r in info["relationships"] if "Acme Corporation" in (r["source"], r["target"])]
    return info, tie


@pytest.mark.parametrize("method", METHODS)
def test_a_re_upload_leaves_nothing_of_the_replaced_version(rt, run_jobs, scripted_llm, method):
    topic = topic_for(rt, scripted_llm, method, f"Pumps {method}")
    pump = METHODS[method][1]
    upload_file(rt, topic, "maker.txt", MADE.encode())
    doc = upload_file(rt, topic, "pump.txt", RECALLED.encode())
    run_jobs()
    before, tie_before = pump_and_tie(rt, topic, pump)
    assert "recalled" in before["description"] and "made by" in before["description"]
    assert "recalled" in tie_before["description"] and graph_store(rt, topic).entity_by_name("PX-1") is not None

    upload_file(rt, topic, "pump.txt", IN_SERVICE.encode())
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed", get_document(rt, doc.id).error
    after, tie = pump_and_tie(rt, topic, pump)
    assert "recalled" not in after["description"] and "2021" not in after["description"]
    assert "in service" in after["description"] and "made by" in after["description"]
    assert "recalled" not in tie["description"] and "in service" in tie["description"] and "made by" in tie["description"]
    assert tie["chunks"] == 2 and tie["strength"] == tie_before["strength"]  # one chunk per file, each its own share
    assert graph_store(rt, topic).entity_by_name("PX-1") is None  # the alias (LLM) or entity (NLP) only v1 named
    assert len(after["chunk_ids"]) == 2

    # LOCAL search: what it finds about the pump, and the files it would cite for it, say nothing of the recall.
    topic = get_topic(rt, topic.id)
    question = "Was Pump P-1 recalled?"
    local = LocalRetriever(rt, topic, topic.settings)
    context = local.retrieve(RetrievalQuery(question, entities=(pump,)), Trace("chat", question))
    cited = [item for item in context.items if "pump.txt" in item.file_names]
    assert cited and any("in service" in item.text for item in cited)
    assert not any("recalled" in item.text or "2021" in item.text for item in context.items)


@pytest.mark.parametrize("method", METHODS)
def test_a_delete_leaves_nothing_of_the_deleted_file_in_what_stays(rt, run_jobs, scripted_llm, method, capsys):
    topic = topic_for(rt, scripted_llm, method, f"Deleted {method}")
    pump = METHODS[method][1]
    upload_file(rt, topic, "recall.txt", RECALLED.encode())
    upload_file(rt, topic, "service.txt", IN_SERVICE.encode())
    run_jobs()
    _, tie_before = pump_and_tie(rt, topic, pump)
    assert "recalled" in tie_before["description"] and tie_before["chunks"] == 2

    assert main(["docs", topic.name, "--delete", "recall.txt"]) == 0  # as ``ragtopics docs T --delete`` does it
    said = capsys.readouterr().out
    assert re.search(r"\b[1-9]\d* entit(y|ies) kept", said) and re.search(r"\b[1-9]\d* relationships? kept", said), said
    assert re.search(r"\b[1-9]\d* entity descriptions? rebuilt", said), said  # the pump's, at least
    assert main(["graph", topic.name, "--entity", pump]) == 0  # ``ragtopics graph T --entity``
    shown = json.loads(capsys.readouterr().out)
    assert "recalled" not in shown["description"] and "in service" in shown["description"]
    assert shown["relationships"] and not any("recalled" in r["description"] for r in shown["relationships"])
    after, tie = pump_and_tie(rt, topic, pump)
    assert "recalled" not in after["description"] and "in service" in after["description"]
    assert "recalled" not in tie["description"] and "in service" in tie["description"] and tie["chunks"] == 1
    assert tie["strength"] < tie_before["strength"]
    assert graph_store(rt, topic).entity_by_name("PX-1") is None
    # The entity that stays keeps its vector, made of its name: the name finds it at similarity 1.
    stored = graph_store(rt, topic).entity_by_name(pump)
    vector = rt.gateway.embed([stored.name])[0]
    [(found, score)] = graph_store(rt, topic).search_entities(np.asarray(vector), 1)
    assert found.id == stored.id and score > 0.999


def test_a_re_embed_leaves_the_graph_with_exactly_the_index_chunks(rt, run_jobs):
    topic = create_topic(rt, "Re-embedded", kind="graphrag", settings={**METHODS["NLP"][0], "chunk_size": 100})
    text = "\n\n".join([RECALLED, IN_SERVICE, MADE, "Acme Corporation builds pumps in Ostend since 1990."])
    doc = upload_file(rt, topic, "pumps.txt", text.encode())
    run_jobs()
    old = set(rt.chunk_index(topic.id).document_chunk_ids(doc.id))

    store = graph_store(rt, topic)
    acme = store.entity_by_name("Acme Corporation")
    store.set_embeddings([acme.id], np.random.default_rng(1).normal(size=(1, 384)))  # as an earlier model left it

    update_settings(rt, topic.id, {"chunk_size": 400})
    reembed_topic(rt, topic.id, enqueue_document)
    run_jobs()

    hits = store.search_entities(np.asarray(rt.gateway.embed(["Acme Corporation"])[0]), 3)
    assert next((e.id, round(score, 3)) for e, score in hits) == (acme.id, 1.0)  # made again by the configured model
    assert store.vectors.missing(e.id for e in store.all_entities()) == set()

    assert get_document(rt, doc.id).status == "indexed", get_document(rt, doc.id).error
    indexed = set(rt.chunk_index(topic.id).document_chunk_ids(doc.id))
    assert indexed and old - indexed  # other chunk sizes, other chunks
    graph = graph_store(rt, topic).graph
    assert {r[0] for r in graph.ro_query("MATCH (c:Chunk) RETURN c.id").result_set} == indexed
    cited = {c for r in graph.ro_query("MATCH (e:Entity) RETURN e.chunk_ids").result_set for c in r[0]}
    assert cited and cited <= indexed  # no entity is left supported by a chunk that is gone


def echo_report(body: dict) -> str:
    """A scripted community report whose summary repeats the entity and relationship lines it was given."""
    prompt = body["messages"][-1]["content"]
    return json.dumps({"title": "Pumps", "summary": " ".join(prompt.split("Entities:")[-1].split())})


def summaries(rt, topic) -> list[str]:
    """Every stored community report of a Topic as one text: title, summary and key relationships."""
    from ragtopics.graph.community_index import CommunityIndex

    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims)
    return [" ".join([r.title, r.summary, *r.key_relationships]) for r in index.get(list(index.get_hashes()))]


def test_community_summaries_keep_a_deleted_file_until_the_next_rebuild_then_nothing_of_it(rt, run_jobs, scripted_llm):
    from ragtopics.graph.lifecycle import recompute_due
    from ragtopics.graph.refresh import run_rebuild

    scripted_llm.replies["community_report"] = echo_report
    topic = topic_for(rt, scripted_llm, "NLP", "Summarised")
    upload_file(rt, topic, "recall.txt", RECALLED.encode())
    upload_file(rt, topic, "service.txt", IN_SERVICE.encode())
    run_jobs()
    assert run_rebuild(rt, topic.id)["status"] == "done"
    assert any("recalled" in s for s in summaries(rt, topic)) and any("in service" in s for s in summaries(rt, topic))

    delete_document(rt, topic, "recall.txt")
    assert any("recalled" in s for s in summaries(rt, topic))  # as the specification says: until the next rebuild
    assert recompute_due(rt, topic.id) == "recall.txt was deleted"

    result = run_rebuild(rt, topic.id)
    assert result["status"] == "done" and result["written"] >= 1
    texts = summaries(rt, topic)
    assert texts and not any("recall" in s or "2021" in s or "PX-1" in s for s in texts)
    assert any("in service" in s for s in texts) and recompute_due(rt, topic.id) == ""
