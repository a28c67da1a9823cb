"""The Gradio console: one tab per module, mounted in the product's FastAPI app (:mod:`ragtopics.ui.web`)."""

from __future__ import annotations

import html
import logging
import threading
from pathlib import Path

import gradio as gr
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from ragtopics.access import users
from ragtopics.access.users import User
from ragtopics.answer.routing import warm_router
from ragtopics.api import add_api_routes
from ragtopics.demo.links import remember_share_url
from ragtopics.runtime import Runtime, freeze_startup_heap
from ragtopics.tracing import reports
from ragtopics.ui import (
    admin_tab,
    chat_tab,
    demo_panel,
    dev_reports_tab,
    graph_corrections,
    graph_view,
    logs_tab,
    mcp_tools,
    prompts_tab,
    qa_tab,
    topics_tab,
    upload_tab,
    web,
)
from ragtopics.ui.common import refresh_dropdown
from ragtopics.ui.demo_page import add_demo_routes
from ragtopics.ui.files_route import UploadFolderHeaders, add_file_route

TITLE = "ragtopics"
#: Largest file Gradio's upload route takes, in MB (a Topic's own Max. File Size is checked after it).
MAX_UPLOAD_MB = 1024

log = logging.getLogger(__name__)


def build_app(rt: Runtime) -> gr.Blocks:
    """Build the console, every event guarded by the role its page needs.

    Args:
        rt: the runtime whose stores and gateway the console uses.

    Returns:
        The Blocks app (not launched); ``app.ragtopics_needs`` maps each event id to the role it needs.
    """
    with gr.Blocks(title=TITLE, analytics_enabled=False) as app:
        roles = web.EventRoles(app)
        with gr.Row():
            gr.Markdown(f"## {TITLE} · document question answering with cited sources")
            with gr.Column(scale=1, min_width=240):
                whoami = gr.Markdown(elem_id="whoami")
                logout = gr.Button("Log out", size="sm", visible=False, elem_id="logout")
        logout.click(None, js="() => fetch('/logout', {method: 'POST'}).then(() => { window.location.href = '/login'; })")
        with gr.Tabs() as tabs:
            with roles.page("topics"):
                topics = topics_tab.build(rt)
            with roles.page("demo_links"), topics["tab"]:  # a panel at the end of the Topics tab, with its own role
                demo = demo_panel.build(rt)
            with roles.page("upload"):
                upload = upload_tab.build(rt)
            with roles.page("chat"):
                chat = chat_tab.build(rt)
            with roles.page("prompts"):
                prompts = prompts_tab.build(rt)
            with roles.page("qa"):
                qa = qa_tab.build(rt)
            with roles.page("graph"):
                graph = graph_view.build(rt)
            with roles.page("graph_corrections"), graph["tab"]:  # a panel at the end of the Graph tab, for operators
                corrections = graph_corrections.build(rt, graph)
            with roles.page("logs"):
                logs = logs_tab.build(rt)
            with roles.page("admin"):
                admin = admin_tab.build(rt)
            with roles.page("dev_reports"):
                dev = dev_reports_tab.build(rt)
        with roles.page("mcp"):
            mcp_tools.register(rt)
        with roles.page("topics"):
            topics_tab.register_api(rt)
        pages = {
            "topics": topics["tab"],
            "upload": upload["tab"],
            "chat": chat["tab"],
            "prompts": prompts["tab"],
            "qa": qa["tab"],
            "graph": graph["tab"],
            "logs": logs["tab"],
            "admin": admin["tab"],
            "dev_reports": dev["tab"],
        }
        # Every page starts hidden and the load event shows the caller's (Gradio shows a hidden tab on update,
        # but does not hide a shown one), so a viewer never sees an operator's page, not even for a moment.
        for page in pages.values():
            page.visible = False
        # (page, Topic dropdown on it): each list is refreshed only for a caller who may see its page.
        dropdowns = [
            ("upload", upload["topic"]),
            ("chat", chat["topic"]),
            ("prompts", prompts["topic"]),
            ("qa", qa["topic"]),
            ("topics", topics["settings_topic"]),
            ("topics", topics["delete_topic"]),
            ("topics", topics["overrides_topic"]),
            ("topics", demo["topic"]),
            ("logs", logs["topic"]),
        ]
        boxes = [box for _, box in dropdowns]

        def refresh(*current):
            return tuple(refresh_dropdown(rt, c) for c in current)

        def on_load(*current):
            """Who is signed in, their pages, and fresh Topic lists and table for those pages only."""
            user = web.acting_user()  # the event guard found the caller
            allowed = {name for name in pages if user is not None and user.may(web.ROLE_OF_PAGE[name])}
            shown = [gr.Tab(visible=True) if name in allowed else gr.skip() for name in pages]
            lists = [refresh_dropdown(rt, c) if page in allowed else gr.skip() for (page, _), c in zip(dropdowns, current)]
            table = topics_tab.topics_table(rt) if "topics" in allowed else gr.skip()
            first = next((page.id for name, page in pages.items() if name in allowed), None)
            signed_in = user is not None and user is not users.LOCAL_USER
            may_correct = user is not None and user.may(web.ROLE_OF_PAGE["graph_corrections"])
            return [
                whoami_text(rt, user),
                gr.Button(visible=signed_in),
                gr.Tabs(selected=first) if first else gr.skip(),
                *shown,
                *lists,
                table,
                gr.Accordion(visible=True) if may_correct else gr.skip(),
            ]

        with roles.page("topics"):  # follows a Topic's creation or delete, which only an operator can run
            topics["created"].then(refresh, boxes, boxes, api_visibility="private")
            topics["deleted"].then(refresh, boxes, boxes, api_visibility="private")
        with roles.page("console"):
            app.load(
                on_load,
                boxes,
                [whoami, logout, tabs, *pages.values(), *boxes, topics["table"], corrections["box"]],
                api_visibility="private",
            )
    web.guard_events(rt, app, roles.needs)
    app.ragtopics_needs = dict(roles.needs)
    return app


