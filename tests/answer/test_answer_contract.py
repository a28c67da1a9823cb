"""The answer stage over typed evidence: attribution fallbacks, sources that name the chunk used,
saved answers that keep to the file version they used, forced routes, connected-Topic links,
the trace tree and per-step timings."""

from __future__ import annotations

import json

import pytest
from sqlmodel import select

from ragtopics.answer.context import Source
from ragtopics.answer.history import saved_turns, session_turns, turn_trace
from ragtopics.answer.turn import ask
from ragtopics.errors import RagTopicsError
from ragtopics.storage.metadata import DocumentRow, TraceRow
from ragtopics.storage.traces import load_trace, save_trace
from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import upload

POLICY = b"Hotel cap: 140 EUR per night. Daily meal allowance: 60 EUR."
FAQ = b"Receipts must be uploaded within 30 days. Hotel bookings go through the travel desk."


def final(updates):
    *_, last = updates
    return last


@pytest.fixture
def travel(rt, run_jobs):
    topic = create_topic(rt, "Travel", settings={"min_similarity_score": 0.0, "retrieval_strategy": "DENSE"})
    upload(rt, topic, "policy.txt", POLICY)
    upload(rt, topic, "faq.txt", FAQ)
    run_jobs()
    return topic


def test_a_source_check_cut_off_for_the_quoted_file_keeps_that_file_not_the_other(rt, travel, scripted_llm):
    scripted_llm.replies["answer"] = "The hotel cap is 140 EUR per night."

    def check(body):  # the reply about policy.txt is cut off; the one about faq.txt wrongly says "used"
        content = body["messages"][-1]["content"]
        return '{"used": tr' if "policy.txt" in content else json.dumps({"used": True})

    scripted_llm.replies["source_check"] = check
    result = final(ask(rt, travel, "What is the hotel cap per night?"))
    assert [s.file for s in result.sources] == ["policy.txt"]
    assert result.sources[0].reason == "kept on evidence"
    step = next(e for e in turn_trace(rt, result.turn_id) if e["step"] == "source_check")["data"]
    assert "model check failed for policy.txt" in step["fallback"]
    assert step["reasons"]["policy.txt"] == "kept on evidence: shares 140 with the answer"
    assert all(body["max_tokens"] >= 64 for body in scripted_llm.prompts("source_check"))


def test_every_check_failing_keeps_the_best_retrieved_file(rt, travel, scripted_llm):
    scripted_llm.replies["answer"] = "It depends on the city."
    scripted_llm.replies["source_check"] = "not json at all"
    result = final(ask(rt, travel, "What is the hotel cap per night?"))
    assert [s.file for s in result.sources] == ["policy.txt"] and not result.no_answer


def test_sources_list_the_chunk_the_answer_cited_first(rt, run_jobs, scripted_llm):
    topic = create_topic(
        rt, "Manual", settings={"min_similarity_score": 0.0, "retrieval_strategy": "DENSE", "chunk_size": 100, "chunk_overlap": 0}
    )
    text = (
        "Pump P-7 is inspected every month by the night shift. " * 2
        + "\n\n"
        + "The pump P-7 inlet valve is replaced every second year in spring. " * 2
    )
    upload(rt, topic, "manual.txt", text.encode())
    run_jobs()
    scripted_llm.replies["answer"] = "Every second year [S2]."
    result = final(ask(rt, topic, "When is the pump P-7 inlet valve replaced?"))
    assert len(result.sources) >= 2 and {s.file for s in result.sources} == {"manual.txt"}
    first = result.sources[0]
    assert (first.code, first.reason) == ("S2", "cited")
    assert all(s.reason == "same file" for s in result.sources[1:])
    assert "replaced every second year" in _chunk_text(rt, topic, first.chunk_id)


def _chunk_text(rt, topic, chunk_id):
    return rt.redis.hget(rt.chunk_index(topic.id).key(chunk_id), "text").decode()


def test_a_saved_answer_says_when_its_file_was_replaced_or_removed(rt, travel, scripted_llm, run_jobs):
    scripted_llm.replies["answer"] = "The cap is 140 EUR [S1]."
    first = final(ask(rt, travel, "What is the hotel cap per night?"))
    assert first.sources[0].file == "policy.txt" and first.sources[0].version
    assert [s.status for s in saved_turns(rt, first.session_id)[0].sources] == ["current"]
    upload(rt, travel, "policy.txt", b"Hotel cap: 160 EUR per night. Daily meal allowance: 60 EUR.")
    run_jobs()
    shown = saved_turns(rt, first.session_id)[0].sources[0]
    assert shown.status == "changed" and shown.version == first.sources[0].version
    assert rt.blobs.read(rt.signer.verify(shown.link.removeprefix("/files/"))).startswith(b"Hotel cap: 160")
    with rt.metadata.session() as s:  # the document is gone (as after a delete)
        s.delete(s.exec(select(DocumentRow).where(DocumentRow.file_name == "policy.txt")).one())
    gone = saved_turns(rt, first.session_id)[0].sources[0]
    assert (gone.status, gone.link) == ("removed", "")


