"""The Gradio console: one tab per module, wired to the runtime."""

from __future__ import annotations

import gradio as gr

from core.runtime import Runtime
from ui import chat_tab, topics_tab, upload_tab
from ui.common import refresh_dropdown

TITLE = "ragtopics"


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
        dropdowns = [upload["topic"], chat["topic"]]
        refresh = lambda a, b: (refresh_dropdown(rt, a), refresh_dropdown(rt, b))  # noqa: E731
        topics["created"].then(refresh, dropdowns, dropdowns, api_visibility="private")
        app.load(refresh, dropdowns, dropdowns, api_visibility="private")
    return app
