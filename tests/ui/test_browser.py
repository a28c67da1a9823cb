"""The console in headless Chromium: create a Topic, upload a file, watch it index, ask, see sources."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import free_port
from ui.app import launch_console

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


@pytest.fixture
def page(rt):
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


def test_a_user_creates_uploads_and_chats(page, run_jobs, scripted_llm, tmp_path):
    page.get_by_label("Name").first.fill("Browser Topic")
    page.get_by_role("button", name="Create Topic").click()
    page.get_by_text("Created Topic").wait_for()

    page.get_by_role("tab", name="Upload").click()
    page.locator("#upload-topic input").click()
    page.get_by_role("option", name="Browser Topic").click()
    doc = tmp_path / "kettles.txt"
    doc.write_text("Kettle K-2 switches itself off at 100 degrees.")
    page.locator("#upload-files input[type=file]").set_input_files(str(doc))
    page.get_by_role("button", name="Upload", exact=True).click()
    page.get_by_text("Enqueued 1 file(s).").wait_for()
    run_jobs()
    page.get_by_text("indexed · 1 chunks").wait_for(timeout=15000)
    page.locator("#documents >> text=kettles.txt >> visible=true").first.wait_for()

    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-topic input").click()
    page.get_by_role("option", name="Browser Topic").click()
    page.get_by_placeholder("Ask a question").fill("When does kettle K-2 switch off?")
    page.get_by_role("button", name="Send").click()
    page.locator("#chatbot").get_by_text("At 100 degrees [kettles.txt].").wait_for(timeout=20000)
    page.locator("#rt-sources").get_by_text("kettles.txt").wait_for()
    page.screenshot(path=str(tmp_path / "chat.png"))