def test_a_route_can_be_forced_and_must_belong_to_the_topic_kind(rt, travel, scripted_llm):
    scripted_llm.replies["direct"] = "You are welcome!"
    result = final(ask(rt, travel, "thanks, that is all", route="direct"))
    assert (result.text, result.route, result.route_method, result.sources) == ("You are welcome!", "DIRECT", "forced", [])
    assert scripted_llm.prompts("router") == []
    with pytest.raises(RagTopicsError, match="not a way of a rag Topic"):
        final(ask(rt, travel, "How is A connected to B?", route="PATH"))


def test_timings_and_a_stored_trace_tree(rt, travel, scripted_llm):
    scripted_llm.replies["answer"] = "140 EUR [S1]."
    result = final(ask(rt, travel, "What is the hotel cap per night?"))
    assert {"retrieve", "embed_question", "search", "prompt", "answer", "source_check", "total", "first_token"} <= set(
        result.timings_ms
    )
    assert result.timings_ms["total"] >= result.timings_ms["answer"] > 0
    events = turn_trace(rt, result.turn_id)
    retrieve = next(e for e in events if e["step"] == "retrieve")
    children = [e["step"] for e in events if e["parent"] == retrieve["id"]]
    assert children == ["embed_question", "search"]
    assert not hasattr(session_turns(rt, result.session_id)[0], "trace_json")  # traces live in the trace table


def test_connected_topic_sources_keep_their_links_and_nest_in_the_trace(connected):
    rt, main = connected
    result = final(ask(rt, main, "How much holiday do I get?"))
    source = result.sources[0]
    assert (source.file, source.topic, source.reason) == ("holidays.txt", "HR", "via HR")
    assert rt.blobs.read(rt.signer.verify(source.link.removeprefix("/files/"))) == b"Employees get 30 days of holiday per year."
    saved = saved_turns(rt, result.session_id)[0].sources[0]
    assert saved.link and saved.status == "current"
    events = turn_trace(rt, result.turn_id)
    tool_call = next(e for e in events if e["step"] == "tool_call")
    nested = [e["step"] for e in events if e["parent"] == tool_call["id"]]
    assert "retrieve" in nested and "answer" in nested


def test_source_rows_round_trip_and_old_rows_still_load():
    source = Source("a.pdf", "chunk-1", 0.5, "S1", "doc-1", "T", link="/files/x", reason="cited", version="abc", pages=(3, 4))
    assert Source.from_row(json.loads(json.dumps(source.to_row()))) == source.with_(link="")
    # A row saved before pages were kept (no "pages" key) loads with no pages.
    old = Source.from_row(
        {"file": "a.txt", "chunk_id": "chunk-1", "score": 0.5, "code": "S1", "document_id": "doc-1", "topic": "T"}
    )
    assert (old.kind, old.reason, old.version, old.pages) == ("upload", "", "", ())
    assert (old.location, old.cited_as, old.to_public()["pages"]) == ("", "a.txt", [])
    assert set(source.to_public()) == {
        "file",
        "chunk_id",
        "score",
        "topic",
        "kind",
        "reason",
        "link",
        "status",
        "pages",
        "location",
    }
    assert (source.to_public()["pages"], source.to_public()["location"], source.cited_as) == ([3, 4], "pp. 3–4", "a.pdf, pp. 3–4")


def test_the_trace_store_is_bounded(rt, monkeypatch):
    from ragtopics.storage import traces

    monkeypatch.setattr(traces, "KEEP_PER_KIND", 3)
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 10_000)
    for n in range(5):
        save_trace(
            rt.metadata, kind="chat", owner=f"turn:{n}", subject="q", events=[{"step": "x", "data": {"text": "y" * 50_000}}]
        )
    with rt.metadata.session() as s:
        rows = s.exec(select(TraceRow).where(TraceRow.kind == "chat")).all()
    assert sorted(r.owner for r in rows) == ["turn:2", "turn:3", "turn:4"]
    assert all(r.size_bytes <= 10_000 for r in rows)
    assert load_trace(rt.metadata, "turn:4")[0]["shrunk"] is True and load_trace(rt.metadata, "turn:0") == []


def test_a_question_with_nothing_searchable_gets_the_no_answer_response_even_as_a_follow_up(rt, travel, scripted_llm):
    scripted_llm.replies["answer"] = "140 EUR [S1]."
    first = final(ask(rt, travel, "What is the hotel cap per night?"))
    junk = final(ask(rt, travel, "?!? ...", session_id=first.session_id))
    assert junk.no_answer and junk.text == travel.settings.no_answer_response and junk.sources == []
    assert len(scripted_llm.prompts("answer")) == 1
