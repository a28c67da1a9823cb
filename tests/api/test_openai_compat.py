"""Topics as OpenAI-compatible models, driven by the official ``openai`` client against the real console."""

from __future__ import annotations

import httpx
import openai
import pytest

from ragtopics.access import users
from ragtopics.access.context import acting_username
from ragtopics.answer.history import list_sessions, session_turns
from ragtopics.ui.app import launch_console
from tests.conftest import free_port

QUESTION = "When does K-2 switch off?"


def client_for(url: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "v1", api_key=token, max_retries=0, timeout=60)


def sessions_of(rt, topic, username):
    token = acting_username.set(username)
    try:
        return list_sessions(rt, topic)
    finally:
        acting_username.reset(token)


def test_a_viewer_lists_topics_and_gets_a_plain_answer_with_sources(secured, rt, kettles, scripted_llm):
    _, url = secured
    client = client_for(url, users.make_token(rt, "vic", "chat front end"))
    assert [(m.id, m.object, m.owned_by) for m in client.models.list().data] == [("Kettles", "model", "ragtopics")]

    scripted_llm.replies["answer"] = "It switches off at 100 degrees [S1]."
    reply = client.chat.completions.create(
        model="Kettles", messages=[{"role": "system", "content": "Be terse."}, {"role": "user", "content": QUESTION}]
    )
    assert reply.object == "chat.completion" and reply.model == "Kettles"
    assert reply.choices[0].message.content == "It switches off at 100 degrees [kettles.txt]."
    assert reply.choices[0].finish_reason == "stop"
    sources = reply.model_extra["sources"]
    assert [s["file"] for s in sources] == ["kettles.txt"] and 0 < sources[0]["score"] <= 1
    assert sources[0]["link"].startswith(url + "files/")
    opened = httpx.get(sources[0]["link"], headers={"authorization": f"Bearer {users.make_token(rt, 'vic')}"})
    assert opened.content.startswith(b"Kettle K-2")
    # Saved as a chat of the token's user, as the console saves one.
    [session] = sessions_of(rt, kettles, "vic")
    assert session.id == reply.model_extra["session_id"]
    assert [(t.question, t.answer) for t in session_turns(rt, session.id)] == [(QUESTION, reply.choices[0].message.content)]
    assert sessions_of(rt, kettles, "otto") == []


def test_a_streamed_follow_up_continues_the_conversation(secured, rt, kettles, scripted_llm):
    _, url = secured
    client = client_for(url, users.make_token(rt, "vic"))
    scripted_llm.replies["answer"] = "It switches off at 100 degrees [S1]."
    first = client.chat.completions.create(model="Kettles", messages=[{"role": "user", "content": QUESTION}])
    answer = first.choices[0].message.content

    scripted_llm.replies["answer"] = "Descale it every month [S1], as the manual says."
    follow_up = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": [{"type": "text", "text": "How often is it descaled?"}]},
    ]
    chunks = list(client.chat.completions.create(model="Kettles", messages=follow_up, stream=True))
    assert all(c.object == "chat.completion.chunk" for c in chunks) and len(chunks) >= 3
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "Descale it every month [kettles.txt], as the manual says."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert [s["file"] for s in chunks[-1].model_extra["sources"]] == ["kettles.txt"]
    # The model saw the earlier exchange as history, and the follow-up went into the same saved chat.
    messages = scripted_llm.prompts("answer")[-1]["messages"]
    assert {"role": "user", "content": QUESTION} in messages and {"role": "assistant", "content": answer} in messages
    assert chunks[-1].model_extra["session_id"] == first.model_extra["session_id"]
    assert [t.answer for t in session_turns(rt, first.model_extra["session_id"])] == [answer, text]


def test_a_conversation_begun_elsewhere_is_saved_with_its_earlier_messages(secured, rt, kettles, scripted_llm):
    _, url = secured
    client = client_for(url, users.make_token(rt, "vic"))
    scripted_llm.replies["answer"] = "Every month [S1]."
    reply = client.chat.completions.create(
        model="Kettles",
        messages=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hello! Ask me about kettles."},
            {"role": "user", "content": "How often is K-2 descaled?"},
        ],
    )
    turns = session_turns(rt, reply.model_extra["session_id"])
    assert [(t.question, t.answer) for t in turns] == [
        ("Hello", "Hello! Ask me about kettles."),
        ("How often is K-2 descaled?", "Every month [kettles.txt]."),
    ]


def test_callers_without_a_valid_token_and_unknown_models_are_refused(secured, rt, kettles):
    _, url = secured
    for token in ("rt_forged", "not-even-a-token"):
        with pytest.raises(openai.AuthenticationError) as refused:
            client_for(url, token).models.list()
        assert refused.value.status_code == 401 and "Programs send an API token" in refused.value.message
    with httpx.Client(base_url=url, timeout=30) as anonymous:
        response = anonymous.post(
            "/v1/chat/completions", json={"model": "Kettles", "messages": [{"role": "user", "content": "hi"}]}
        )
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error" and response.json()["error"]["code"] == "invalid_api_key"

    client = client_for(url, users.make_token(rt, "vic"))
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="Teapots", messages=[{"role": "user", "content": QUESTION}])
    assert unknown.value.body == {
        "message": "no Topic called 'Teapots'; create it first (`ragtopics topic create NAME`)",
        "type": "not_found_error",
        "code": "model_not_found",
    }
    with pytest.raises(openai.BadRequestError, match="the last message must be the user's question"):
        client.chat.completions.create(model="Kettles", messages=[{"role": "assistant", "content": "Hi"}])
    with pytest.raises(openai.BadRequestError, match="invalid request: messages"):
        client.chat.completions.create(model="Kettles", messages=[])


def test_open_mode_serves_loopback_callers_without_a_token(rt, kettles, scripted_llm):
    server, url, _ = launch_console(rt, host="127.0.0.1", port=free_port(), mcp=False)
    try:
        scripted_llm.replies["answer"] = "At 100 degrees [S1]."
        client = client_for(url, "anything")  # the SDK needs some key; open mode reads none
        assert [m.id for m in client.models.list().data] == ["Kettles"]
        reply = client.chat.completions.create(model="Kettles", messages=[{"role": "user", "content": QUESTION}])
        assert reply.choices[0].message.content == "At 100 degrees [kettles.txt]."
    finally:
        server.close()
