"""A GraphRAG Topic's chat through :func:`ragtopics.answer.turn.ask`: the router's six ways, their thresholds
and fallbacks, the shared answer stage after each search (citations, sources, saving), GLOBAL's progress
and Stop, HYBRID's bounded rounds, and graph-ingestion sources. The router and the answers are the scripted
model server's; the graph, chunk index and community reports are real."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ragtopics.answer.attachments import read_attachment
from ragtopics.answer.context import RetrievalQuery
from ragtopics.answer.history import session_turns, turn_trace
from ragtopics.answer.turn import ask
from ragtopics.errors import RagTopicsError
from ragtopics.graph import global_search
from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
from ragtopics.graph.local import LocalRetriever
from ragtopics.graph.refresh import run_rebuild
from ragtopics.topics.topics import get_topic, update_settings
from ragtopics.tracing.trace import Trace
from ragtopics.ui.chat_tab import load_session, route_line
from tests.graph.test_global_search import QUESTION, built_topic
from tests.graph.test_graph_ingestion import graph_topic, people
from tests.graph.test_local_path import topic  # noqa: F401  (the small fixed graph, a fixture)

ROUTER = "router"


def route_reply(way: str, confidence: float, reason: str = "scripted", entities: tuple[str, ...] = ()) -> str:
    return json.dumps({"way": way, "confidence": confidence, "reason": reason, "entities": list(entities)})


def events(rt, result, step: str) -> list[dict]:
    return [e["data"] for e in turn_trace(rt, result.turn_id) if e["step"] == step]


@pytest.fixture
def answers(scripted_llm):
    """Answers that cite the first source, and an attribution check that says yes."""
    scripted_llm.replies["answer"] = "From the documents [S1]."
    scripted_llm.replies["source_check"] = json.dumps({"used": True})
    return scripted_llm


def test_path_answers_from_the_chain_its_sources_and_the_way_is_saved_with_the_turn(rt, topic, answers):
    answers.replies[ROUTER] = route_reply("PATH", 0.8, "two named things", ("Radium", "Sorbonne"))
    answers.replies["answer"] = "Radium was discovered by Marie Curie [S1], whose husband taught at the Sorbonne [S3]."
    updates = list(ask(rt, topic, "How is Radium related to the Sorbonne?"))
    result = updates[-1]

    assert (result.route, result.route_confidence, result.route_method) == ("PATH", 0.8, "llm")
    assert result.text.startswith("Radium was discovered by Marie Curie [curie.txt][sorbonne.txt]")
    assert {s.file for s in result.sources} == {"curie.txt", "sorbonne.txt"}
    turn = session_turns(rt, result.session_id)[0]
    assert (turn.route, turn.route_confidence, turn.route_reason, turn.route_method) == ("PATH", 0.8, "two named things", "llm")
    assert events(rt, result, "path")[0]["chain"] == ["Radium", "Marie Curie", "Pierre Curie", "Sorbonne"]
    prompt = answers.prompts("answer")[-1]["messages"][-1]["content"]
    assert "Radium —[She discovered radium.]— Marie Curie" in prompt  # the chain as text
    # PATH is written whole, then shown word by word: no text before the model finished
    phases = [(u.phase, bool(u.text)) for u in updates]
    assert ("writing", False) in phases and phases.index(("writing", False)) < phases.index(("answering", True))
    assert len([u for u in updates if u.text and not u.done]) >= 3
    assert events(rt, result, "answer")[0]["streamed"] is False


def test_path_without_a_chain_is_answered_by_local_and_the_reason_says_why(rt, topic, answers):
    answers.replies[ROUTER] = route_reply("PATH", 0.9, "how two things are related", ("Radium", "Hungary"))
    result = list(ask(rt, topic, "How is Radium related to Hungary?"))[-1]

    assert result.route == "LOCAL" and "no chain of at most 4 hops between Radium and Hungary" in result.route_reason
    assert events(rt, result, "route_fallback")[0] | {"note": ""} == {"planned": "PATH", "taken": "LOCAL", "note": ""}
    assert session_turns(rt, result.session_id)[0].route == "LOCAL"
    assert result.sources and not result.no_answer
    shown = route_line(result)  # the line under the answer says it, not only the hover text
    assert shown.startswith("<small") and "route LOCAL · PATH fell back: no chain of at most 4 hops" in shown
    assert "confidence 0.90 for PATH" in shown and result.route_planned == "PATH"
    _, reopened = load_session(rt, result.session_id)  # the chat opened again says the same
    assert "route LOCAL · PATH fell back" in reopened and "confidence 0.90 for PATH" in reopened
    assert session_turns(rt, result.session_id)[0].route_planned == "PATH"


def test_local_answers_with_the_subgraph_and_the_chunks_behind_it(rt, topic, answers):
    answers.replies[ROUTER] = route_reply("LOCAL", 0.75, "a fact about a named thing", ("Radium",))
    result = list(ask(rt, topic, "Who discovered radium?"))[-1]

    assert result.route == "LOCAL" and result.sources[0].file == "curie.txt" and result.sources[0].chunk_id == "chunk-k1"
    prompt = answers.prompts("answer")[-1]["messages"][-1]["content"]
    assert "Marie Curie discovered radium and polonium in Paris." in prompt  # a chunk
    assert "Radium (ELEMENT): A radioactive chemical element." in prompt  # an entity of the subgraph
    assert events(rt, result, "seeds")[0]["sources"]["named"] == ["Radium"]  # the router's entity is a seed


def test_nothing_above_min_similarity_score_gives_the_no_results_message(rt, topic, answers):
    update_settings(rt, topic.id, {"min_similarity_score": 0.99})
    answers.replies[ROUTER] = route_reply("LOCAL", 0.9)
    result = list(ask(rt, get_topic(rt, topic.id), "Who painted the ceiling of that chapel?"))[-1]
    assert events(rt, result, "named_entities")[0]["found"] == []  # (an entity named exactly counts as a match)
    assert result.no_answer and result.text == topic.settings.no_answer_response and result.sources == []
    assert answers.prompts("answer") == []


@pytest.mark.parametrize(
    ("way", "confidence", "changes", "taken"),
    [
        ("LOCAL", 0.59, {}, "HYBRID"),  # below Confidence Threshold (0.6)
        ("LOCAL", 0.6, {}, "LOCAL"),
        ("DIRECT", 0.89, {}, "HYBRID"),  # DIRECT also needs DIRECT Confidence Threshold (0.9)
        ("DIRECT", 0.9, {}, "DIRECT"),
        ("DIRECT", 0.99, {"answer_without_searching": False}, "HYBRID"),  # DIRECT switched off
    ],
)
def test_the_confidence_thresholds_and_direct_switched_off(rt, topic, answers, way, confidence, changes, taken):
    if changes:
        update_settings(rt, topic.id, changes)
    answers.replies[ROUTER] = route_reply(way, confidence)
    answers.replies["direct"] = "Hello!"
    answers.replies["follow_up_plan"] = json.dumps({"questions": ["Who discovered radium?"]})
    result = list(ask(rt, get_topic(rt, topic.id), "Who discovered radium?"))[-1]
    assert result.route == taken and result.route_confidence == confidence
    if taken == "DIRECT":
        assert result.text == "Hello!" and result.sources == [] and answers.prompts("answer") == []
    else:
        assert result.sources and result.sources[0].file == "curie.txt"


def test_a_direct_answer_that_needs_the_documents_takes_hybrid(rt, topic, answers):
    answers.replies[ROUTER] = route_reply("DIRECT", 0.99)
    answers.replies["direct"] = "NEEDS_DOCUMENTS"
    answers.replies["follow_up_plan"] = json.dumps({"questions": ["Who discovered radium?"]})
    result = list(ask(rt, topic, "And radium?"))[-1]
    assert result.route == "HYBRID" and "needed the documents" in result.route_reason and result.sources


def test_hybrid_rounds_and_follow_ups_are_bounded(rt, topic, answers):
    update_settings(rt, topic.id, {"max_follow_up_rounds": 2, "max_follow_up_questions": 2})
    rounds = iter(range(100))

    def plan(body):
        n = next(rounds)
        return json.dumps({"questions": [f"Question {n}-{i} about Marie Curie?" for i in range(5)]})

    answers.replies[ROUTER] = route_reply("HYBRID", 0.95)
    answers.replies["follow_up_plan"] = plan
    updates = list(ask(rt, get_topic(rt, topic.id), "Tell me about the Curies"))
    result = updates[-1]

    assert result.route == "HYBRID" and len(answers.prompts("follow_up_plan")) == 2
    searched = [e["question"] for e in events(rt, result, "follow_up_search")]
    assert searched == [
        "Question 0-0 about Marie Curie?",
        "Question 0-1 about Marie Curie?",
        "Question 1-0 about Marie Curie?",
        "Question 1-1 about Marie Curie?",
    ]
    assert "Question 0-0 about Marie Curie?" in answers.prompts("follow_up_plan")[1]["messages"][-1]["content"]  # asked
    assert {u.status for u in updates if u.status} >= {
        "planning follow-up questions (round 1)",
        "searching: Question 1-1 about Marie Curie?",
    }
    assert events(rt, result, "answer")[0]["streamed"] is True
    assert result.sources[0].file == "curie.txt"


def test_hybrid_planning_failure_falls_back_to_local_on_the_question(rt, topic, answers):
    answers.replies[ROUTER] = route_reply("HYBRID", 0.95)
    answers.replies["follow_up_plan"] = "I cannot plan that, sorry"
    result = list(ask(rt, topic, "Who discovered radium?"))[-1]
    assert result.route == "LOCAL" and "HYBRID planning failed" in result.route_reason
    assert result.sources[0].file == "curie.txt" and events(rt, result, "follow_up_search") == []


def test_hybrid_synthesis_is_written_by_the_follow_up_model(rt, topic, answers, reconfigure):
    reconfigure(FOLLOW_UP_MODEL="planner")  # the Follow-up Model role: the same server, its own model name
    answers.replies[ROUTER] = route_reply("HYBRID", 0.95)
    answers.replies["follow_up_plan"] = json.dumps({"questions": ["Who discovered radium?"]})
    result = list(ask(rt, get_topic(rt, topic.id), "Tell me about the Curies"))[-1]

    assert result.route == "HYBRID" and result.sources
    assert {body["model"] for body in answers.prompts("follow_up_plan")} == {"planner"}
    assert [body["model"] for body in answers.prompts("answer")] == ["planner"]  # the synthesis
    assert [body["model"] for body in answers.prompts(ROUTER)] == ["scripted"]  # other roles keep theirs

    answers.replies[ROUTER] = route_reply("LOCAL", 0.95)
    list(ask(rt, get_topic(rt, topic.id), "Who discovered radium?"))
    assert answers.prompts("answer")[-1]["model"] == "scripted"  # LOCAL's answer: the Language Model


def map_reply(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    if "Title: Nobel Prize physicists" in prompt:
        return json.dumps({"helpful": True, "points": ["Curie and Einstein won the Nobel Prize in Physics."], "score": 90})
    return json.dumps({"helpful": False, "points": [], "score": 0})


def test_global_says_what_it_reads_then_streams_an_answer_without_source_files(rt, run_jobs, answers):
    topic = built_topic(rt, run_jobs, answers)
    written = run_rebuild(rt, topic.id)["written"]
    answers.replies[ROUTER] = route_reply("GLOBAL", 0.9, "an overview")
    answers.replies["global_map"] = map_reply
    answers.replies["answer"] = "The main theme is the Nobel Prize in Physics [S1]."
    updates = list(ask(rt, topic, QUESTION))
    result = updates[-1]
    assert result.route == "GLOBAL", result.route_reason
    assert not result.no_answer, [e for e in turn_trace(rt, result.turn_id) if e["step"].startswith("global")]

    reading = f"reading {min(written, topic.settings.top_k_reports)} summaries"
    statuses = [u.status for u in updates if u.status]
    assert statuses[0] == reading and all(not u.text for u in updates[: [u.status for u in updates].index(reading) + 1])
    assert result.route == "GLOBAL" and not result.no_answer and result.sources == []
    assert result.text == "The main theme is the Nobel Prize in Physics."  # a summary's code names no file
    prompt = answers.prompts("answer")[-1]["messages"][-1]["content"]
    assert "(from community report)" in prompt and "Curie and Einstein won the Nobel Prize in Physics." in prompt
    assert "Other things" not in prompt  # the unhelpful summary was dropped
    assert session_turns(rt, result.session_id)[0].route == "GLOBAL"
    assert events(rt, result, "answer")[0]["streamed"] is True


def test_global_before_any_community_run_gives_the_no_results_message(rt, run_jobs, answers):
    topic = built_topic(rt, run_jobs, answers, name="Unbuilt")
    answers.replies[ROUTER] = route_reply("GLOBAL", 0.9)
    result = list(ask(rt, topic, QUESTION))[-1]
    assert result.no_answer and result.text == topic.settings.no_answer_response
    assert result.note == "no community summaries yet: run Recompute Communities Now"  # said with the answer
    assert answers.prompts("global_map") == [] and answers.prompts("answer") == []


def test_stop_during_the_map_step_ends_it_and_saves_nothing(rt, run_jobs, answers, monkeypatch):
    topic = built_topic(rt, run_jobs, answers, name="Stopped")
    written = run_rebuild(rt, topic.id)["written"]
    assert written >= 2
    monkeypatch.setattr(global_search, "MAP_CONCURRENCY", 1)  # one summary at a time
    started, release = threading.Event(), threading.Event()

    def slow_map(body):
        started.set()
        release.wait(5)
        return map_reply(body)

    answers.replies[ROUTER] = route_reply("GLOBAL", 0.9)
    answers.replies["global_map"] = slow_map
    turn = ask(rt, topic, QUESTION)
    for update in turn:
        if update.status.startswith("reading"):
            break
    assert started.wait(5)  # the first summary is being read
    turn.close()  # Stop
    release.set()
    time.sleep(1.0)
    assert len(answers.prompts("global_map")) == 1 < min(written, topic.settings.top_k_reports)
    assert answers.prompts("answer") == [] and session_turns(rt, update.session_id) == []


def test_a_graph_ingestion_record_is_a_source_without_download(rt, answers):
    topic = graph_topic(rt, "Imported")
    ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))
    answers.replies[ROUTER] = route_reply("LOCAL", 0.9, "a fact", ("Marie Curie",))
    result = list(ask(rt, get_topic(rt, topic.id), "Who did Marie Curie marry?"))[-1]

    assert result.sources
    for source in result.sources:
        assert (source.file, source.kind, source.label, source.link) == (
            "people.json",
            "graph_ingestion",
            "people.json (graph ingestion)",
            "",
        )
    assert "[people.json]" in result.text


def test_the_search_gets_the_entities_the_graph_holds_by_name_or_alias(rt, topic, answers):
    answers.replies[ROUTER] = route_reply("LOCAL", 0.9, "facts", ("Madame Curie",))  # not a name the graph holds
    result = list(ask(rt, topic, "What did Marie Curie find in Paris?"))[-1]
    before, after = events(rt, result, "named_entities")  # before routing (a signal), then with the router's names
    assert before == {"router": [], "found": ["Marie Curie", "Paris"]}
    assert after == {"router": ["Madame Curie"], "found": ["Marie Curie", "Paris"]}
    assert events(rt, result, "seeds")[0]["sources"]["named"] == ["Marie Curie", "Paris"]


def test_the_embedding_router_takes_a_named_entity_of_the_graph_as_a_sign_of_local(rt, topic, answers):
    update_settings(rt, topic.id, {"router_method": "EMBEDDING"})
    result = list(ask(rt, get_topic(rt, topic.id), "Who discovered radium?"))[-1]
    [route] = events(rt, result, "route")
    assert route["method"] == "embedding" and "names Radium of the graph" in route["reason"]
    assert route["decision"]["entities"] == ["Radium"] and answers.prompts(ROUTER) == []


def test_each_chunk_is_one_source_with_its_own_score(rt, topic, answers):
    question = "What did Marie Curie do?"
    answers.replies[ROUTER] = route_reply("LOCAL", 0.9, "facts", ("Marie Curie",))
    answers.replies["answer"] = "She discovered radium [S1] and married Pierre Curie [S2]; see [S5] [S6] [S7] [S8]."
    result = list(ask(rt, topic, question))[-1]
    context = LocalRetriever(rt, topic, topic.settings).retrieve(
        RetrievalQuery(question, entities=("Marie Curie",)), Trace("chat", question)
    )
    own = {item.id: round(item.score, 4) for item in context.items if item.kind == "chunk"}

    keys = [(s.file, s.chunk_id) for s in result.sources]
    assert len(keys) == len(set(keys)) >= 2  # entities and relationships resting on a chunk do not repeat it
    assert all(s.score == own[s.chunk_id] for s in result.sources if s.chunk_id in own)
    assert sum(s.chunk_id in own for s in result.sources) >= 2


def test_forcing_attachment_needs_a_file_and_an_answer_from_the_file_stands_without_sources(rt, topic, answers):
    with pytest.raises(RagTopicsError, match="the ATTACHMENT way answers from an attached file; attach one"):
        list(ask(rt, topic, "Who directed it?", route="ATTACHMENT"))
    roster = read_attachment(
        b"Pump ZX-9 was serviced on 3 March by Alice Moreau.",
        "service.txt",
        allowed_types=["txt"],
        max_mb=1,
        model_sees_images=False,
    )
    answers.replies[ROUTER] = route_reply("LOCAL", 0.9, "facts")
    answers.replies["answer"] = "Alice Moreau serviced the pump on 3 March."  # from the file: nothing to cite
    result = list(ask(rt, topic, "When was the pump serviced and by whom?", attachment=roster))[-1]
    assert result.route == "LOCAL" and not result.no_answer and result.text == "Alice Moreau serviced the pump on 3 March."
    assert "Pump ZX-9 was serviced" in answers.prompts("answer")[-1]["messages"][-1]["content"]
