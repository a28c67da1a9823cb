"""Fixtures of the answer-stage tests."""

from __future__ import annotations

import pytest

from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import upload


@pytest.fixture
def connected(reconfigure, run_jobs, scripted_llm):
    """``(rt, main)``: Topic "Main" connected to Topic "HR" (holidays.txt) with a tool-capable model.

    The scripted model asks HR once ("How many holiday days?"), HR answers "30 days [S1].",
    and Main answers "HR says 30 days.".
    """
    rt = reconfigure(LLM_SUPPORTS_TOOLS=True)
    hr = create_topic(rt, "HR", settings={"min_similarity_score": 0.0})
    upload(rt, hr, "holidays.txt", b"Employees get 30 days of holiday per year.")
    main = create_topic(rt, "Main", settings={"mcp_interfaces": "HR", "min_similarity_score": 0.99})
    run_jobs()
    calls = iter([{"tool_calls": [{"name": "ask_hr", "arguments": {"question": "How many holiday days?"}}]}])
    scripted_llm.replies["answer"] = lambda body: (
        next(calls, None) or ("30 days [S1]." if body["messages"][-1]["role"] == "user" else "HR says 30 days.")
    )
    return rt, main
