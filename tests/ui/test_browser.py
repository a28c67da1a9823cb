"""The console in headless Chromium: create a Topic, upload a file, watch it index, ask, see sources."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from sqlmodel import select

from ragtopics.answer.history import session_turns
from ragtopics.graph.corrections import list_corrections
from ragtopics.graph.ingest import graph_store
from ragtopics.storage.metadata import ChatSessionRow
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.tracing import reports
from ragtopics.ui.app import launch_console
from tests.conftest import free_port
from tests.graph.test_corrections import PLANT, plant  # noqa: F401 - a GraphRAG Topic with one uploaded file
from tests.ingest.test_ingest import upload
from tests.ui.test_access import PASSWORD

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def shot(page, tmp_path, name: str) -> None:
    """Screenshot into the test's folder and, when RAGTOPICS_SCREENSHOTS names a folder, there too (docs/screenshots)."""
    page.screenshot(path=str(tmp_path / name))
    target = os.environ.get("RAGTOPICS_SCREENSHOTS")
    if target:
        page.screenshot(path=str(Path(target) / name), full_page=True)


def open_qa(page, rt, run_jobs, topic_name: str, files: dict[str, bytes], settings: dict | None = None) -> None:
    """Create a Topic with ``files`` indexed, then open the QA tab with that Topic chosen."""
    topic = create_topic(rt, topic_name, settings=settings or {})
    for name, data in files.items():
        upload(rt, topic, name, data)
    run_jobs()
    page.reload()
    page.get_by_role("tab", name="QA").click()
    page.locator("#qa-topic input").click()
    page.get_by_role("option", name=topic_name).click()


def ask_in_chat(page, topic_name: str, question: str) -> None:
    """Open the Chat tab, pick the Topic and send the question."""
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-topic input").click()
    page.get_by_role("option", name=topic_name).click()
    page.get_by_placeholder("Ask a question").fill(question)
    page.get_by_role("button", name="Send").click()


@pytest.fixture
def page(rt):
    """The console in headless Chromium; skips the test (wherever the fixture is used) without Chromium."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    port = free_port()
    app, _, _ = launch_console(rt, host="127.0.0.1", port=port)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/")
        yield page
        browser.close()
    app.close()


@pytest.fixture
def browser_for(rt):
    """Open the console (with users: login required) in fresh browser pages: ``browser_for(username)`` → logged-in page."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from ragtopics.access import users

    users.create_user(rt, "ada", PASSWORD, "admin")
    users.create_user(rt, "vic", PASSWORD, "viewer")
    port = free_port()
    server, url, _ = launch_console(rt, host="127.0.0.1", port=port)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)

        def open_as(username: str):
            page = browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
            page.goto(url)  # sent to the login form first
            page.get_by_label("Username").fill(username)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
            page.get_by_text(f"Signed in as {username}").wait_for(timeout=30000)
            return page

        yield open_as
        browser.close()
    server.close()


def test_a_user_creates_uploads_and_chats(page, run_jobs, scripted_llm, tmp_path):
    page.get_by_label("Name").first.fill("Browser Topic")
    page.get_by_role("button", name="Create Topic").click()
    page.get_by_text("Created RAG Topic").wait_for()

    page.get_by_role("tab", name="Upload").click()
    page.locator("#upload-topic input").click()
    page.get_by_role("option", name="Browser Topic").click()
    doc = tmp_path / "kettles.txt"
    doc.write_text("Kettle K-2 switches itself off at 100 degrees.")
    page.locator("#upload-files input[type=file]").set_input_files(str(doc))
    page.get_by_role("button", name="Upload", exact=True).click()
    page.get_by_text("Enqueued 1 file(s).").wait_for()
    run_jobs()
    page.get_by_text("indexed · 1 chunk", exact=True).wait_for(timeout=15000)
    page.locator("#documents >> text=kettles.txt >> visible=true").first.wait_for()

    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    ask_in_chat(page, "Browser Topic", "When does kettle K-2 switch off?")
    page.locator("#chatbot").get_by_text("At 100 degrees [kettles.txt].").wait_for(timeout=20000)
    page.locator("#rt-sources").get_by_text("kettles.txt").wait_for()
    shot(page, tmp_path, "chat-sources.png")


