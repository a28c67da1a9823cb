"""Chat phase: retrieval of real passages, the prompt, streamed answer, citations, no-answer, memory, stop."""

from __future__ import annotations

import re

import pytest

from ragtopics.answer.history import session_turns, turn_trace
from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import upload_file
from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import upload

ANSWER = "The answer is in the first source [S1]."


def cite_everything(body: dict) -> str:
    """A scripted answer that cites every source code given in the prompt."""
    codes = re.findall(r"^\[(S\d+)\] \(from ", body["messages"][-1]["content"], re.MULTILINE)
    return "From the sources " + "".join(f"[{c}]" for c in codes) + "."


def hotpot_selection(corpus, questions, n_questions=10, n_passages=30):
    """The gold passages of the first ``n_questions`` questions, padded with distractors to ``n_passages``."""
    chosen = questions[:n_questions]
    titles: list[str] = []
    for q in chosen:
        for title, _ in q["supporting_facts"]:
            if title not in titles:
                titles.append(title)
    for q in chosen:
        for title, _ in q["context"]:
            if len(titles) >= n_passages:
                break
            if title not in titles:
                titles.append(title)
    return chosen, titles[:n_passages]


def final(updates):
    *_, last = updates
    return last


def test_hotpotqa_gold_passages_come_back_and_the_turn_is_saved(rt, run_jobs, scripted_llm, hotpot):
    corpus, questions = hotpot
    chosen, titles = hotpot_selection(corpus, questions)
    assert len(titles) == 30
    topic = create_topic(rt, "HotpotQA", settings={"top_k_results": 5})
    for title in titles:
        upload_file(rt, topic, f"{title}.txt", "".join(corpus[title]).encode())
    run_jobs()
    assert rt.chunk_index(topic.id).count() >= 30
    scripted_llm.replies["answer"] = cite_everything

    hits = 0
    for q in chosen:
        result = final(ask(rt, topic, q["question"]))
        gold = {f"{t}.txt" for t, _ in q["supporting_facts"]}
        files = [s.file for s in result.sources]
        hits += bool(gold & set(files))
        assert result.text == "From the sources " + "".join(f"[{f}]" for f in dict.fromkeys(files)) + "."
        assert 1 <= len(files) <= 5
        turns = session_turns(rt, result.session_id)
        assert len(turns) == 1 and turns[0].answer == result.text and turns[0].question == q["question"]
        assert [s["file"] for s in turns[0].sources] == files
    # all-MiniLM-L6-v2 on these passages finds a gold passage for nearly every question.
    assert hits >= 9, f"only {hits}/10 questions had a gold passage among the sources"
    body = scripted_llm.prompts("answer")[-1]
    user = body["messages"][-1]["content"]
    assert "[S1] (from " in user and "Question: " + chosen[-1]["question"] in user and "Rules for citing" in user


