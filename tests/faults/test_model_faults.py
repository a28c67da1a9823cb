"""Fault injection at the model endpoint: each fault ends in a retry, a clear message, or a recorded per-chunk
failure; never a stuck turn and never a half-saved one.

The endpoint is the scripted OpenAI-compatible server; the faults are real HTTP behaviour (status codes,
a ``Retry-After`` header, a connection cut mid-stream, a stream that goes silent after its first token,
a typed reply that is not JSON). A graph extraction reply that is not JSON is a recorded per-chunk failure:
``tests/graph/test_upload.py::test_a_failed_extraction_stores_the_chunk_without_entities``.
"""

from __future__ import annotations

import time

import pytest

from ragtopics.answer.history import list_sessions, session_turns
from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import upload_file
from ragtopics.errors import ModelUnavailableError
from ragtopics.topics.topics import create_topic


@pytest.fixture
def pumps(rt, run_jobs):
    topic = create_topic(rt, "Pumps", settings={"min_similarity_score": 0.0, "route_before_retrieval": False})
    upload_file(rt, topic, "pumps.txt", b"Pump P-7 is inspected every 90 days by the night shift.")
    run_jobs()
    return topic


def turns(rt, topic) -> int:
    return sum(len(session_turns(rt, s.id)) for s in list_sessions(rt, topic))


def answer(rt, topic, question="How often is pump P-7 inspected?"):
    *_, final = ask(rt, topic, question)
    return final


def test_rate_limited_then_answered(rt, pumps, scripted_llm):
    scripted_llm.replies["answer"] = "Every 90 days [S1]."
    scripted_llm.replies["source_check"] = '{"used": true}'
    scripted_llm.fail_next(2, 429, retry_after=0.1)
    final = answer(rt, pumps)
    assert final.text == "Every 90 days [pumps.txt]." and turns(rt, pumps) == 1
    assert len(scripted_llm.prompts("answer")) == 3  # two refused, the third answered


@pytest.mark.parametrize("status", [500, 503])
def test_a_failing_endpoint_gives_a_clear_message_and_saves_nothing(rt, pumps, scripted_llm, status):
    scripted_llm.replies["answer"] = "Every 90 days [S1]."
    scripted_llm.fail_next(20, status)
    with pytest.raises(ModelUnavailableError, match=str(status)) as err:
        answer(rt, pumps)
    assert "Language Model" in str(err.value) or "language" in str(err.value).lower()
    assert turns(rt, pumps) == 0
    scripted_llm.reset()


def test_a_stream_cut_mid_answer_is_an_error_not_half_an_answer(rt, pumps, scripted_llm):
    scripted_llm.replies["answer"] = "Pump P-7 is inspected every ninety days by the night shift [S1]."
    scripted_llm.stream_fault = "truncate"
    with pytest.raises(ModelUnavailableError, match="before the answer was finished"):
        answer(rt, pumps)
    assert turns(rt, pumps) == 0
    scripted_llm.stream_fault = None
    scripted_llm.replies["source_check"] = '{"used": true}'
    assert answer(rt, pumps).text.startswith("Pump P-7 is inspected every ninety days") and turns(rt, pumps) == 1


def test_a_stream_that_hangs_after_its_first_token_times_out(rt, pumps, scripted_llm, reconfigure):
    reconfigure(LLM_TIMEOUT_S=2)
    scripted_llm.replies["answer"] = "Every 90 days [S1]."
    scripted_llm.stream_fault, scripted_llm.hang_s = "hang", 8.0
    t0 = time.monotonic()
    with pytest.raises(ModelUnavailableError, match="failed while streaming"):
        answer(rt, pumps)
    assert time.monotonic() - t0 < 8.0  # the read timeout ended it, not the server
    assert turns(rt, pumps) == 0