def test_without_a_language_model_the_answer_quotes_the_manual_with_its_source(page, reconfigure, run_jobs, tmp_path):
    from tests.answer.test_extractive import KETTLE, QUESTION, SHIPPING

    rt = reconfigure(LLM_BASE_URL=None, LOCAL_LLM_PORT=1)  # no endpoint configured: the bundled model (not even running)
    topic = create_topic(rt, "Kettle manuals")
    upload(rt, topic, "kettle-manual.md", KETTLE)
    upload(rt, topic, "shipping.txt", SHIPPING)
    run_jobs()
    page.reload()
    ask_in_chat(page, "Kettle manuals", QUESTION)
    chat = page.locator("#chatbot")
    chat.get_by_text("Descale the Kettle K-2 every four weeks in hard-water areas", exact=False).wait_for(timeout=30000)
    chat.get_by_text("Quoted from the sources: no language model is configured", exact=False).wait_for(timeout=30000)
    page.locator("#rt-sources").get_by_text("kettle-manual.md").wait_for()
    assert "The [kettle-manual.md] is from" not in chat.inner_text()
    shot(page, tmp_path, "chat-extractive.png")


def kettle_chat(page, rt, run_jobs, scripted_llm, name: str):
    """A Topic with one kettle manual, opened in the Chat tab; the scripted model answers the two kettle questions."""
    topic = create_topic(rt, name)
    upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees. Kettle K-3 holds 1.7 litres.")
    run_jobs()
    page.reload()
    scripted_llm.replies["answer"] = lambda body: (
        "It holds 1.7 litres [S1]."
        if "K-3 hold?" in body["messages"][-1]["content"]
        else "It switches off at one hundred degrees, as the manual says [S1]."
    )
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-topic input").click()
    page.get_by_role("option", name=name).click()
    return topic, page.get_by_placeholder("Ask a question")


def test_a_question_sent_while_an_answer_streams_is_answered_next(page, rt, run_jobs, scripted_llm, tmp_path):
    topic, box = kettle_chat(page, rt, run_jobs, scripted_llm, "Streaming Topic")
    scripted_llm.delay_s = 0.3
    try:
        box.fill("When does kettle K-2 switch off?")
        box.press("Enter")
        page.locator("#chatbot").get_by_text("It switches").wait_for(timeout=20000)
        box.fill("How much does kettle K-3 hold?")  # typed and sent while the first answer still streams
        box.press("Enter")
        assert box.input_value() in ("How much does kettle K-3 hold?", "")
        page.locator("#chatbot").get_by_text("It holds 1.7 litres [kettles.txt].").wait_for(timeout=30000)
    finally:
        scripted_llm.delay_s = 0
    chat = page.locator("#chatbot").inner_text()
    first = chat.index("It switches off at one hundred degrees, as the manual says [kettles.txt].")
    assert chat.index("When does kettle K-2 switch off?") < first < chat.index("How much does kettle K-3 hold?")
    assert chat.index("How much does kettle K-3 hold?") < chat.index("It holds 1.7 litres")
    page.screenshot(path=str(tmp_path / "two-questions.png"))
    expected = ["When does kettle K-2 switch off?", "How much does kettle K-3 hold?"]
    for _ in range(100):  # the turn is saved as the stream ends; the text can show a moment earlier
        with rt.metadata.session() as s:
            (session,) = s.exec(select(ChatSessionRow).where(ChatSessionRow.topic_id == topic.id)).all()
        if len(session_turns(rt, session.id)) == 2:
            break
        time.sleep(0.1)
    assert [t.question for t in session_turns(rt, session.id)] == expected


