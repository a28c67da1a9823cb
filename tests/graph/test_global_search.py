"""GLOBAL: community summaries selected by similarity, read one by one (a typed model call each, or ranked
by the bundled embedding model), unhelpful ones dropped, nothing before the first community run."""

from __future__ import annotations

import json

import pytest

from ragtopics.answer.context import RetrievalQuery
from ragtopics.answer.extractive import overview_subject
from ragtopics.documents.uploads import upload_file
from ragtopics.graph.community_index import CommunityHit
from ragtopics.graph.global_search import (
    GlobalRetriever,
    is_overview,
    rank_by_subject,
    subject_score,
    subject_sentence,
    subject_title,
)
from ragtopics.graph.model import Entity, entity_id_for
from ragtopics.graph.refresh import run_rebuild
from ragtopics.prompts.templates import GLOBAL_MAP
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.tracing.trace import Trace
from tests.graph.test_upload import CURIE, EINSTEIN, NLP

QUESTION = "What are the main themes of these documents about physicists and the Nobel Prize?"


def built_topic(rt, run_jobs, scripted_llm, name="Themes"):
    scripted_llm.replies["community_report"] = lambda body: json.dumps(
        {
            "title": "Nobel Prize physicists" if "Nobel" in body["messages"][-1]["content"] else "Other things",
            "summary": "Marie Curie and Albert Einstein won the Nobel Prize in Physics. They worked in Paris and Berlin.",
        }
    )
    topic = create_topic(rt, name, kind="graphrag", settings={**NLP, "min_similarity_score": 0.0})
    upload_file(rt, topic, "curie.txt", CURIE.encode())
    upload_file(rt, topic, "einstein.txt", EINSTEIN.encode())
    run_jobs()
    return get_topic(rt, topic.id)


def test_before_the_first_community_run_global_finds_nothing_and_says_why(rt, run_jobs, scripted_llm):
    topic = built_topic(rt, run_jobs, scripted_llm)
    context = GlobalRetriever(rt, topic, topic.settings, GLOBAL_MAP).retrieve(RetrievalQuery(QUESTION), Trace("chat", "q"))
    assert context.items == () and "Recompute Communities Now" in context.note


