"""The Gradio console: one tab per module, wired to the runtime."""

from __future__ import annotations

import logging
import threading

import gradio as gr

from ragtopics.answer.routing import warm_router
from ragtopics.runtime import Runtime
from ragtopics.ui import chat_tab, mcp_tools, prompts_tab, qa_tab, topics_tab, upload_tab
from ragtopics.ui.common import refresh_dropdown
from ragtopics.ui.files_route import install_file_route

TITLE = "ragtopics"

log = logging.getLogger(__name__)


def build_app(rt: Runtime) -> gr.Blocks:
    """Build the console.

    Args:
        rt: the runtime whose stores and gateway the console uses.

    Returns:
        The Blocks app (not launched).
    """
    with gr.Blocks(title=TITLE, analytics_enabled=False) as app:
        gr.Markdown(f"## {TITLE} · document question answering with cited sources")
        with gr.Tabs():
            topics = topics_tab.build(rt)
            upload = upload_tab.build(rt)
            chat = chat_tab.build(rt)
            prompts = prompts_tab.build(rt)
            qa = qa_tab.build(rt)
        mcp_tools.register(rt)
        dropdowns = [upload["topic"], chat["topic"], prompts["topic"], qa["topic"], topics["settings_topic"],
                     topics["delete_topic"]]

        def refresh(*current):
            return tuple(refresh_dropdown(rt, c) for c in current)

        topics["created"].then(refresh, dropdowns, dropdowns, api_visibility="private")
        topics["deleted"].then(refresh, dropdowns, dropdowns, api_visibility="private")
        app.load(refresh, dropdowns, dropdowns, api_visibility="private")
        app.load(lambda: topics_tab.topics_table(rt), None, topics["table"], api_visibility="private")
    return app


def launch_console(rt: Runtime, *, host: str, port: int, share: bool = False, mcp: bool = True) -> tuple[gr.Blocks, str, str | None]:
    """Build, launch (without blocking) and add the source-file route.

    Returns:
        ``(app, local_url, share_url)``; with ``mcp`` the MCP server is at ``<local_url>gradio_api/mcp/``.
    """
    app = build_app(rt)
    app.queue(default_concurrency_limit=8)
    _, local_url, share_url = app.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=True,
                                         quiet=True, show_error=True, mcp_server=mcp)  # fmt: skip
    install_file_route(app, rt)
    # Load the embedding model and the router's exemplars now, not in the first chat turn.
    threading.Thread(target=_warm, args=(rt,), name="warm-router", daemon=True).start()
    return app, local_url, share_url


def _warm(rt: Runtime) -> None:
    try:
        warm_router(rt.gateway)
    except Exception as exc:  # noqa: BLE001 - warming is an optimisation; the first turn loads what it needs
        log.warning("could not warm the router: %s", exc)