def whoami_text(rt: Runtime, user: User | None) -> str:
    """The header's right-hand line: who is signed in with which role, or the open-mode notice."""
    if user is None:
        return ""
    if user is users.LOCAL_USER:
        return f'<div id="open-mode" style="font-size:0.85em;color:#92400e">{html.escape(web.open_mode_text())}</div>'
    extra = " · DEV_REPORTING" if user.dev_reporting and user.role != "admin" else ""
    return f'<div style="text-align:right">Signed in as <b>{html.escape(user.username)}</b> ({user.role}{extra})</div>'


def launch_console(
    rt: Runtime, *, host: str, port: int, share: bool = False, mcp: bool = True, freeze: bool = False
) -> tuple[web.ConsoleServer, str, str | None]:
    """Build the console, mount it in the FastAPI app and serve it (without blocking).

    The embedding model and the router's exemplars are loaded in a thread right after; with ``freeze`` (the
    console's own process, not an embedding one such as a test's) the objects alive then are frozen for the
    garbage collector (:func:`~ragtopics.runtime.freeze_startup_heap`).

    With no admin (open mode) the console listens on 127.0.0.1 whatever ``host`` says, and a
    share link is refused: both would expose a console without login. A share link that cannot
    be made (no internet) is said once; the console keeps serving locally.

    Returns:
        ``(server, local_url, share_url)``; ``server.close()`` stops it. With ``mcp`` the MCP
        server is at ``<local_url>gradio_api/mcp/``.

    Raises:
        ConfigurationError: ``ADMIN_USERNAME`` / ``ADMIN_PASSWORD`` are set but invalid.
        RagTopicsError: the port cannot be served.
    """
    reports.reset_switches(rt)  # DEV reporting is off after every start
    created = users.ensure_env_admin(rt)
    if created is not None:
        print(f"Created the admin {created.username!r} from ADMIN_USERNAME.", flush=True)
    notices = []
    rt._login_required = False  # decided now; once an admin exists the console never serves without login again
    open_mode = web.is_open_mode(rt)
    if open_mode and not web.is_loopback(host):
        notices.append(f"Serving on 127.0.0.1, not {host}: {web.open_mode_text()}")
        host = "127.0.0.1"
    if open_mode and share:
        notices.append("No share link: a share link needs login, and no admin exists yet. " + web.open_mode_text())
        share = False
    app = build_app(rt)
    app.queue(default_concurrency_limit=8)
    api = FastAPI(title=TITLE, docs_url=None, redoc_url=None, openapi_url=None)
    web.add_access_routes(api, rt)
    add_file_route(api, rt)
    add_demo_routes(api, rt)
    dev_reports_tab.add_report_route(api, rt)
    add_api_routes(api, rt)
    data = Path(rt.settings.data_dir)
    blocked = [
        str(p)
        for p in (
            data / "link-secret",
            data / "dev-reports",
            data / "files",
            data / "redis",
            data / "ragtopics.db",
            Path.cwd() / ".env",
        )
    ]
    api.add_middleware(CORSMiddleware, allow_origins=[])  # no cross-origin reads (and Gradio's permissive CORS stays off)
    api = gr.mount_gradio_app(
        api,
        app,
        path="/",
        auth_dependency=web.auth_dependency,
        mcp_server=mcp,
        show_error=False,
        blocked_paths=blocked,
        max_file_size=f"{MAX_UPLOAD_MB}mb",
    )
    # Gradio checks that a file named in an event's input lies in its upload folder only once the app "has launched",
    # which mount_gradio_app never sets: without this, an input could name any file on the server.
    app.has_launched = True
    web.guard_events(rt, app, app.ragtopics_needs)  # type: ignore[attr-defined]  # set on the Blocks by build_app; an event added after build_app is guarded too (admins only)
    api.add_middleware(UploadFolderHeaders)
    api.add_middleware(web.AccessMiddleware, rt=rt)
    server = web.serve(api, app, host=host, port=port)
    share_url = None
    if share:
        try:
            share_url = web.open_share_link(port)
        except Exception as exc:
            notices.append(f"No share link: it could not be made ({exc.__class__.__name__}: {exc}); serving locally only.")
    server.share_url, server.notices = share_url, notices
    try:
        remember_share_url(rt, share_url)  # demo links made from now on (console or CLI) name it
    except Exception as exc:
        log.warning("could not record the share link for demo links: %s", exc)
    for notice in notices:
        log.warning("%s", notice)
        print(notice, flush=True)
    # Load the embedding model and the router's exemplars now, not in the first chat turn.
    threading.Thread(target=_warm, args=(rt, freeze), name="warm-router", daemon=True).start()
    return server, server.local_url, share_url


def _warm(rt: Runtime, freeze: bool) -> None:
    try:
        warm_router(rt.gateway)
    except Exception as exc:
        log.warning("could not warm the router: %s", exc)
    if freeze:  # the models loaded: a full collection no longer pauses a chat turn to walk them
        freeze_startup_heap()
