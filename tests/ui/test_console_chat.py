"""Console features of the chat phase over HTTP: source links, prompt edits, settings, MCP tools."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from gradio_client import Client, handle_file

from ragtopics.answer.turn import ask
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.ui.app import launch_console
from ragtopics.ui.prompts_tab import save_no_answer, save_prompt
from tests.conftest import free_port
from tests.ingest.test_ingest import upload


@pytest.fixture
def console(rt):
    port = free_port()
    app, url, _ = launch_console(rt, host="127.0.0.1", port=port)
    yield url, Client(url, verbose=False)
    app.close()


@pytest.fixture
def manuals(rt, run_jobs):
    topic = create_topic(rt, "Manuals", settings={"min_similarity_score": 0.0})
    upload(rt, topic, "boiler.txt", b"Boiler B-12 must be descaled every spring.")
    run_jobs()
    return topic


def test_source_links_download_the_file_and_expired_or_forged_links_are_refused(rt, console, manuals, scripted_llm):
    url, _ = console
    scripted_llm.replies["answer"] = "Every spring [S1]."
    *_, final = ask(rt, manuals, "When is boiler B-12 descaled?")
    link = final.sources[0].link
    response = httpx.get(url.rstrip("/") + link)
    assert response.status_code == 200 and response.content == b"Boiler B-12 must be descaled every spring."
    expired = rt.signer.sign(rt.signer.verify(link.removeprefix("/files/")), now=time.time() - 3600)
    refused = httpx.get(url.rstrip("/") + expired)
    assert refused.status_code == 403 and "expired" in refused.text
    forged = link[:-3] + ("AAA" if not link.endswith("AAA") else "BBB")
    assert httpx.get(url.rstrip("/") + forged).status_code == 403


def test_a_prompt_edited_for_a_topic_reaches_the_model(rt, console, manuals, scripted_llm):
    _, client = console
    status = client.predict("Manuals", "system", "Talk like a ship's captain about $topic_name.", api_name="/save_prompt")
    assert "Not saved" in status and "(missing: $custom_system_prompt)" in status  # a variable was dropped
    status = client.predict("Manuals", "system", "Captain of $topic_name here. $custom_system_prompt", api_name="/save_prompt")
    assert "Saved prompt `system` for Topic **Manuals**" in status
    assert resolve_prompts(rt, None)["system"].text != resolve_prompts(rt, manuals.id)["system"].text
    scripted_llm.replies["answer"] = "Aye [S1]."
    *_, _final = ask(rt, manuals, "When is the boiler descaled?")
    assert scripted_llm.prompts("answer")[-1]["messages"][0]["content"].startswith("Captain of Manuals here.")
    status = client.predict("Manuals", "system", "", api_name="/save_prompt")  # a text box not loaded yet
    assert "Not saved" in status and "Reset to shared" in status
    assert resolve_prompts(rt, manuals.id)["system"].text.startswith("Captain of $topic_name here.")  # nothing was wiped
    pasted = "Captain of $topic_name here. $custom_system_prompt " + "Arr. " * 5000
    status = client.predict("Manuals", "system", pasted, api_name="/save_prompt")
    assert "Not saved" in status and "25,051 characters long; at most 20,000" in status
    assert resolve_prompts(rt, manuals.id)["system"].text.startswith("Captain of $topic_name here.")
    long_reply = "Not in these manuals. " * 100
    assert save_no_answer(rt, "Manuals", long_reply) == (
        "**Not saved:** invalid Topic settings: no_answer_response: 2,200 characters long; at most 2,000 are allowed"
    )
    assert save_no_answer(rt, "Manuals", "Not in these manuals.") == "Saved the no-answer response."
    assert get_topic(rt, "Manuals").settings.no_answer_response == "Not in these manuals."
    assert "reset for Topic" in save_prompt(rt, "Manuals", "system", "", reset=True)
    assert resolve_prompts(rt, manuals.id)["system"].text == resolve_prompts(rt, None)["system"].text


def test_settings_change_from_the_console_is_a_new_version(rt, console, manuals):
    _, client = console
    status, _ = client.predict("Manuals", "retrieval_strategy", "DENSE", api_name="/change_setting")
    assert "`retrieval_strategy` = `DENSE` (settings v2)" in status
    status, _ = client.predict("Manuals", "top_k_results", "500", api_name="/change_setting")
    assert "Not changed" in status and get_topic(rt, "Manuals").settings.top_k_results == 5


def test_a_text_attachment_is_sent_with_the_question_and_a_refused_one_explains(rt, console, manuals, scripted_llm, tmp_path):
    _, client = console
    scripted_llm.replies["answer"] = "The note mentions a noisy pump [S1]."
    note = tmp_path / "note.txt"
    note.write_text("Night shift: the pump was noisy.")
    history, *_ = client.predict(
        "Manuals", "What does the note say about the boiler?", [], handle_file(str(note)), api_name="/ask"
    )
    assert history[-1]["content"][0]["text"].startswith("The note mentions a noisy pump [boiler.txt].\n\n<sub>Sources: "), history
    assert "Night shift: the pump was noisy." in scripted_llm.prompts("answer")[-1]["messages"][-1]["content"]
    archive = tmp_path / "__data__.zip"  # a name Markdown would make bold: shown as typed
    archive.write_bytes(b"PK\x03\x04")
    history, _, kept_question, attached = client.predict("Manuals", "And this?", [], handle_file(str(archive)), api_name="/ask")
    assert r"\_\_data\_\_\.zip can't be attached" in history[-1]["content"][0]["text"]
    assert "The attachment was removed" in history[-1]["content"][0]["text"]
    assert attached is None and kept_question == "And this?"  # taken off, so the next message is not refused again


def test_every_topic_is_a_tool_over_mcp(rt, console, manuals, scripted_llm):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    url, _ = console
    scripted_llm.replies["answer"] = "Every spring [S1]."

    async def call() -> tuple[list[str], dict]:
        async with streamablehttp_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                tool = next(n for n in names if n.endswith("ask_topic"))
                result = await session.call_tool(tool, {"topic": "Manuals", "question": "When is boiler B-12 descaled?"})
                return names, json.loads(result.content[0].text)

    names, answer = asyncio.run(call())
    assert sorted(names) == ["ask_topic", "list_topics"]  # the console's own callbacks are not offered as tools
    assert answer["answer"] == "Every spring [boiler.txt]." and answer["sources"][0]["file"] == "boiler.txt"
    assert {k: answer[k] for k in ("route", "route_method", "route_planned", "rerank")} == {  # a RAG Topic: no router
        "route": "SEARCH",
        "route_method": "",
        "route_planned": "",
        "rerank": "",
    }


def test_a_reopened_chat_shows_source_badges_with_fresh_links(rt, manuals, scripted_llm):
    from ragtopics.ui.chat_tab import load_session

    scripted_llm.replies["answer"] = "Every spring [S1]."
    *_, final = ask(rt, manuals, "When is boiler B-12 descaled?")
    messages, badges = load_session(rt, final.session_id)
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[1]["content"].startswith(
        'Every spring [boiler.txt].\n\n<sub>Sources: <a href="/files/'
    )
    link = badges.split('href="')[1].split('"')[0]
    assert rt.blobs.read(rt.signer.verify(link.removeprefix("/files/"))) == b"Boiler B-12 must be descaled every spring."


def test_a_long_refusal_lists_a_few_types_and_a_count(rt):
    from ragtopics.documents.uploads import receive_upload
    from ragtopics.errors import RefusedFileError

    topic = create_topic(rt, "All types")
    with pytest.raises(
        RefusedFileError, match=r"pdf, docx, xlsx, pptx, txt, md, csv, json, xml, yaml, html, py, .* and \d+ more"
    ):
        receive_upload(rt, topic, "movie.mp4", b"\x00")


def test_every_answer_says_its_way_confidence_and_which_router_decided():
    from ragtopics.answer.turn import ChatUpdate
    from ragtopics.ui.chat_tab import route_note

    summary = ChatUpdate(
        "Themes…",
        done=True,
        route="GLOBAL",
        route_confidence=0.98,
        route_method="embedding",
        route_reason="nearest exemplars GLOBAL 0.51, then HYBRID 0.31",
    )
    note = route_note(summary)
    assert "answered from community summaries, which have no source files:" in note
    assert "route GLOBAL · confidence 0.98 · embedding router (bundled model)" in note
    assert "title='nearest exemplars GLOBAL 0.51, then HYBRID 0.31'" in note
    direct = route_note(ChatUpdate("Hi", done=True, route="DIRECT", route_confidence=0.99, route_method="llm"))
    assert "answered without searching:" in direct and "route DIRECT · confidence 0.99 · Router Model" in direct
    nothing = route_note(ChatUpdate("No.", done=True, route="LOCAL", no_answer=True, route_method="forced"))
    assert "nothing found:" in nothing and "route LOCAL · forced way" in nothing
    unbuilt = route_note(
        ChatUpdate(
            "No.",
            done=True,
            route="GLOBAL",
            no_answer=True,
            route_method="embedding",
            note="no community summaries yet: run Recompute Communities Now",
        )
    )
    assert "nothing found (no community summaries yet: run Recompute Communities Now):" in unbuilt