def test_stopping_the_first_answer_of_a_chat_leaves_the_chat_usable(page, rt, run_jobs, scripted_llm, tmp_path):
    topic, box = kettle_chat(page, rt, run_jobs, scripted_llm, "Stop Topic")
    scripted_llm.delay_s = 0.4
    try:
        box.fill("When does kettle K-2 switch off?")
        box.press("Enter")
        page.locator("#chatbot").get_by_text("It switches").wait_for(timeout=20000)
        page.get_by_role("button", name="Stop").click()
        page.locator("#chatbot").get_by_text("stopped: this answer is not saved").wait_for(timeout=10000)
    finally:
        scripted_llm.delay_s = 0
    # A person reads the stopped answer before typing; the browser finishes the cancelled event meanwhile
    # (a question sent in the same instant stays in the box, unsent, and Send sends it).
    page.wait_for_timeout(2000)
    box.fill("How much does kettle K-3 hold?")
    box.press("Enter")
    page.locator("#chatbot").get_by_text("It holds 1.7 litres [kettles.txt].").wait_for(timeout=20000)
    page.locator("#chatbot").get_by_role("link", name="kettles.txt").last.wait_for()
    assert "no chat session" not in page.locator("#chatbot").inner_text()
    page.screenshot(path=str(tmp_path / "after-stop.png"))
    with rt.metadata.session() as s:
        sessions = s.exec(select(ChatSessionRow).where(ChatSessionRow.topic_id == topic.id)).all()
    assert [[t.question for t in session_turns(rt, x.id)] for x in sessions] == [["How much does kettle K-3 hold?"]]


def test_deleting_a_cited_document_in_the_console(page, rt, run_jobs, scripted_llm, tmp_path):
    """Ask, delete the cited file with the confirmation naming it, then: the old link refuses with a page, a follow-up finds nothing."""
    import urllib.request

    topic, box = kettle_chat(page, rt, run_jobs, scripted_llm, "Delete Topic")
    box.fill("When does kettle K-2 switch off?")
    box.press("Enter")
    link = page.locator("#chatbot").get_by_role("link", name="kettles.txt").last
    link.wait_for(timeout=20000)
    href = link.get_attribute("href")

    page.get_by_role("tab", name="Upload").click()
    page.locator("#upload-topic input").click()
    page.get_by_role("option", name="Delete Topic").click()
    page.locator("#delete-document-choice input").click()
    page.get_by_role("option", name="kettles.txt").click()
    page.get_by_role("button", name="Delete document…").click()
    page.get_by_text("Delete kettles.txt from Topic Delete Topic?").wait_for()
    page.screenshot(path=str(tmp_path / "delete-confirm.png"))
    page.get_by_role("button", name="Delete kettles.txt").click()
    page.locator("#delete-document-status").get_by_text("Deleted kettles.txt").wait_for(timeout=10000)
    assert "kettles.txt" not in page.locator("#documents").inner_text()

    base = page.url.rstrip("/")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(base + href)
    body = refused.value.read().decode()
    assert refused.value.code == 410 and "This file is no longer stored" in body and "Traceback" not in body

    scripted_llm.replies["answer"] = "It switches off at 100 degrees [S1]."
    page.get_by_role("tab", name="Chat").click()
    box.fill("And kettle K-2 again?")
    box.press("Enter")
    page.locator("#chatbot").get_by_text(topic.settings.no_answer_response).last.wait_for(timeout=20000)
    page.locator("#chatbot").get_by_text("kettles.txt · removed").wait_for(timeout=10000)  # the earlier answer's line
    assert page.locator("#chatbot").get_by_role("link", name="kettles.txt").count() == 0
    page.screenshot(path=str(tmp_path / "after-delete.png"))


