"""Every branch of the chat phase: routes and fallbacks, HYBRID vs DENSE, rerank, attachments,
connected Topics, source check, signed links."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from ragtopics.answer.attachments import read_attachment
from ragtopics.answer.history import session_turns, turn_trace
from ragtopics.answer.turn import NO_SOURCE_CHECK, ask
from ragtopics.errors import ConfigurationError
from ragtopics.rag.rerank import KEPT_BUNDLED, KEPT_FAILED, RERANKED
from ragtopics.settings.env import LOCAL_MODEL_NAME
from ragtopics.storage.links import LinkError
from ragtopics.topics.topics import create_topic
from ragtopics.ui.chat_tab import route_line
from tests.ingest.test_ingest import upload

ROUTER = "router"


def final(updates):
    *_, last = updates
    return last


def steps(rt, result) -> list[str]:
    return [e["step"] for e in turn_trace(rt, session_turns(rt, result.session_id)[-1].id)]


def event(rt, result, step: str) -> dict:
    return next(e for e in turn_trace(rt, session_turns(rt, result.session_id)[-1].id) if e["step"] == step)


@pytest.fixture
def routed(rt, run_jobs):
    topic = create_topic(rt, "Routed", settings={"route_before_retrieval": True, "min_similarity_score": 0.0})
    upload(rt, topic, "valves.txt", b"Valve A is serviced monthly. Valve B is serviced yearly.")
    run_jobs()
    return topic


def test_direct_route_answers_small_talk_without_search_or_sources(rt, routed, scripted_llm):
    scripted_llm.replies[ROUTER] = json.dumps({"route": "DIRECT", "confidence": 0.97, "reason": "thanks"})
    scripted_llm.replies["direct"] = "You are welcome!"
    result = final(ask(rt, routed, "Thanks a lot!"))
    assert (result.text, result.route, result.route_confidence, result.sources) == ("You are welcome!", "DIRECT", 0.97, [])
    assert "retrieve" not in steps(rt, result) and scripted_llm.prompts("answer") == []
    turn = session_turns(rt, result.session_id)[0]
    assert (turn.route, turn.route_confidence) == ("DIRECT", 0.97)


def test_low_confidence_and_unparsable_router_replies_go_to_search(rt, routed, scripted_llm):
    scripted_llm.replies["answer"] = "Monthly [S1]."
    scripted_llm.replies[ROUTER] = json.dumps({"route": "DIRECT", "confidence": 0.5, "reason": "maybe"})
    low = final(ask(rt, routed, "How often is valve A serviced?"))
    assert low.route == "SEARCH" and low.route_confidence == 0.5 and low.sources[0].file == "valves.txt"
    assert "0.50 < 0.90" in event(rt, low, "route")["data"]["reason"]
    scripted_llm.replies[ROUTER] = "this is not JSON"
    bad = final(ask(rt, routed, "How often is valve B serviced?"))
    assert bad.route == "SEARCH" and bad.route_confidence is None and "retrieve" in steps(rt, bad)
    assert "router reply unusable" in event(rt, bad, "route")["data"]["fallback"]


def test_a_router_confidence_threshold_of_zero_takes_every_route_the_router_names(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Routed at zero", settings={"route_before_retrieval": True, "router_confidence_threshold": 0.0})
    scripted_llm.replies[ROUTER] = json.dumps({"route": "DIRECT", "confidence": 0.2, "reason": "thanks"})
    scripted_llm.replies["direct"] = "You are welcome!"
    result = final(ask(rt, topic, "Thanks a lot!"))
    assert (result.text, result.route, result.route_confidence) == ("You are welcome!", "DIRECT", 0.2)
    assert event(rt, result, "route")["data"]["threshold"] == 0.0 and "retrieve" not in steps(rt, result)


def test_direct_answer_that_needs_documents_is_searched_after_all(rt, routed, scripted_llm):
    scripted_llm.replies[ROUTER] = json.dumps({"route": "DIRECT", "confidence": 0.99, "reason": "chat"})
    scripted_llm.replies["direct"] = "NEEDS_DOCUMENTS"
    scripted_llm.replies["answer"] = "Yearly [S1]."
    updates = list(ask(rt, routed, "And valve B?"))
    assert all("NEEDS_DOCUMENTS" not in u.text for u in updates)
    result = updates[-1]
    assert result.text == "Yearly [valves.txt]." and result.route == "SEARCH"
    assert "fallback_to_search" in steps(rt, result)


def test_attachment_route_answers_from_the_attached_file(rt, routed, scripted_llm):
    scripted_llm.replies[ROUTER] = json.dumps({"route": "ATTACHMENT", "confidence": 0.95, "reason": "the file answers"})
    scripted_llm.replies["attachment"] = "The memo says lunch is at noon."
    memo = read_attachment(
        b"Memo: lunch is served at noon.", "memo.txt", allowed_types=["txt"], max_mb=1, model_sees_images=False
    )
    result = final(ask(rt, routed, "When is lunch?", attachment=memo))
    assert (result.text, result.route, result.sources) == ("The memo says lunch is at noon.", "ATTACHMENT", [])
    prompt = scripted_llm.prompts("attachment")[0]["messages"][-1]["content"]
    assert "Memo: lunch is served at noon." in prompt and "When is lunch?" in prompt
    # The same decision without an attached file is searched.
    scripted_llm.replies["answer"] = "Monthly [S1]."
    assert final(ask(rt, routed, "When is valve A serviced?")).route == "SEARCH"


def test_attached_text_reaches_the_search_answer_too(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Attach", settings={"min_similarity_score": 0.0})
    upload(rt, topic, "a.txt", b"Pumps are checked weekly.")
    run_jobs()
    scripted_llm.replies["answer"] = "Weekly [S1]."
    note = read_attachment(b"Shift notes: pump 3 was noisy.", "notes.md", allowed_types=["md"], max_mb=1, model_sees_images=False)
    final(ask(rt, topic, "How often are pumps checked?", attachment=note))
    assert "Shift notes: pump 3 was noisy." in scripted_llm.prompts("answer")[0]["messages"][-1]["content"]


def test_a_picture_goes_to_the_model_as_an_image_part(rt, run_jobs, scripted_llm, tmp_path):
    import io

    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, format="PNG")
    picture = read_attachment(buffer.getvalue(), "red.png", allowed_types=["png"], max_mb=1, model_sees_images=True)
    topic = create_topic(rt, "Pictures", settings={"min_similarity_score": 0.0})
    upload(rt, topic, "a.txt", b"Red means stop.")
    run_jobs()
    scripted_llm.replies["answer"] = "It is red, which means stop [S1]."
    final(ask(rt, topic, "What does this colour mean?", attachment=picture))
    content = scripted_llm.prompts("answer")[0]["messages"][-1]["content"]
    assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_hybrid_finds_an_exact_code_that_dense_misses(rt, run_jobs, scripted_llm):
    # Lines that explain other error codes read closer to the question than the one
    # line that holds the code asked about; only the keyword index knows "E-8802" exactly.
    others = [
        ("E-1001", "the door is open"),
        ("E-1002", "the tank is empty"),
        ("E-2001", "the filter is clogged"),
        ("E-2002", "the water is too hot"),
        ("E-3001", "the lid is not locked"),
    ]
    for strategy in ("DENSE", "HYBRID"):
        topic = create_topic(
            rt, f"Codes {strategy}", settings={"retrieval_strategy": strategy, "top_k_results": 1, "min_similarity_score": 0.0}
        )
        for code, meaning in others:
            upload(rt, topic, f"guide-{code}.txt", f"Error code {code} on the display means {meaning}.".encode())
        upload(rt, topic, "fuse.txt", b"Fuse blown (E-8802): replace it with a 10 A fuse.")
        run_jobs()
    scripted_llm.replies["answer"] = "See [S1]."
    question = "What does error code E-8802 mean?"
    dense = final(ask(rt, rt_topic(rt, "Codes DENSE"), question))
    hybrid = final(ask(rt, rt_topic(rt, "Codes HYBRID"), question))
    assert dense.sources[0].file.startswith("guide-")
    assert hybrid.sources[0].file == "fuse.txt"
    data = event(rt, hybrid, "retrieve")["data"]
    assert [h["file"] for h in data["keyword"]] == ["fuse.txt"]
    assert data["fused_ranks"][hybrid.sources[0].chunk_id]["keyword"] == 1


def rt_topic(rt, name):
    from ragtopics.topics.topics import get_topic

    return get_topic(rt, name)


def test_llm_rerank_reorders_candidates_and_falls_back_on_a_bad_reply(rt, run_jobs, scripted_llm):
    topic = create_topic(
        rt,
        "Rerank",
        settings={"reranking_strategy": "LLM", "top_k_results": 1, "min_similarity_score": 0.0, "retrieval_strategy": "DENSE"},
    )
    for name, text in [("a.txt", "Cats sleep a lot."), ("b.txt", "Cats purr when happy."), ("c.txt", "Dogs bark at cats.")]:
        upload(rt, topic, name, text.encode())
    run_jobs()
    scripted_llm.replies["answer"] = "Answer [S1]."
    scripted_llm.replies["rerank"] = json.dumps({"order": [3, 1, 2]})
    result = final(ask(rt, topic, "Tell me about cats"))
    rerank_event = event(rt, result, "rerank")["data"]
    assert len(rerank_event["candidates"]) == 3  # 3 x Top-K candidates
    assert result.sources[0].chunk_id == rerank_event["candidates"][2]
    assert result.rerank == RERANKED and RERANKED in route_line(result) and RERANKED in result.route_reason
    scripted_llm.replies["rerank"] = "[[not json"
    fallback = final(ask(rt, topic, "Tell me about cats"))
    data = event(rt, fallback, "rerank")["data"]
    assert "retrieval order kept" in data["fallback"] and fallback.sources[0].chunk_id == data["candidates"][0]
    assert fallback.rerank == KEPT_FAILED


def test_llm_rerank_with_the_bundled_model_keeps_the_retrieval_order_and_says_so(rt, run_jobs, scripted_llm, reconfigure):
    topic = create_topic(
        rt,
        "Rerank bundled",
        settings={"reranking_strategy": "LLM", "top_k_results": 1, "min_similarity_score": 0.0, "retrieval_strategy": "DENSE"},
    )
    for name, text in [("a.txt", "Cats sleep a lot."), ("b.txt", "Cats purr when happy."), ("c.txt", "Dogs bark at cats.")]:
        upload(rt, topic, name, text.encode())
    run_jobs()
    reconfigure(LLM_MODEL=LOCAL_MODEL_NAME)  # the bundled model behind the Language Model role
    scripted_llm.replies["answer"] = "Answer [S1]."
    scripted_llm.replies["rerank"] = json.dumps({"order": [3, 1, 2]})
    result = final(ask(rt, topic, "Tell me about cats"))
    data = event(rt, result, "rerank")["data"]
    assert data["skipped"] == KEPT_BUNDLED and scripted_llm.prompts("rerank") == []
    assert result.sources[0].chunk_id == data["candidates"][0]  # the retrieval order, not the scripted one
    assert result.rerank == KEPT_BUNDLED and "the bundled model cannot rerank" in route_line(result)
    [turn] = session_turns(rt, result.session_id)
    assert KEPT_BUNDLED in turn.route_reason  # kept with the saved turn


def test_source_check_drops_an_uncited_document_and_links_expire(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Check", settings={"min_similarity_score": 0.0, "retrieval_strategy": "DENSE"})
    upload(rt, topic, "boats.txt", b"Boats float on water.")
    upload(rt, topic, "ships.txt", b"Ships float on water too.")
    run_jobs()
    scripted_llm.replies["answer"] = "They float [S2]."
    result = final(ask(rt, topic, "Do boats float?"))
    assert len(result.sources) == 1
    reasons = event(rt, result, "source_check")["data"]["reasons"]
    assert sorted(reasons.values()) == ["cited", "not used"]
    path = rt.signer.verify(result.sources[0].link.removeprefix("/files/"))
    assert rt.blobs.read(path) in (b"Boats float on water.", b"Ships float on water too.")
    with pytest.raises(LinkError, match="expired"):
        rt.signer.verify(result.sources[0].link.removeprefix("/files/"), now=__import__("time").time() + 3600)


def test_uncited_answer_is_confirmed_by_a_model_check(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Confirm", settings={"min_similarity_score": 0.0, "retrieval_strategy": "DENSE"})
    upload(rt, topic, "tea.txt", b"Green tea is brewed at 80 degrees.")
    run_jobs()
    scripted_llm.replies["answer"] = "Brew it at 80 degrees."
    scripted_llm.replies["source_check"] = json.dumps({"used": True})
    assert final(ask(rt, topic, "How hot for green tea?")).sources[0].file == "tea.txt"
    scripted_llm.replies["source_check"] = json.dumps({"used": False})
    unconfirmed = final(ask(rt, topic, "How hot for green tea?"))
    assert unconfirmed.no_answer and unconfirmed.text == topic.settings.no_answer_response


def test_connected_topic_is_called_as_a_tool_and_its_sources_join(connected, scripted_llm):
    rt, main = connected
    result = final(ask(rt, main, "How much holiday do I get?"))
    assert result.text == "HR says 30 days." and not result.no_answer
    assert [(s.file, s.topic) for s in result.sources] == [("holidays.txt", "HR")]
    tool_msg = scripted_llm.prompts("answer")[-1]["messages"][-1]
    assert tool_msg["role"] == "tool" and "30 days" in tool_msg["content"]
    assert scripted_llm.prompts("answer")[0]["tools"][0]["function"]["name"] == "ask_hr"


def test_connected_topics_need_a_tool_capable_model(rt, run_jobs):
    create_topic(rt, "Other")
    main = create_topic(rt, "Needs tools", settings={"mcp_interfaces": "Other"})
    with pytest.raises(ConfigurationError, match="tool-capable language model"):
        final(ask(rt, main, "Anything?"))


def test_with_the_bundled_model_the_source_check_decides_on_evidence_without_a_model_call(
    rt, run_jobs, scripted_llm, reconfigure
):
    topic = create_topic(
        rt,
        "Check bundled",
        settings={
            "min_similarity_score": 0.0,
            "retrieval_strategy": "DENSE",
            "route_before_retrieval": False,
            "answer_mode": "GENERATIVE",
        },
    )  # the bundled model writes
    upload(rt, topic, "boats.txt", b"Boats float on water; the harbour fee is 40 EUR a night.")
    upload(rt, topic, "ships.txt", b"Ships float on water too, and cargo ships carry containers.")
    upload(rt, topic, "cakes.txt", b"Cakes need flour, eggs and sugar.")
    run_jobs()
    reconfigure(LLM_MODEL=LOCAL_MODEL_NAME)
    scripted_llm.replies["answer"] = "They float, and a night costs 40 EUR."  # cites nothing, quotes nothing
    scripted_llm.replies["source_check"] = json.dumps({"used": True})  # what the bundled model says to any file
    result = final(ask(rt, topic, "Do ships float on water?"))
    data = event(rt, result, "source_check")["data"]
    assert scripted_llm.prompts("source_check") == [] and data["method"] == NO_SOURCE_CHECK
    assert [s.file for s in result.sources] == ["boats.txt"]  # shares the figure 40 with the answer
    assert data["reasons"]["boats.txt"] == "kept on evidence: shares 40 with the answer"
    assert data["reasons"]["cakes.txt"] == "not used (no model check)" and "no model check for" in data["fallback"]
