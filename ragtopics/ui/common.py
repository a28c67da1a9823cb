"""Helpers shared by the console tabs."""

from __future__ import annotations

import html
import re

import gradio as gr

from ragtopics.errors import RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import Topic, get_topic, list_topics


def find_topic(rt: Runtime, name: str | None) -> Topic | None:
    """The Topic called ``name``, or None when the name is empty or unknown (dropdowns may lag)."""
    if not name:
        return None
    try:
        return get_topic(rt, name)
    except RagTopicsError:
        return None


def topic_choices(rt: Runtime) -> list[str]:
    """Names of every Topic, for dropdowns."""
    return [t.name for t in list_topics(rt)]


def refresh_dropdown(rt: Runtime, current: str | None = None) -> gr.Dropdown:
    """A dropdown update with fresh Topic names, keeping ``current`` when it still exists."""
    names = topic_choices(rt)
    return gr.Dropdown(choices=names, value=current if current in names else (names[0] if names else None))


def short_name(name: str, limit: int = 60) -> str:
    """A file name cut in the middle to at most ``limit`` characters, its end (extension) kept."""
    return name if len(name) <= limit else name[: limit - 15] + "…" + name[-14:]


def progress_bar(label: str, fraction: float, detail: str, state: str = "") -> str:
    """HTML for one labelled progress bar (``state``: "", "failed", "empty", "stopped" or "done").

    A long ``detail`` (an error message) wraps inside the bar's width instead of widening the page.
    """
    colour = {"failed": "#d9534f", "done": "#2e8b57", "empty": "#d97706", "stopped": "#9ca3af"}.get(state, "#3b82f6")
    pct = max(0.0, min(1.0, fraction)) * 100
    return (
        f'<div class="rt-job" data-state="{html.escape(state)}" style="margin:4px 0">'
        f'<div style="display:flex;justify-content:space-between;gap:8px;font-size:0.9em">'
        f'<span style="flex:0 1 auto;min-width:6em;max-width:40%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap">'
        f"{html.escape(label)}</span>"
        f'<span style="flex:1 1 0;min-width:0;text-align:right;overflow-wrap:anywhere">{html.escape(detail)}</span></div>'
        f'<div style="background:#e5e7eb;border-radius:4px;height:8px"><div style="width:{pct:.0f}%;'
        f'background:{colour};height:8px;border-radius:4px"></div></div></div>'
    )


#: Characters Markdown gives a meaning to; a name shown in a Markdown message has them backslash-escaped.
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def md_text(text: str) -> str:
    """``text`` as literal text inside Markdown (HTML escaped, Markdown's special characters backslash-escaped)."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", html.escape(text, quote=False))