def test_a_qa_run_is_started_shown_and_compared(page, rt, run_jobs, tmp_path):
    open_qa(
        page,
        rt,
        run_jobs,
        "Fleet QA",
        {
            "pumps.txt": b"Pump P-7 is inspected every 90 days by the night shift.",
            "trucks.txt": b"Truck T-3 carries spare tyres and a jack.",
        },
        settings={"min_similarity_score": 0.0, "route_before_retrieval": False},
    )
    questions = [
        {"question": "How often is pump P-7 inspected?", "gold_sources": ["pumps.txt"], "expected_way": "SEARCH"},
        {"question": "What does truck T-3 carry?", "gold_sources": ["trucks.txt"]},
    ]
    page.locator("#qa-text textarea").fill(json.dumps(questions))
    page.get_by_role("button", name="Run evaluation").click()
    page.get_by_text("Queued run").wait_for()
    run_jobs()
    page.locator("#qa-progress").get_by_text("finished").wait_for(timeout=15000)
    page.locator("#qa-summary").get_by_text("recall@5").wait_for(timeout=15000)
    assert "SEARCH 2" in page.locator("#qa-summary").inner_text()
    page.locator("#qa-table >> text=How often is pump P-7 inspected? >> visible=true").first.wait_for()
    first = page.locator("#qa-message").inner_text().split()[-1].strip(".")

    page.locator("#qa-way input").click()  # the same questions with every question forced to DIRECT
    page.get_by_role("option", name="DIRECT").click()
    page.get_by_role("button", name="Run evaluation").click()
    page.locator("#qa-message").get_by_text("Queued run").wait_for()
    page.wait_for_function("(first) => !document.querySelector('#qa-message').innerText.includes(first)", arg=first)
    second = page.locator("#qa-message").inner_text().split()[-1].strip(".")
    run_jobs()
    page.locator("#qa-summary").get_by_text("DIRECT 2").wait_for(timeout=15000)
    for box, run_id in (("#qa-compare-a", first), ("#qa-compare-b", second)):
        page.locator(f"{box} input").fill(run_id)
        page.locator(f"{box} input").press("Enter")
    page.get_by_role("button", name="Compare").click()
    comparison = page.locator("#qa-comparison")
    comparison.get_by_text("2 question(s) changed").wait_for(timeout=15000)
    assert "way: SEARCH → DIRECT" in comparison.inner_text() and "retrieval_only" not in comparison.inner_text()
    shot(page, tmp_path, "qa-comparison.png")


def test_the_wizard_creates_a_graphrag_topic_step_by_step(page, rt, tmp_path):
    page.locator("#wizard-kind").get_by_label("GraphRAG").check()
    page.locator("#wizard-name").get_by_role("textbox").fill("Plant graph")
    page.locator("#wizard-next-1").click()
    page.get_by_label("Pictures").check()  # a group ticks all its single types
    page.get_by_text("Pictures (7 types)").click()
    page.locator("#wizard-types-pictures").get_by_label("png").wait_for()
    assert page.locator("#wizard-types-pictures").get_by_label("png").is_checked()
    overlap = page.locator("#wizard-graphrag-chunk-overlap input")
    overlap.fill("5000")
    page.locator("#wizard-next-2").click()
    page.locator("#wizard-graphrag-resolution input").fill("1.5")
    page.get_by_text("Leiden resolution: higher gives more, smaller communities").wait_for()  # the description is the help line
    shot(page, tmp_path, "wizard.png")
    page.locator("#wizard-create").click()
    page.get_by_text("Not created").wait_for()
    assert "chunk_overlap" in page.locator("#topic-status").inner_text()  # the message names the field
    page.locator("#wizard-back-3").click()
    overlap.fill("100")
    page.locator("#wizard-create").click()
    page.get_by_text("Created GraphRAG Topic").wait_for()
    topic = get_topic(rt, "Plant graph")
    assert topic.kind == "graphrag" and topic.settings.resolution == 1.5 and topic.settings.chunk_overlap == 100
    assert {"png", "jpg", "pdf", "md"} <= set(topic.settings.file_types)