def test_the_map_step_reads_each_summary_and_drops_the_unhelpful(rt, run_jobs, scripted_llm):
    topic = built_topic(rt, run_jobs, scripted_llm)
    written = run_rebuild(rt, topic.id)["written"]
    assert written >= 2

    def map_reply(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        if "Title: Nobel Prize physicists" in prompt:
            return json.dumps({"helpful": True, "points": ["Curie and Einstein won the Nobel Prize in Physics."], "score": 90})
        return json.dumps({"helpful": False, "points": [], "score": 0})

    scripted_llm.replies["global_map"] = map_reply
    trace = Trace("chat", "q")
    context = GlobalRetriever(rt, topic, topic.settings, GLOBAL_MAP).retrieve(RetrievalQuery(QUESTION), trace)
    asked = scripted_llm.prompts("global_map")
    assert len(asked) == min(written, topic.settings.top_k_reports)  # one call per selected summary
    assert [e.kind for e in context.items] == ["community_report"] * len(context.items) and context.items
    assert all(e.provenance == () for e in context.items)  # no source files
    assert all("Curie and Einstein won the Nobel Prize" in e.text for e in context.items)
    [mapped] = [e for e in trace.events if e.step == "global_map"]
    assert mapped.data["method"] == "model" and mapped.data["kept"] == len(context.items)


def test_with_the_bundled_model_the_map_step_ranks_sentences_by_embedding(rt, reconfigure, run_jobs, scripted_llm):
    topic = built_topic(rt, run_jobs, scripted_llm, name="Bundled")
    run_rebuild(rt, topic.id)
    reconfigure(LLM_BASE_URL=None)  # the Language Model is the bundled one now: no map call may be made
    trace = Trace("chat", "q")
    context = GlobalRetriever(rt, topic, topic.settings, GLOBAL_MAP).retrieve(RetrievalQuery(QUESTION), trace)
    assert context.items and scripted_llm.prompts("global_map") == []
    assert any("Nobel Prize" in e.text for e in context.items)
    assert next(e for e in trace.events if e.step == "global_map").data["method"] == "embedding"


def test_nothing_above_the_min_similarity_score_finds_nothing(rt, run_jobs, scripted_llm):
    topic = built_topic(rt, run_jobs, scripted_llm, name="Strict")
    run_rebuild(rt, topic.id)
    strict = topic.settings.model_copy(update={"min_similarity_score": 0.99})
    context = GlobalRetriever(rt, topic, strict, GLOBAL_MAP).retrieve(RetrievalQuery(QUESTION), Trace("chat", "q"))
    assert context.items == () and "Min. Similarity Score" in context.note


def test_a_change_during_a_rebuild_keeps_the_recompute_due(rt, run_jobs, scripted_llm, monkeypatch):
    from ragtopics.graph import refresh
    from ragtopics.graph.lifecycle import mark_recompute_due, recompute_due

    topic = built_topic(rt, run_jobs, scripted_llm, name="Racing")
    assert recompute_due(rt, topic.id) == "einstein.txt was uploaded and 1 other change"
    run_rebuild(rt, topic.id)
    assert recompute_due(rt, topic.id) == ""  # nothing changed while it ran: cleared
    mark_recompute_due(rt, topic.id, "curie.txt was uploaded")
    original = refresh.rebuild

    def rebuild_with_an_upload(*args, **kwargs):
        result = original(*args, **kwargs)
        mark_recompute_due(rt, topic.id, "bohr.txt was uploaded")  # an upload indexed while the rebuild ran
        return result

    monkeypatch.setattr(refresh, "rebuild", rebuild_with_an_upload)
    run_rebuild(rt, topic.id)
    assert recompute_due(rt, topic.id) == "bohr.txt was uploaded and 1 other change"


def test_an_overview_question_reads_the_largest_communities_whatever_their_similarity(rt, reconfigure, run_jobs, scripted_llm):
    from ragtopics.graph.community_index import CommunityIndex

    topic = built_topic(rt, run_jobs, scripted_llm, name="Overview")
    reconfigure(LLM_BASE_URL=None)  # offline: the report is built from the graph and the map ranks by embedding
    run_rebuild(rt, topic.id)
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims, embedding_model=rt.gateway.embedder.model)
    every = index.largest(100)
    sizes = [len(h.entity_ids) for h in every]
    assert len(every) == index.count() >= 2 and sizes == sorted(sizes, reverse=True)
    strict = topic.settings.model_copy(update={"min_similarity_score": 0.99, "top_k_reports": 2})
    trace = Trace("chat", "q")
    context = GlobalRetriever(rt, topic, strict, GLOBAL_MAP).retrieve(
        RetrievalQuery("What are the main themes of these documents?"), trace
    )
    select = next(e for e in trace.events if e.step == "global_select")
    assert select.data["overview"] is True
    assert [r["id"] for r in select.data["reports"]] == [h.community_id for h in every[:2]]  # the two largest, in size order
    assert [e.id for e in context.items] == [h.community_id for h in every[:2] if h.summary]
    assert [e.score for e in context.items] == sorted((e.score for e in context.items), reverse=True)
    # A theme question with a subject of its own is still answered by similarity, and the threshold holds.
    subject = GlobalRetriever(rt, topic, strict, GLOBAL_MAP).retrieve(RetrievalQuery(QUESTION), Trace("chat", "q"))
    assert subject.items == ()


@pytest.mark.parametrize(
    "question, overview",
    [
        ("What are the main themes of these documents?", True),
        ("Give me an overview", True),
        ("What topics do the files cover?", True),
        ("What is this collection about?", True),
        ("What are the main themes of these documents about physicists and the Nobel Prize?", False),
        ("Who won the Nobel Prize in 1921?", False),
        ("What are the main themes?", True),
        ("Where did Einstein lecture?", False),
        ("", False),
    ],
)
def test_which_questions_ask_for_an_overview(question, overview):
    assert is_overview(question) is overview


@pytest.mark.parametrize(
    "question, types",
    [
        ("What kinds of places are described?", {"PLACE"}),
        ("Which people do these documents talk about, and what are they known for?", {"PERSON"}),
        ("What organisations are mentioned in these documents?", {"ORGANIZATION"}),
        ("Which cities and people appear?", {"PLACE", "PERSON"}),
        ("What are the main themes of these documents?", set()),  # no kind of thing: the largest communities
        ("Which people won the Nobel Prize?", set()),  # a subject of its own: by similarity
        ("Who is Albert Einstein?", set()),
        ("", set()),
    ],
)
def test_which_overview_questions_ask_about_a_kind_of_thing(question, types):
    assert overview_subject(question) == types


