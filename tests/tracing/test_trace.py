"""A trace's model calls through the real gateway and scripted server: their text is bounded while the run goes
on (an upload's extraction makes thousands of calls), and the trace still saves and reads back whole."""

from __future__ import annotations

from typing import Any

from ragtopics.documents.uploads import document_trace, get_document, upload_file
from ragtopics.graph.fanout import EVENT_PAGE
from ragtopics.ingest.pipeline import model_call_counts
from ragtopics.storage.traces import load_trace, save_trace
from ragtopics.topics.topics import create_topic
from ragtopics.tracing.trace import MAX_CALL_TEXT_CHARS, MAX_CALLS_WITH_TEXT, Trace
from tests.redis_commands import CommandLog
from tests.scripted_llm import capitalised_entities

CALLS = 3 * MAX_CALLS_WITH_TEXT
PROMPT_CHARS = 30_000


def text_chars(value: Any) -> int:
    """Characters of every string in a value (the trace's memory is mostly these)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_chars(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(text_chars(v) for v in value)
    return 0


def test_many_large_model_calls_keep_a_bounded_text_and_save_whole(rt, scripted_llm):
    scripted_llm.replies["graph_extraction"] = "x" * 2_000
    trace = Trace("upload", "big.txt")
    for n in range(CALLS):
        messages = [
            {"role": "system", "content": "Extract entities."},
            {"role": "user", "content": f"Chunk {n}: " + "word " * (PROMPT_CHARS // 5)},
        ]
        assert rt.gateway.chat("graph_extraction", messages, prompt_name="graph_extraction", trace=trace).text

    calls = [e for e in trace.events if e.step == "model_call"]
    held = sum(text_chars(e.data) for e in calls)
    assert len(calls) == CALLS and held <= MAX_CALLS_WITH_TEXT * (MAX_CALL_TEXT_CHARS + 1_000)  # (+ names, markers)
    whole = CALLS * (PROMPT_CHARS + 2_000)
    assert trace.text_chars_left_out >= whole - MAX_CALLS_WITH_TEXT * MAX_CALL_TEXT_CHARS - CALLS * 100
    first, last = calls[0].data, calls[-1].data
    assert first["messages"][0] == {"role": "system", "content": "Extract entities."}
    assert first["messages"][1]["content"].startswith("Chunk 0: word") and "more characters]" in first["messages"][1]["content"]
    assert "messages" not in last and last["text_chars_left_out"] > PROMPT_CHARS and last["prompt_tokens"] > 0

    owner = "document:big"
    save_trace(rt.metadata, kind="upload", owner=owner, subject="big.txt", events=trace.to_list())
    saved = load_trace(rt.metadata, owner)
    assert [e["step"] for e in saved] == ["model_call"] * CALLS
    assert saved[0]["data"]["messages"][1]["content"] == first["messages"][1]["content"]
    assert saved[-1]["data"]["text_chars_left_out"] == last["text_chars_left_out"]
    assert model_call_counts(trace) == {"graph_extraction": CALLS}


def test_an_upload_with_more_extraction_calls_than_the_bound_saves_their_figures_and_bounded_text(rt, run_jobs, scripted_llm):
    scripted_llm.replies["graph_extraction"] = capitalised_entities
    topic = create_topic(
        rt, "Islands", kind="graphrag", settings={"graph_extraction_method": "LLM", "chunk_size": 100, "chunk_overlap": 0}
    )
    words = [f"isle-{n}" for n in range(MAX_CALLS_WITH_TEXT + 20)]  # one entity (Paragraph): nothing to deduplicate
    text = "\n\n".join(f"Paragraph {n} is about {w} and how {w} relates to nothing else at all." for n, w in enumerate(words))
    doc = upload_file(rt, topic, "islands.txt", text.encode())
    with CommandLog(rt.redis) as log:
        run_jobs()
    assert get_document(rt, doc.id).status == "indexed"

    calls = [
        e["data"] for e in document_trace(rt, doc.id) if e["step"] == "model_call" and e["data"]["role"] == "graph_extraction"
    ]
    assert len(calls) == len(words) == len(scripted_llm.prompts("graph_extraction"))  # every call, with its figures
    with_text = [c for c in calls if "messages" in c]
    assert len(with_text) <= MAX_CALLS_WITH_TEXT and all(c["text_chars_left_out"] > 0 for c in calls if "messages" not in c)
    assert all(c["prompt_tokens"] > 0 for c in calls)
    # the extraction jobs' events are merged a page at a time, never the whole list at once
    pages = [c for c in log.commands if c[0] == "LRANGE" and c[1].endswith(":events")]
    assert pages and all(0 <= int(c[3]) - int(c[2]) < EVENT_PAGE for c in pages)