def test_a_viewer_sees_only_the_chat_and_graph(browser_for, tmp_path):
    page = browser_for("vic")
    page.get_by_role("tab", name="Chat").wait_for()
    shot(page, tmp_path, "viewer.png")
    tabs = [t.inner_text() for t in page.get_by_role("tab").all() if t.is_visible()]
    assert "Chat" in tabs and "Graph" in tabs
    assert not {"Topics", "Upload", "Prompts", "QA", "Admin", "DEV Reports"} & set(tabs)
    page.get_by_role("tab", name="Graph").click()
    page.locator("#graph-show").wait_for()
    assert not page.locator("#graph-corrections").is_visible()  # correcting the graph is an operator's
    page.get_by_role("button", name="Log out").click()
    page.get_by_role("button", name="Log in").wait_for()
    page.goto(page.url.split("/login")[0] + "/")
    page.get_by_role("button", name="Log in").wait_for()  # the session ended: back to the login form


def test_a_dev_report_appears_opens_and_downloads(browser_for, rt, run_jobs, scripted_llm, tmp_path):
    page = browser_for("ada")
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees.")
    run_jobs()
    page.reload()  # the Topic dropdowns are filled when the page loads
    page.get_by_role("tab", name="DEV Reports").click()
    page.locator("#dev-switch-chat").get_by_role("checkbox").check()
    page.get_by_text("Reporting: Report chat answers").wait_for()
    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    ask_in_chat(page, "Kettles", "When does kettle K-2 switch off?")
    page.locator("#chatbot").get_by_text("At 100 degrees [kettles.txt].").wait_for(timeout=20000)
    page.locator("#rt-sources").get_by_text("kettles.txt").wait_for()
    shot(page, tmp_path, "chat-sources.png")
    page.get_by_role("tab", name="DEV Reports").click()
    page.locator("#dev-refresh").click()
    page.locator("#dev-reports").get_by_text("When does kettle K-2 switch off?").first.wait_for(state="attached", timeout=15000)
    report_id = reports.list_reports(rt, kind="chat")[0].id
    page.locator("#dev-reports").get_by_text("When does kettle K-2 switch off?").filter(visible=True).first.click()  # opens it
    page.locator("#dev-report-view details[data-step='retrieve']").wait_for()
    assert page.locator("#dev-report-id input").input_value() == str(report_id)  # the id, for Open report later
    page.locator("#dev-report-view details[data-step='prompt'] summary").click()
    shot(page, tmp_path, "dev-report.png")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download JSON").click()
    saved = json.loads(Path(download.value.path()).read_text())
    assert saved["kind"] == "chat" and saved["subject"] == "When does kettle K-2 switch off?"


def test_the_graph_view_draws_an_entity_and_clicks_through(page, rt, tmp_path):
    from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
    from ragtopics.graph.refresh import run_rebuild
    from tests.graph.test_graph_ingestion import LLM, people

    topic = create_topic(rt, "Scientists", kind="graphrag", settings=LLM)
    ingest_graph(rt, topic, "people.json", parse_nodes_edges_json(people()))
    run_rebuild(rt, topic.id)
    page.get_by_role("tab", name="Graph", exact=True).click()
    page.locator("#graph-topic input").click()
    page.get_by_role("option", name="Scientists").click()
    page.locator("#graph-communities").get_by_text("Marie Curie").first.wait_for(state="attached")
    page.locator("#graph-entity").get_by_role("textbox").fill("Marie Curie")
    page.locator("#graph-show").click()
    page.locator("#graph-picture g[data-entity='Pierre Curie']").wait_for()
    page.locator("#graph-details").get_by_text("Married Pierre Curie in 1895.").wait_for()
    shot(page, tmp_path, "graph-view.png")
    page.locator("#graph-picture g[data-entity='University of Paris'] circle").click()
    page.locator("#graph-details").get_by_text("University of Paris (ORGANIZATION)").wait_for(timeout=15000)
    assert page.locator("#graph-entity").get_by_role("textbox").input_value() == "University of Paris"