def entity(name: str, type_: str = "PLACE", aliases: tuple[str, ...] = ()) -> Entity:
    return Entity(id=entity_id_for(name, type_), name=name, type=type_, aliases=aliases)


def test_communities_made_of_the_kind_rank_first_and_small_ones_wait():
    places = [entity(f"Town {n}") for n in range(12)]
    people = [entity(f"Person {n}", "PERSON") for n in range(12)]
    concepts = [entity(f"thing {n}", "CONCEPT") for n in range(30)]
    kinds = {e.id: (e.type, 1) for e in places + people + concepts}
    memberships = {
        "pair": (places[0].id, places[1].id),  # two places, nothing else
        "towns": tuple(e.id for e in places[2:8] + people[:2] + concepts),  # six places among eight named members
        "mixed": tuple(e.id for e in places[8:11] + people[2:12]),  # three places among thirteen named members
        "people": tuple(e.id for e in people[:2]),
    }
    ranked = rank_by_subject(memberships, kinds, frozenset({"PLACE"}))
    assert [cid for cid, _, _ in ranked] == ["towns", "mixed", "pair"]  # noun phrases do not dilute; the pair waits
    assert ranked[0][1] == subject_score(6, 8) == 4.5
    assert set(ranked[0][2]) == {e.id for e in places[2:8]}


def test_the_quoted_sentence_is_about_the_members_of_the_kind():
    members = [entity("Honolulu County", aliases=("Oahu County",)), entity("Leland"), entity("New York")]
    sentences = [
        "The rail project was approved in 2008 after a long debate.",
        "New York State Route 12F is a state highway in Jefferson County.",  # opens with a longer name
        "Leland is a town in Brunswick County, North Carolina.",  # opens with a member: about it
        "It was formerly known as Oahu County.",
    ]
    assert subject_sentence(sentences, members) == sentences[2]
    assert subject_sentence(sentences[:1], members) == ""
    assert subject_sentence(sentences[3:], members) == sentences[3]  # an alias counts


def test_a_subject_title_lists_the_members_of_the_kind():
    def hit(title: str, method: str = "graph") -> CommunityHit:
        return CommunityHit("c", title, "", (), "", ("India", "Bollywood", "Shabana Azmi"), (), method, 0.0)

    title = "Indian and Shabana Azmi: films and actresses (India, Bollywood, West Bengal …)"
    names = ["Shabana Azmi", "Kaifi Azmi", "Sathish Kalathil", "Mahesh Dattani", "Roopa Ganguly"]
    expected = "Indian and Shabana Azmi: films and actresses (Kaifi Azmi, Sathish Kalathil, Mahesh Dattani …)"
    assert subject_title(hit(title), names) == expected
    assert subject_title(hit("Forbes, Harris and Chase (+11 more)"), ["Harris Bank"]) == "Forbes, Harris and Chase (Harris Bank)"
    assert subject_title(hit("Bollywood films", "model"), ["Kaifi Azmi"]) == "Bollywood films (Kaifi Azmi)"


def test_with_a_real_model_a_question_about_a_kind_of_thing_is_selected_by_similarity(rt, run_jobs, scripted_llm):
    topic = built_topic(rt, run_jobs, scripted_llm, name="Kinds")
    run_rebuild(rt, topic.id)
    scripted_llm.replies["global_map"] = lambda body: json.dumps({"helpful": True, "points": ["Paris and Berlin."], "score": 50})
    trace = Trace("chat", "q")
    context = GlobalRetriever(rt, topic, topic.settings, GLOBAL_MAP).retrieve(
        RetrievalQuery("What kinds of places are described?"), trace
    )
    select = next(e for e in trace.events if e.step == "global_select")
    assert "subject" not in select.data and "best" in select.data  # the similarity selection, as before
    assert next(e for e in trace.events if e.step == "global_map").data["method"] == "model"
    assert context.items and len(scripted_llm.prompts("global_map")) == len(context.items)
