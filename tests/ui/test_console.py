"""The console through its HTTP API (gradio_client): create a Topic, upload, wait, ask."""

from __future__ import annotations

import json

import pytest
from gradio_client import Client, handle_file

from ragtopics.answer.history import list_sessions, session_turns
from ragtopics.topics.topics import get_topic
from ragtopics.ui.app import launch_console
from tests.conftest import free_port


@pytest.fixture
def console(rt):
    port = free_port()
    app, _, _ = launch_console(rt, host="127.0.0.1", port=port)
    yield app, Client(f"http://127.0.0.1:{port}/", verbose=False)
    app.close()


def test_create_upload_and_ask_through_the_console(rt, console, run_jobs, scripted_llm, tmp_path):
    _, client = console
    settings = {
        "custom_system_prompt": "Be brief.",
        "file_types": ["txt", "md"],
        "chunk_size": 500,
        "chunk_overlap": 50,
        "top_k_results": 3,
        "min_similarity_score": 0.2,
        "no_answer_response": "Not in the documents.",
    }
    status = client.predict("Console Topic", "rag", "", json.dumps(settings), api_name="/create_topic")
    assert status == "Created Topic **Console Topic** (rag)."
    assert get_topic(rt, "Console Topic").settings.chunk_size == 500

    (tmp_path / "boilers.md").write_text("# Boilers\n\nBoiler B-12 must be descaled every spring.")
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    message, _ = client.predict(
        "Console Topic",
        [handle_file(str(tmp_path / "boilers.md")), handle_file(str(tmp_path / "photo.jpg"))],
        api_name="/upload_files",
    )
    assert "Enqueued 1 file(s)." in message and "photo.jpg was refused" in message and "md, txt" in message
    run_jobs()
    rows = client.predict("Console Topic", api_name="/documents")["data"]
    assert rows[0][:3] == ["boilers.md", "indexed", 1]

    scripted_llm.replies["answer"] = "Descale it every spring [S1]."
    history, sources, _, _ = client.predict("Console Topic", "When is boiler B-12 descaled?", [], None, api_name="/ask")
    answer, line = history[-1]["content"][0]["text"].split("\n\n")
    assert answer == "Descale it every spring [boilers.md]."
    assert line.startswith('<sub>Sources: <a href="/files/') and line.endswith('target="_blank">boilers.md</a> 0.82</sub>')
    assert "boilers.md" in sources
    session = list_sessions(rt, get_topic(rt, "Console Topic"))[0]
    assert [t.answer for t in session_turns(rt, session.id)] == ["Descale it every spring [boilers.md]."]


def test_creating_a_topic_with_a_bad_setting_shows_why(rt, console):
    _, client = console
    status = client.predict("Bad Topic", "rag", "", '{"chunk_size": 500, "chunk_overlap": 600}', api_name="/create_topic")
    assert status.startswith("Not created") and "chunk_overlap (600) must be smaller than chunk_size (500)" in status.replace(
        "\\", ""
    )
    assert client.predict("Bad Topic", "rag", "", "{oops", api_name="/create_topic").startswith(
        "Not created: settings_json is not valid JSON"
    )