def test_why_explains_an_answer_without_sources(page, rt, run_jobs, scripted_llm, tmp_path):
    topic = create_topic(rt, "Strict kettles", settings={"min_similarity_score": 0.99, "retrieval_strategy": "DENSE"})
    upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees.")
    run_jobs()
    page.reload()
    scripted_llm.replies["answer"] = "Nothing on that."
    ask_in_chat(page, "Strict kettles", "When does kettle K-2 switch off?")
    page.locator("#chatbot").get_by_text(topic.settings.no_answer_response).wait_for(timeout=20000)
    page.locator("#why-answer").click()
    panel = page.locator("#answer-diagnosis")
    panel.get_by_text('Why? Answers say "I don\'t know" too often').wait_for(timeout=15000)
    assert "Min. Similarity Score 0.99" in panel.inner_text() and "min_similarity_score = 0.99" in panel.inner_text()
    shot(page, tmp_path, "diagnosis.png")


def test_the_qa_tab_runs_two_settings_and_compares_them(page, rt, run_jobs, tmp_path):
    open_qa(
        page,
        rt,
        run_jobs,
        "QA kettles",
        {
            "kettles.txt": b"Kettle K-2 switches itself off at 100 degrees.",
            "toasters.txt": b"Toaster T-1 browns bread in two minutes.",
        },
    )
    questions = json.dumps(
        [
            {"question": "When does kettle K-2 switch off?", "gold_sources": ["kettles.txt"]},
            {"question": "How long does toaster T-1 take?", "gold_sources": ["toasters.txt"]},
        ]
    )
    page.locator("#qa-text textarea").fill(questions)
    runs = []
    for settings in ("", "retrieval_strategy=DENSE"):
        page.locator("#qa-settings textarea").fill(settings)
        page.locator("#qa-run").click()
        message = page.locator("#qa-message").get_by_text(re.compile(r"Queued run"))
        deadline = time.monotonic() + 30
        while not (
            message.count() and (found := re.search(r"eval-[0-9a-f-]+", message.inner_text())) and found.group(0) not in runs
        ):
            assert time.monotonic() < deadline, "no new run was queued"
            page.wait_for_timeout(100)
        runs.append(found.group(0))
        run_jobs()
        page.locator("#qa-table").get_by_text("How long does toaster T-1 take?").first.wait_for(state="attached", timeout=20000)
    for box, run_id in (("#qa-compare-a", runs[0]), ("#qa-compare-b", runs[1])):
        field = page.locator(f"{box} input")
        field.fill(run_id)  # a run id typed in is taken as it is
        field.press("Enter")
    page.locator("#qa-compare").click()
    page.locator("#qa-comparison").get_by_text("question(s) changed").wait_for(timeout=15000)
    compared = page.locator("#qa-comparison").inner_text()
    assert f"A: {runs[0]}" in compared and f"B: {runs[1]}" in compared and "recall@5" in compared
    shot(page, tmp_path, "qa-browser.png")


