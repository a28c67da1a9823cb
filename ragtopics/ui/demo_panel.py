"""The Topics tab's "Demo links" panel: make a demo link for one Topic, list links, revoke one, read its chats.

Its events need the operator role (``ROLE_OF_PAGE["demo_links"]``). A new link's token is shown
once, inside its URL; the table shows links by id only.
"""

from __future__ import annotations

import html
from typing import Any

import gradio as gr

from ragtopics.demo import links
from ragtopics.demo.links import request_base_url
from ragtopics.errors import RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.ui import web
from ragtopics.ui.common import md_text

LINK_HEADERS = ["Link", "Topic", "State", "Expires (UTC)", "Sources", "Per visitor/min", "Per link/min", "Questions", "Made by"]
TURN_HEADERS = ["When (UTC)", "Visitor", "Question", "Answer", "Sources"]


def links_table(rt: Runtime) -> list[list]:
    """Rows of the links table, newest first."""
    return [
        [
            k.id,
            k.topic_name,
            k.state(),
            f"{k.expires_at:%Y-%m-%d %H:%M}",
            "yes" if k.allow_sources else "no",
            k.visitor_rate,
            k.link_rate,
            k.turns,
            k.created_by or "(CLI)",
        ]
        for k in links.list_links(rt)
    ]


def turns_table(rt: Runtime, link_id: str) -> list[list]:
    """Rows of one link's chats: what its visitors asked, oldest first."""
    return [
        [t["created_at"][:16].replace("T", " "), t["visitor"], t["question"], t["answer"], ", ".join(t["sources"])]
        for t in links.list_turns(rt, link_id)
    ]


def new_link_text(new: links.NewLink) -> str:
    """What the panel says about a link just made: its URL(s), shown this once, and where it works."""
    urls = (
        "".join(f"<br><code id='demo-link-url'>{html.escape(u)}</code>" for u in new.urls)
        or f"<br><code id='demo-link-url'>{html.escape(new.path)}</code>"
    )
    notes = "".join(f"<br>{html.escape(n)}" for n in new.notes)
    return (
        f"Made demo link **{new.link.id}** for **{md_text(new.link.topic_name)}**, until "
        f"{new.link.expires_at:%Y-%m-%d %H:%M} UTC. Copy it now: it is shown only this once.{urls}{notes}"
    )


def build(rt: Runtime) -> dict:
    """Lay out the panel (inside the Topics tab) and wire its events; returns its Topic dropdown, for refreshes."""
    with gr.Accordion("Demo links", open=False, elem_id="demo-links") as box:
        gr.Markdown(
            "A demo link lets anyone who has it ask one Topic, without an account: nothing else of the console "
            "is reachable through it. It expires, and can be revoked at once."
        )
        with gr.Row():
            topic = gr.Dropdown(choices=[], label="Topic", allow_custom_value=True, elem_id="demo-topic")
            hours = gr.Number(links.DEFAULT_HOURS, label=f"Lasts (hours, at most {links.MAX_HOURS})", elem_id="demo-hours")
            rate = gr.Number(
                links.DEFAULT_VISITOR_RATE, precision=0, label="Questions per minute per visitor", elem_id="demo-rate"
            )
            link_rate = gr.Number(
                links.DEFAULT_LINK_RATE, precision=0, label="Questions per minute per link", elem_id="demo-link-rate"
            )
            sources = gr.Checkbox(False, label="Visitors may download source files", elem_id="demo-sources")
        make = gr.Button("Make demo link", variant="primary", elem_id="demo-make")
        made = gr.Markdown(elem_id="demo-made")
        table = gr.Dataframe(headers=LINK_HEADERS, interactive=False, label="Demo links", elem_id="demo-table")
        with gr.Row():
            link_id = gr.Textbox(label="Link", placeholder="the id in the table's first column", elem_id="demo-link-id")
            delete_chats = gr.Checkbox(False, label="Also delete its chats", elem_id="demo-delete-chats")
            revoke = gr.Button("Revoke", variant="stop", elem_id="demo-revoke")
            show = gr.Button("Show its chats", elem_id="demo-show-chats")
        status = gr.Markdown(elem_id="demo-status")
        turns = gr.Dataframe(headers=TURN_HEADERS, interactive=False, label="Its chats", elem_id="demo-chats", wrap=True)

    def on_make(topic_name, hours_value, rate_value, link_rate_value, allow, request: gr.Request):
        if not topic_name:
            return "Choose a Topic first.", gr.skip()
        user = web.acting_user()
        base = request_base_url({k.lower(): v for k, v in request.headers.items()}) if request is not None else None
        try:
            new = links.create_link(
                rt,
                topic_name,
                hours=hours_value,
                allow_sources=bool(allow),
                visitor_rate=_int(rate_value),
                link_rate=_int(link_rate_value),
                created_by=user.username if user is not None else "",
                base_urls=[base] if base else [],
            )
        except RagTopicsError as exc:
            return f"**No link made:** {html.escape(str(exc))}", gr.skip()
        return new_link_text(new), links_table(rt)

    def on_revoke(raw_id, delete):
        link_id_value = (raw_id or "").strip()
        if not link_id_value:
            return "Type a link's id (the table's first column) first.", gr.skip(), gr.skip()
        try:
            done = links.revoke_link(rt, link_id_value, delete_chats=bool(delete))
        except RagTopicsError as exc:
            return f"**Not revoked:** {html.escape(str(exc))}", gr.skip(), gr.skip()
        deleted = f"; {done['deleted_turns']} question(s) of its visitors deleted" if delete else ""
        return (
            f"Revoked demo link **{md_text(link_id_value)}**: it opens nothing from now on{deleted}.",
            links_table(rt),
            (turns_table(rt, link_id_value) if delete else gr.skip()),
        )

    def on_show(raw_id):
        try:
            rows = turns_table(rt, (raw_id or "").strip())
        except RagTopicsError as exc:
            return html.escape(str(exc)), gr.skip()
        return f"{len(rows)} question(s) asked through **{md_text(raw_id.strip())}**.", rows

    private: dict[str, Any] = {"api_visibility": "private"}
    box.expand(lambda: links_table(rt), None, table, **private)
    make.click(on_make, [topic, hours, rate, link_rate, sources], [made, table], **private)
    revoke.click(on_revoke, [link_id, delete_chats], [status, table, turns], **private)
    show.click(on_show, link_id, [status, turns], **private)
    return {"topic": topic, "table": table}


def _int(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