def test_no_chunk_above_min_score_gives_the_no_answer_response_without_a_model_call(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Strict", settings={"min_similarity_score": 0.99, "no_answer_response": "Nothing found here."})
    upload(rt, topic, "a.txt", b"Bananas are yellow and grow in bunches.")
    run_jobs()
    result = final(ask(rt, topic, "How do rockets reach orbit?"))
    assert result.no_answer and result.text == "Nothing found here." and result.sources == []
    assert scripted_llm.prompts("answer") == []
    assert session_turns(rt, result.session_id)[0].answer == "Nothing found here."


def test_top_k_and_min_score_filter_the_sources(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Filter", settings={"top_k_results": 2, "min_similarity_score": 0.0, "retrieval_strategy": "DENSE"})
    for i, fruit in enumerate(["apples", "pears", "plums", "cherries"]):
        upload(rt, topic, f"f{i}.txt", f"Orchard report: {fruit} were harvested in autumn.".encode())
    run_jobs()
    scripted_llm.replies["answer"] = "In autumn [S1][S2]."
    result = final(ask(rt, topic, "When were the plums harvested?"))
    assert len(result.sources) == 2 and result.sources[0].file == "f2.txt"
    assert result.sources[0].score >= result.sources[1].score
    assert len(scripted_llm.prompts("answer")[0]["messages"][-1]["content"].split("(from ")) == 3  # Top-K = 2 chunks

    strict = create_topic(rt, "Filter strict", settings={"min_similarity_score": 0.6, "retrieval_strategy": "DENSE"})
    upload(rt, strict, "plums.txt", b"Orchard report: plums were harvested in autumn.")
    upload(rt, strict, "engines.txt", b"Diesel engines need their oil changed regularly.")
    run_jobs()
    result = final(ask(rt, strict, "When were the plums harvested?"))
    assert [s.file for s in result.sources] == ["plums.txt"] and result.sources[0].score >= 0.6


def test_custom_system_prompt_reaches_the_model_and_citations_become_file_names(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Tone", settings={"custom_system_prompt": "Answer like a pirate.", "min_similarity_score": 0.0})
    upload(rt, topic, "ships.txt", b"The Black Pearl is a fast ship with black sails.")
    upload(rt, topic, "ports.txt", b"Tortuga is a port where pirates meet.")
    run_jobs()
    scripted_llm.replies["answer"] = "Arr, the ship is fast [S1, S2] and also [S9]."
    result = final(ask(rt, topic, "Which ship has black sails?"))
    system = scripted_llm.prompts("answer")[0]["messages"][0]["content"]
    assert "Answer like a pirate." in system
    assert result.text == "Arr, the ship is fast [ships.txt][ports.txt] and also."


def test_streaming_yields_growing_text_before_the_final_update(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Stream", settings={"min_similarity_score": 0.0})
    upload(rt, topic, "a.txt", b"Streaming delivers tokens one by one.")
    run_jobs()
    scripted_llm.replies["answer"] = "one two three four five [S1]"
    updates = list(ask(rt, topic, "How are tokens delivered?"))
    partial = [u.text for u in updates if not u.done and u.phase == "answering"]
    assert len(partial) >= 5 and partial[0] == "one " and updates[-1].done
    assert updates[-1].text == "one two three four five [a.txt]"


def test_memory_sends_earlier_turns_of_the_session(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Memory", settings={"memory": 2, "min_similarity_score": 0.0})
    upload(rt, topic, "a.txt", b"Valve A is serviced monthly. Valve B is serviced yearly.")
    run_jobs()
    scripted_llm.replies["answer"] = "Monthly [S1]."
    first = final(ask(rt, topic, "How often is valve A serviced?"))
    final(ask(rt, topic, "And the second one?", session_id=first.session_id))
    final(ask(rt, topic, "And a third question?", session_id=first.session_id))
    messages = scripted_llm.prompts("answer")[-1]["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user"]  # memory=2: only the last question and answer
    assert messages[1]["content"] == "And the second one?"
    assert len(session_turns(rt, first.session_id)) == 3


def test_stopping_the_stream_saves_nothing(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Stop", settings={"min_similarity_score": 0.0})
    upload(rt, topic, "a.txt", b"A long answer will be stopped.")
    run_jobs()
    scripted_llm.replies["answer"] = " ".join(["word"] * 200)
    stream = ask(rt, topic, "Tell me everything.")
    first = next(stream)
    for _ in range(3):
        next(stream)
    stream.close()
    assert session_turns(rt, first.session_id) == []
    from ragtopics.answer.history import list_sessions

    assert list_sessions(rt, topic) == []  # no empty chat left in "Earlier chats"


def test_empty_question_is_refused(rt):
    topic = create_topic(rt, "Empty question")
    with pytest.raises(Exception, match="the question is empty"):
        final(ask(rt, topic, "   "))


def test_an_answer_cut_at_the_token_limit_says_so(reconfigure, run_jobs, scripted_llm):
    rt = reconfigure(LLM_MAX_TOKENS=16)
    topic = create_topic(rt, "Long", settings={"min_similarity_score": 0.0})
    upload(rt, topic, "a.txt", b"Rivers carry water from hills to the sea.")
    run_jobs()
    scripted_llm.replies["answer"] = "Rivers [S1] " + " ".join(f"word{i}" for i in range(40))
    result = final(ask(rt, topic, "What do rivers do?"))
    assert result.text.startswith("Rivers [a.txt] word0 ") and "word13" in result.text and "word14" not in result.text
    assert result.text.endswith("(cut off at the answer length limit of 16 tokens, LLM_MAX_TOKENS)*")


def test_a_follow_up_that_finds_nothing_alone_is_searched_with_the_previous_question(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Pumps", settings={"retrieval_strategy": "DENSE", "min_similarity_score": 0.4})
    upload(rt, topic, "errors.txt", b"Error E-4711 means the pump ran dry. Wait 20 minutes before restarting the pump.")
    upload(rt, topic, "lunch.txt", b"The canteen serves soup on Mondays and fish on Fridays.")
    run_jobs()
    scripted_llm.replies["answer"] = "See [S1]."
    first = final(ask(rt, topic, "What does pump error E-4711 mean?"))
    assert [s.file for s in first.sources] == ["errors.txt"]
    follow_up = final(ask(rt, topic, "And how long must I wait?", session_id=first.session_id))
    assert [s.file for s in follow_up.sources] == ["errors.txt"] and not follow_up.no_answer
    turn = session_turns(rt, first.session_id)[-1]
    retrievals = [e["data"] for e in turn_trace(rt, turn.id) if e["step"] == "retrieve"]
    assert [r["query"] for r in retrievals] == [
        "And how long must I wait?",
        "What does pump error E-4711 mean?\nAnd how long must I wait?",
    ]
    assert retrievals[0]["kept"] == [] and retrievals[1]["kept"][0]["file"] == "errors.txt"
    # A new chat has no previous question: the same words alone find nothing.
    assert final(ask(rt, topic, "And how long must I wait?")).no_answer