def test_a_demo_link_made_in_the_console_opens_one_topic_without_login(browser_for, rt, run_jobs, scripted_llm, tmp_path):
    topic = create_topic(rt, "Kettle demo")
    upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees. Descale it every month.")
    run_jobs()
    operator = browser_for("ada")
    operator.get_by_role("tab", name="Topics").click()
    operator.get_by_text("Demo links", exact=True).click()
    operator.locator("#demo-topic input").click()
    operator.get_by_role("option", name="Kettle demo").click()
    operator.get_by_role("button", name="Make demo link").click()
    url = operator.locator("#demo-link-url").first.inner_text(timeout=30000)
    assert "/demo/" in url
    operator.locator("#demo-made").get_by_text("shown only this once", exact=False).wait_for()

    scripted_llm.replies["answer"] = "It switches itself off at 100 degrees [S1]."
    visitor = operator.context.browser.new_context(viewport={"width": 1000, "height": 700}).new_page()  # no login
    visitor.goto(url)
    assert visitor.locator("#topic").inner_text() == "Kettle demo"
    visitor.get_by_text("This is a demo").wait_for()
    visitor.get_by_placeholder("Ask a question").fill("When does kettle K-2 switch off?")
    visitor.get_by_role("button", name="Ask").click()
    visitor.get_by_text("It switches itself off at 100 degrees [kettles.txt].").wait_for(timeout=30000)
    visitor.get_by_text("Sources: kettles.txt").wait_for()
    shot(visitor, tmp_path, "demo-link.png")
    visitor.goto(url.split("/demo/")[0] + "/")  # the console itself still wants a login
    visitor.get_by_label("Username").wait_for()


def test_graph_corrections_made_in_the_console_survive_a_re_upload_from_the_console(page, rt, run_jobs, plant, tmp_path):
    """Merge, split and rename in the Graph tab's panel, then upload the same file again in the Upload tab: all three hold."""
    page.reload()
    page.get_by_role("tab", name="Graph", exact=True).click()
    page.locator("#graph-topic input").click()
    page.get_by_role("option", name="Plant").click()
    page.locator("#graph-corrections").get_by_text("Correct the graph").first.click()
    panel = page.locator("#graph-corrections")
    status = page.locator("#graph-correction-status")

    def apply(kind: str, name: str, value: str, expected: str) -> None:
        panel.get_by_label(kind, exact=True).check()
        page.locator("#graph-correction-name").get_by_role("textbox").fill(name)
        page.locator("#graph-correction-value").get_by_role("textbox").fill(value)
        page.locator("#graph-correction-apply").click()
        status.get_by_text(expected).wait_for(timeout=20000)

    apply("merge", "USA", "United States", 'merged "USA" (PLACE) into "United States"')
    apply("split", "IBM", "International Business Machines", '"IBM"')
    apply("rename", "Pump P1", "Feed Pump P-1", "Feed Pump P-1")
    panel.locator("#graph-corrections-table").get_by_text('into "United States"').first.wait_for()
    made = list_corrections(rt, plant.id)
    assert [c.kind for c in made] == ["merge", "split", "rename"] and {c.created_by for c in made} == {"local"}

    page.get_by_role("tab", name="Upload").click()
    page.locator("#upload-topic input").click()
    page.get_by_role("option", name="Plant").click()
    doc = tmp_path / "plant.txt"
    doc.write_bytes(PLANT)
    page.locator("#upload-files input[type=file]").set_input_files(str(doc))
    page.get_by_role("button", name="Upload", exact=True).click()
    page.get_by_text("Enqueued 1 file(s).").wait_for()
    run_jobs()
    store = graph_store(rt, plant)
    usa, ibm, pump = store.entity_by_name("USA"), store.entity_by_name("IBM"), store.entity_by_name("Feed Pump P-1")
    assert usa.name == "United States" and "USA" in usa.aliases and len(usa.chunk_ids) == 2
    assert ibm.name == "IBM" and ibm.id != store.entity_by_name("International Business Machines").id
    assert pump.name == "Feed Pump P-1" and store.entity_by_name("Pump P1").id == pump.id

    page.get_by_role("tab", name="Graph", exact=True).click()
    page.locator("#graph-entity").get_by_role("textbox").fill("USA")
    page.locator("#graph-show").click()
    details = page.locator("#graph-details")
    details.get_by_text("United States (PLACE)").first.wait_for(timeout=15000)
    details.get_by_text('merged "USA" (PLACE) into "United States" (PLACE)').first.wait_for()
    shot(page, tmp_path, "graph-corrections.png")
