"""Users, roles, sessions and API tokens: every route refuses the anonymous, every event the under-privileged."""

from __future__ import annotations

import asyncio
import json
import re

import gradio as gr
import httpx
import pytest
from gradio_client import Client
from sqlmodel import select
from starlette.routing import Mount, Route, WebSocketRoute

from ragtopics.access import sessions, users
from ragtopics.errors import AccessDeniedError, ConfigurationError
from ragtopics.storage.metadata import ApiTokenRow, UserRow
from ragtopics.topics.topics import create_topic, list_topics
from ragtopics.ui import web
from ragtopics.ui.app import launch_console
from tests.conftest import free_port

PASSWORD = "correct horse battery"


@pytest.fixture
def people(rt):
    """An admin, an operator and a viewer; the console then requires login."""
    users.create_user(rt, "ada", PASSWORD, "admin")
    users.create_user(rt, "otto", PASSWORD, "operator")
    users.create_user(rt, "vic", PASSWORD, "viewer")
    return rt


@pytest.fixture
def secured(people):
    port = free_port()
    server, url, _ = launch_console(people, host="127.0.0.1", port=port)
    yield server, url
    server.close()


def login(url: str, username: str, password: str = PASSWORD) -> httpx.Client:
    client = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
    response = client.post("/login", data={"username": username, "password": password, "next": "/"})
    assert response.status_code == 303, response.text
    return client


def test_passwords_are_argon2_hashes_and_roles_are_ordered(rt):
    ada = users.create_user(rt, "ada", PASSWORD, "admin")
    with rt.metadata.session() as s:
        stored = s.get(UserRow, "ada").password_hash
    assert stored.startswith("$argon2id$") and PASSWORD not in stored
    assert users.authenticate(rt, "ada", PASSWORD) == ada
    for name, password in (("ada", "wrong password"), ("nobody", PASSWORD)):
        with pytest.raises(AccessDeniedError, match="^wrong username or password$"):  # the same text: names cannot be probed
            users.authenticate(rt, name, password)
    with pytest.raises(ConfigurationError, match="Password: at least 8"):
        users.create_user(rt, "bob", "short", "viewer")
    with pytest.raises(ConfigurationError, match="Username: 'ada' is taken"):
        users.create_user(rt, "ada", PASSWORD, "viewer")
    with pytest.raises(ConfigurationError, match="Role: must be one of viewer, operator, admin"):
        users.create_user(rt, "bob", PASSWORD, "root")
    with pytest.raises(ConfigurationError, match="only admin"):
        users.update_user(rt, "ada", role="viewer")
    with pytest.raises(ConfigurationError, match="only admin"):
        users.delete_user(rt, "ada")
    vic = users.create_user(rt, "vic", PASSWORD, "viewer")
    assert vic.may("viewer") and not vic.may("operator") and not vic.may(users.DEV_REPORTING)
    assert users.update_user(rt, "vic", dev_reporting=True).may(users.DEV_REPORTING)
    assert ada.may("operator") and ada.may(users.DEV_REPORTING)
    assert [u.username for u in users.list_users(rt)] == ["ada", "vic"]


def test_api_tokens_are_stored_as_digests_and_can_be_revoked(rt):
    users.create_user(rt, "ada", PASSWORD, "admin")
    token = users.make_token(rt, "ada", "CI")
    assert token.startswith("rt_") and users.user_of_token(rt, token).username == "ada"
    listed = users.list_tokens(rt)
    assert [(t["username"], t["label"]) for t in listed] == [("ada", "CI")] and listed[0]["last_used_at"] is not None
    assert token not in json.dumps(listed, default=str)
    assert users.user_of_token(rt, token + "x") is None and users.user_of_token(rt, "anything") is None
    users.revoke_token(rt, listed[0]["id"])
    assert users.user_of_token(rt, token) is None


def test_the_first_admin_comes_from_the_environment(rt, monkeypatch):
    monkeypatch.setattr(rt.settings, "admin_username", "boss")
    monkeypatch.setattr(rt.settings, "admin_password", None)
    with pytest.raises(ConfigurationError, match="set both"):
        users.ensure_env_admin(rt)
    monkeypatch.setattr(rt.settings, "admin_password", PASSWORD)
    assert users.ensure_env_admin(rt).role == "admin" and users.has_admin(rt)
    users.update_user(rt, "boss", password="a new password")
    assert users.ensure_env_admin(rt) is None  # an existing user keeps the password changed in the console
    assert users.authenticate(rt, "boss", "a new password").username == "boss"


def _probe_paths(routes, prefix: str = "") -> list[tuple[str, str]]:
    """(method, concrete path) for every route, mounted apps included; path parameters become ``x``."""
    probes = []
    for route in routes:
        if hasattr(route, "original_router"):  # FastAPI's include_router: the routes keep their full paths
            probes += _probe_paths(route.original_router.routes, prefix + route.include_context.prefix)
        elif isinstance(route, Mount):
            inner = getattr(route.app, "routes", None)
            path = prefix + route.path
            probes += _probe_paths(inner, path) if inner else [("GET", path + "/x")]
        elif isinstance(route, (Route, WebSocketRoute)):
            path = re.sub(r"\{[^}]+\}", "x", prefix + route.path) or "/"
            methods = sorted(getattr(route, "methods", None) or {"GET"}) if isinstance(route, Route) else ["WEBSOCKET"]
            probes += [(m, path) for m in methods if m != "HEAD"]
    return probes


def test_every_route_refuses_an_anonymous_caller(secured):
    server, url = secured
    probes = _probe_paths(server.api.routes)
    assert len(probes) > 40 and ("POST", "/gradio_api/queue/join") in probes and ("GET", "/files/x") in probes
    with httpx.Client(base_url=url, timeout=30) as client:
        for method, path in probes:
            if path in web.PUBLIC_PATHS:
                continue
            if method != "WEBSOCKET" and web.is_public_pattern(path):  # a demo page: it checks its link's token itself
                response = client.request(method, path)
                assert response.status_code == 404 and "This demo link does not exist" in response.text, (method, path)
                continue
            if method == "WEBSOCKET":
                response = client.get(path, headers={"connection": "upgrade", "upgrade": "websocket"})
            else:
                response = client.request(method, path, headers={"authorization": "Bearer rt_forged"})
            assert response.status_code == 401, (method, path, response.status_code)
        # A browser is sent to the login page, and comes back where it was going.
        page = client.get("/?view=api", headers={"accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"] == "/login?next=%2F%3Fview%3Dapi"
        assert "Log in" in client.get("/login").text


def test_login_sessions_logout_and_failed_login_limit(secured, rt):
    _, url = secured
    with httpx.Client(base_url=url, timeout=30) as anon:
        wrong = anon.post("/login", data={"username": "ada", "password": "nope", "next": "/"})
        assert wrong.status_code == 401 and "Wrong username or password." in wrong.text
        evil = anon.post("/login", data={"username": "otto", "password": PASSWORD, "next": "//evil.example/"})
        assert evil.headers["location"] == "/"  # never sent off-site after login
    client = login(url, "otto")
    cookie = client.cookies[sessions.SESSION_COOKIE]
    assert sessions.session_user(rt, cookie) == "otto"
    assert client.get("/config").status_code == 200
    client.post("/logout", headers={"origin": url.rstrip("/")})
    assert sessions.session_user(rt, cookie) is None
    client.cookies.set(sessions.SESSION_COOKIE, cookie)
    assert client.get("/config").status_code == 401  # the old cookie is worth nothing now
    with httpx.Client(base_url=url, timeout=30) as anon:
        for n in range(web.MAX_FAILED_LOGINS):  # spellings of one name count as one account
            anon.post("/login", data={"username": [" vic", "\tvic", "VIC", "vic "][n % 4], "password": "guess", "next": "/"})
        blocked = anon.post("/login", data={"username": "vic", "password": PASSWORD, "next": "/"})
        assert blocked.status_code == 429 and "Too many failed logins" in blocked.text


def test_every_event_refuses_a_caller_below_its_role(secured, rt):
    server, _ = secured
    needs = server.blocks.ragtopics_needs
    assert {needs[i] for i in needs} >= {"viewer", "operator", "admin"}
    viewer = gr.Request(headers={}, cookies={sessions.SESSION_COOKIE: sessions.start_session(rt, "vic")})
    refused = 0
    for fn_id, block_fn in server.blocks.fns.items():
        if block_fn.fn is None:  # a browser-side (js) event: nothing runs on the server
            continue
        need = needs[fn_id]  # every event of the console is on its page's role list (one that is not needs admin)
        assert block_fn.fn._ragtopics_need == need
        if need == "viewer":
            continue
        args = [None] * len(block_fn.inputs)
        with pytest.raises(
            gr.Error,
            match=r"Not allowed: vic \(viewer\) may not do this: it needs (the (operator|admin) role|the DEV_REPORTING permission)",
        ):
            result = block_fn.fn(viewer, *args)
            if hasattr(result, "__next__"):
                next(result)
        refused += 1
    assert refused > 30
    anonymous = gr.Request(headers={}, cookies={})
    chat_event = next(f for i, f in server.blocks.fns.items() if f.fn is not None and needs[i] == "viewer")
    with pytest.raises(gr.Error, match="Not allowed: log in first"):
        _fire(chat_event, anonymous)


def _fire(block_fn, request: gr.Request):
    """Call an event function as Gradio would, with empty inputs (a generator is run to its first step)."""
    result = block_fn.fn(request, *[None] * len(block_fn.inputs))
    return next(result) if hasattr(result, "__next__") else result


def test_programs_use_api_tokens_with_their_users_role(secured, rt):
    _, url = secured
    viewer = Client(url, verbose=False, headers={"Authorization": f"Bearer {users.make_token(rt, 'vic')}"})
    assert json.loads(viewer.predict(api_name="/list_topics")) == []
    with pytest.raises(Exception, match="Not allowed: vic \\(viewer\\)"):
        viewer.predict("Viewer Topic", "rag", "", "{}", api_name="/create_topic")
    assert list_topics(rt) == []
    operator = Client(url, verbose=False, headers={"Authorization": f"Bearer {users.make_token(rt, 'otto')}"})
    status = operator.predict("Operator Topic", "rag", "", "{}", api_name="/create_topic")
    assert "Created Topic **Operator Topic**" in status and [t.name for t in list_topics(rt)] == ["Operator Topic"]
    with pytest.raises(Exception):
        Client(url, verbose=False)  # no token, no config


def test_mcp_clients_need_a_token(secured, rt):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    _, url = secured
    create_topic(rt, "Manuals")

    async def topics(headers: dict) -> list[dict]:
        async with streamablehttp_client(url + "gradio_api/mcp/", headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tool = next(t.name for t in (await session.list_tools()).tools if t.name.endswith("list_topics"))
                return json.loads((await session.call_tool(tool, {})).content[0].text)

    token = users.make_token(rt, "vic", "agent")
    assert [t["name"] for t in asyncio.run(topics({"Authorization": f"Bearer {token}"}))] == ["Manuals"]
    with httpx.Client(timeout=30) as client:
        refused = client.post(
            url + "gradio_api/mcp/",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )
    assert refused.status_code == 401


def test_a_source_link_opens_only_for_its_user(secured, rt):
    _, url = secured
    stored = rt.blobs.put("topic", "doc", "notes.txt", b"kettle notes")[0]
    for_vic = rt.signer.sign(stored, user="vic")
    unbound = rt.signer.sign(stored)
    vic, otto, ada = login(url, "vic"), login(url, "otto"), login(url, "ada")
    assert vic.get(for_vic).content == b"kettle notes"
    assert otto.get(for_vic).status_code == 403 and "made for someone else" in otto.get(for_vic).text
    assert vic.get(unbound).status_code == 403 and ada.get(unbound).status_code == 200


def test_open_mode_serves_loopback_only_and_refuses_a_share_link(rt):
    port = free_port()
    server, url, share_url = launch_console(rt, host="0.0.0.0", port=port, share=True)
    try:
        assert url == f"http://127.0.0.1:{port}/" and server.server.config.host == "127.0.0.1" and share_url is None
        assert any("Serving on 127.0.0.1, not 0.0.0.0" in n for n in server.notices)
        assert any("No share link: a share link needs login" in n for n in server.notices)
        assert httpx.get(url + "config", timeout=30).status_code == 200  # no login without an admin
        assert "No admin exists yet" in httpx.get(url + "login", timeout=30).text
    finally:
        server.close()


def test_a_share_link_that_cannot_be_made_is_said_once_and_the_console_serves(people, monkeypatch):
    from gradio import networking

    monkeypatch.setattr(networking, "GRADIO_SHARE_SERVER_ADDRESS", f"127.0.0.1:{free_port()}")  # a share server that is down
    server, url, share_url = launch_console(people, host="127.0.0.1", port=free_port(), share=True)
    try:
        assert (
            share_url is None and len(server.notices) == 1 and server.notices[0].startswith("No share link: it could not be made")
        )
        assert httpx.get(url + "config", timeout=30).status_code == 401 and login(url, "vic").get("/config").status_code == 200
    finally:
        server.close()


def test_the_cli_manages_users_without_login(rt, monkeypatch, capsys):
    import io

    from ragtopics.ui.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["user", "add", "ada", "--role", "admin"]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["user", "add", "vic", "--role", "viewer"]) == 2 and "Password: at least 8" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["user", "add", "vic", "--role", "viewer", "--dev-reporting"]) == 0
    assert main(["user", "set", "vic", "--role", "operator", "--no-dev-reporting"]) == 0
    capsys.readouterr()
    assert main(["user", "list"]) == 0 and capsys.readouterr().out.splitlines() == ["ada\tadmin\tDEV_REPORTING", "vic\toperator"]
    assert main(["user", "token", "vic", "--label", "agent"]) == 0
    assert users.user_of_token(rt, capsys.readouterr().out.strip()).username == "vic"
    assert main(["user", "delete", "vic"]) == 2 and users.get_user(rt, "vic") is not None
    assert main(["user", "delete", "vic", "--yes"]) == 0 and users.get_user(rt, "vic") is None and users.list_tokens(rt) == []


def test_an_event_input_cannot_name_a_file_on_the_server(secured, rt):
    _, url = secured
    token = users.make_token(rt, "vic")
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
        started = client.post(
            "/gradio_api/call/ask",
            json={"data": ["", "hi", [], None, {"path": "/etc/hostname", "meta": {"_type": "gradio.FileData"}}]},
        )
        assert started.status_code == 200
        stream = client.get(f"/gradio_api/call/ask/{started.json()['event_id']}").text
    assert "event: error" in stream and "/gradio_api/file=" not in stream


def test_cross_site_requests_and_rebound_host_names_are_refused(secured, rt):
    _, url = secured
    viewer = login(url, "vic")
    forged = viewer.post("/gradio_api/queue/join", json={}, headers={"origin": "http://evil.example"})
    assert forged.status_code == 403 and "cross-site request refused" in forged.text
    assert viewer.post("/logout", headers={"sec-fetch-site": "cross-site"}).status_code == 403
    assert viewer.get("/config").status_code == 200  # the session survived both


def test_open_mode_refuses_a_foreign_host_name(rt):
    server, url, _ = launch_console(rt, host="127.0.0.1", port=free_port())
    try:
        assert httpx.get(url + "config", timeout=30).status_code == 200
        rebound = httpx.get(url + "config", headers={"host": "evil.example"}, timeout=30)
        assert rebound.status_code == 403 and "serves only 127.0.0.1" in rebound.text
    finally:
        server.close()


def test_a_password_change_or_delete_ends_the_users_sessions(secured, rt):
    _, url = secured
    otto = login(url, "otto")
    assert otto.get("/config").status_code == 200
    users.update_user(rt, "otto", password="another password")
    assert otto.get("/config").status_code == 401
    vic = login(url, "vic")
    users.delete_user(rt, "vic")
    users.create_user(rt, "vic", PASSWORD, "admin")  # the name again, as someone else
    assert vic.get("/config").status_code == 401


def test_once_an_admin_existed_the_console_never_opens_again(secured, rt):
    _, url = secured
    with rt.metadata.session() as s:  # every user gone at once (a broken database, a careless script)
        for row in s.exec(select(ApiTokenRow)):
            s.delete(row)
        for row in s.exec(select(UserRow)):
            s.delete(row)
    assert httpx.get(url + "config", timeout=30).status_code == 401


def test_a_chat_is_its_users_alone(people, run_jobs, scripted_llm):
    from ragtopics.access.context import acting_username
    from ragtopics.answer.history import list_sessions
    from ragtopics.answer.turn import ask
    from ragtopics.errors import NotFoundError
    from ragtopics.ui.chat_tab import load_session
    from tests.ingest.test_ingest import upload

    rt = people
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees.")
    run_jobs()
    scripted_llm.replies["answer"] = "At 100 degrees [S1]."

    def as_user(name, fn):
        token = acting_username.set(name)
        try:
            return fn()
        finally:
            acting_username.reset(token)

    *_, vics = as_user("vic", lambda: list(ask(rt, topic, "When does K-2 switch off?")))
    *_, ottos = as_user("otto", lambda: list(ask(rt, topic, "Does K-2 switch off?")))
    assert [s.id for s in as_user("vic", lambda: list_sessions(rt, topic))] == [vics.session_id]
    assert [s.id for s in as_user("otto", lambda: list_sessions(rt, topic))] == [ottos.session_id]
    with pytest.raises(NotFoundError, match="no chat session"):
        as_user("vic", lambda: list(ask(rt, topic, "And K-3?", session_id=ottos.session_id)))
    messages, _ = as_user("vic", lambda: load_session(rt, ottos.session_id))
    assert messages == [{"role": "assistant", "content": "This chat does not exist, or it is someone else's."}]
    assert len(list_sessions(rt, topic)) == 2  # the CLI (no login) sees every chat


def test_names_are_one_account_in_any_case_and_an_account_can_be_unlocked(secured, rt, capsys):
    from ragtopics.ui.cli import main

    _, url = secured
    with pytest.raises(ConfigurationError, match="Username: 'VIC' is taken"):
        users.create_user(rt, "VIC", PASSWORD, "viewer")
    assert login(url, "Vic").get("/config").status_code == 200
    with httpx.Client(base_url=url, timeout=30) as anon:
        for _ in range(web.MAX_FAILED_LOGINS + 1):
            anon.post("/login", data={"username": "otto", "password": "guess", "next": "/"})
        assert anon.post("/login", data={"username": "otto", "password": PASSWORD, "next": "/"}).status_code == 429
        assert main(["user", "unlock", "Otto"]) == 0 and "2 counter(s)" in capsys.readouterr().err
        assert anon.post("/login", data={"username": "otto", "password": PASSWORD, "next": "/"}).status_code == 303


def test_a_stored_file_cannot_run_anything_in_the_consoles_origin(secured, rt):
    _, url = secured
    vic = login(url, "vic")
    files = {
        "page.html": b"<script>fetch('/logout', {method: 'POST'})</script>",
        "shape.svg": b"<svg><script>alert(1)</script></svg>",
        "data.xml": b"<x/>",
        "app.js": b"alert(1)",
        "deck.pptx": b"PK",
        "notes.txt": b"<script>alert(1)</script>",
        "Makefile": b"all:",
        "plant.pdf": b"%PDF-1.4",
        "pump.png": b"\x89PNG\r\n",
        "photo.JPG": b"\xff\xd8\xff",
    }
    served = {}
    for name, data in files.items():
        response = vic.get(rt.signer.sign(rt.blobs.put("topic", "doc", name, data)[0], user="vic"))
        assert response.status_code == 200 and response.content == data, name
        assert response.headers["x-content-type-options"] == "nosniff", name
        served[name] = (
            response.headers["content-type"],
            response.headers["content-disposition"].split(";")[0],
            response.headers.get("content-security-policy"),
        )
    for active in ("page.html", "shape.svg", "data.xml", "app.js", "deck.pptx"):  # downloaded, never shown
        assert served[active] == ("application/octet-stream", "attachment", "sandbox"), active
    for text in ("notes.txt", "Makefile"):  # shown as text: markup in it is not parsed
        assert served[text] == ("text/plain; charset=utf-8", "inline", "sandbox"), text
    assert served["pump.png"] == ("image/png", "inline", "sandbox") and served["photo.JPG"] == ("image/jpeg", "inline", "sandbox")
    # A PDF opens in the browser's PDF viewer, which runs outside the page's origin and shows nothing in a sandbox.
    assert served["plant.pdf"] == ("application/pdf", "inline", None)


def _elapse(rt, seconds: float) -> None:
    """Let ``seconds`` pass for the session keys: every TTL shrinks by that much, and a key whose TTL runs out is gone."""
    for pattern in ("rt:session:*", "rt:user-sessions:*"):
        for key in rt.redis.scan_iter(match=pattern):
            left_ms = rt.redis.pttl(key)
            if left_ms < 0:  # no expiry
                continue
            if left_ms <= seconds * 1000:
                rt.redis.delete(key)
            else:
                rt.redis.pexpire(key, int(left_ms - seconds * 1000))


def test_a_session_active_for_many_lifetimes_still_ends_with_a_password_change(secured, rt):
    _, url = secured
    otto = login(url, "otto")
    ttl_s = rt.settings.session_ttl_s
    for _ in range(6):  # a click every half lifetime, for three lifetimes
        _elapse(rt, ttl_s / 2)
        assert otto.get("/config").status_code == 200
    users.update_user(rt, "otto", password="another password")
    assert otto.get("/config").status_code == 401
    vic = login(url, "vic")
    for _ in range(6):
        _elapse(rt, ttl_s / 2)
        assert vic.get("/config").status_code == 200
    users.delete_user(rt, "vic")
    users.create_user(rt, "vic", PASSWORD, "admin")
    assert vic.get("/config").status_code == 401


def test_an_event_on_no_pages_role_list_needs_an_admin(people):
    from ragtopics.ui.app import build_app

    app = build_app(people)
    with app:
        extra = gr.Button("unlisted")
        box = gr.Textbox()
        extra.click(lambda: "ran", None, box)
    unlisted = max(app.fns)
    assert unlisted not in app.ragtopics_needs
    assert web.guard_events(people, app, app.ragtopics_needs) == 1
    event = app.fns[unlisted]
    assert event.fn._ragtopics_need == "admin"
    for name in ("vic", "otto"):
        caller = gr.Request(headers={}, cookies={sessions.SESSION_COOKIE: sessions.start_session(people, name)})
        with pytest.raises(gr.Error, match="it needs the admin role"):
            _fire(event, caller)
    admin = gr.Request(headers={}, cookies={sessions.SESSION_COOKIE: sessions.start_session(people, "ada")})
    assert _fire(event, admin) == "ran"


def _chat(rt, topic, session_id: str, owner: str = "") -> None:
    from ragtopics.storage.chats import add_turn

    add_turn(
        rt.metadata,
        session_id=session_id,
        topic_id=topic.id,
        title="Q",
        question="Q",
        answer="A",
        sources=[],
        route="SEARCH",
        route_confidence=None,
        timings_ms={},
        owner=owner,
    )


def _owners(rt) -> dict[str, str]:
    from ragtopics.storage.metadata import ChatSessionRow

    with rt.metadata.session() as s:
        return {row.id: row.owner for row in s.exec(select(ChatSessionRow))}


def test_chats_saved_without_login_belong_to_the_first_admin(rt, monkeypatch, caplog):
    from ragtopics.ui.cli import main

    topic = create_topic(rt, "Kettles")
    _chat(rt, topic, "chat-open-1")
    _chat(rt, topic, "chat-open-2")
    _chat(rt, topic, "chat-cli", owner="someone")
    users.create_user(rt, "vic", PASSWORD, "viewer")  # a viewer does not switch login on
    assert _owners(rt) == {"chat-open-1": "", "chat-open-2": "", "chat-cli": "someone"}
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(PASSWORD + "\n"))
    with caplog.at_level("INFO", logger="ragtopics.access.users"):
        assert main(["user", "add", "ada", "--role", "admin"]) == 0
    assert _owners(rt) == {"chat-open-1": "ada", "chat-open-2": "ada", "chat-cli": "someone"}
    assert "2 chat(s) saved without login now belong to the first admin ada" in caplog.text
    _chat(rt, topic, "chat-later")  # a second admin is no switch: nothing changes owner again
    users.create_user(rt, "bea", PASSWORD, "admin")
    users.update_user(rt, "vic", role="admin")
    assert _owners(rt)["chat-later"] == ""


def test_a_user_made_the_first_admin_is_given_the_chats_saved_without_login(rt, monkeypatch):
    from ragtopics.access.context import acting_username
    from ragtopics.answer.history import list_sessions

    topic = create_topic(rt, "Kettles")
    _chat(rt, topic, "chat-open")
    users.create_user(rt, "vic", PASSWORD, "viewer")
    users.update_user(rt, "vic", role="admin")
    assert _owners(rt) == {"chat-open": "vic"}
    token = acting_username.set("vic")
    try:
        assert [s.id for s in list_sessions(rt, topic)] == ["chat-open"]  # seen by its owner once login is on
    finally:
        acting_username.reset(token)
    monkeypatch.setattr(rt.settings, "admin_username", "boss")
    monkeypatch.setattr(rt.settings, "admin_password", PASSWORD)
    _chat(rt, topic, "chat-after")
    assert users.ensure_env_admin(rt).role == "admin" and _owners(rt)["chat-after"] == ""


def test_a_gradio_session_hash_and_event_id_serve_only_the_user_who_first_used_them(secured, rt):
    server, url = secured
    create_topic(rt, "Vic's secret Topic")
    list_topics_fn = next(i for i, f in server.blocks.fns.items() if f.api_name == "list_topics")
    vic, otto = login(url, "vic"), login(url, "otto")
    mine = "vichash12345"
    joined = vic.post("/gradio_api/queue/join", json={"fn_index": list_topics_fn, "data": [], "session_hash": mine})
    assert joined.status_code == 200, joined.text
    event_id = joined.json()["event_id"]
    # Another user who learned the hash or the event id gets nothing of it, and cannot act in that session.
    stolen = otto.get("/gradio_api/queue/data", params={"session_hash": mine})
    assert stolen.status_code == 403 and "belongs to another user" in stolen.text and "secret" not in stolen.text
    assert otto.get(f"/gradio_api/call/list_topics/{event_id}").status_code == 403
    assert otto.get(f"/gradio_api/heartbeat/{mine}").status_code == 403
    assert (
        otto.post("/gradio_api/queue/join", json={"fn_index": list_topics_fn, "data": [], "session_hash": mine}).status_code
        == 403
    )
    assert (
        otto.post(
            "/gradio_api/cancel", json={"session_hash": "ottohash123", "fn_index": list_topics_fn, "event_id": event_id}
        ).status_code
        == 403
    )
    # Its owner reads the result; the other user's own session and calls work as before.
    result = vic.get("/gradio_api/queue/data", params={"session_hash": mine})
    assert result.status_code == 200 and "process_completed" in result.text and "secret Topic" in result.text
    started = otto.post("/gradio_api/call/list_topics", json={"data": []})
    assert started.status_code == 200
    own = otto.get(f"/gradio_api/call/list_topics/{started.json()['event_id']}")
    assert own.status_code == 200 and "event: complete" in own.text
    assert vic.get(f"/gradio_api/call/list_topics/{started.json()['event_id']}").status_code == 403
    assert vic.get("/gradio_api/call/list_topics/an-event-id-never-handed-out").status_code == 403


def test_a_session_hash_is_checked_whatever_content_type_its_body_is_sent_with(secured, rt):
    server, url = secured
    create_topic(rt, "Vic's secret Topic")
    list_topics_fn = next(i for i, f in server.blocks.fns.items() if f.api_name == "list_topics")
    vic, otto = login(url, "vic"), login(url, "otto")
    mine = "vichash67890"
    joined = vic.post("/gradio_api/queue/join", json={"fn_index": list_topics_fn, "data": [], "session_hash": mine})
    assert joined.status_code == 200, joined.text
    event_id = joined.json()["event_id"]
    # Another user cannot slip the hash or the event id past the check by leaving the header out or naming another
    # type: component_server reads any body but a multipart one as JSON.
    for headers in ({}, {"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}):
        body = json.dumps({"fn_index": list_topics_fn, "data": [], "session_hash": mine, "event_id": event_id})
        for route in ("/gradio_api/queue/join", "/gradio_api/cancel", "/gradio_api/component_server"):
            refused = otto.post(route, content=body, headers=headers)
            assert refused.status_code == 403 and "belongs to another user" in refused.text, (route, headers)
    # A POST to stream/<event id> names an event, which must be the caller's.
    assert otto.post(f"/gradio_api/stream/{event_id}", json={"data": [], "fn_index": list_topics_fn}).status_code == 403
    # component_server would read the hash from a multipart form's field: that form is refused to everyone.
    form = {"session_hash": mine, "component_id": "1", "fn_name": "x", "data": "null"}
    for client in (vic, otto):
        multipart = client.post("/gradio_api/component_server", data=form, files={"f": ("a.txt", b"a")})
        assert multipart.status_code == 403 and "send this request as JSON" in multipart.text


def test_a_session_whose_set_expired_under_an_older_version_still_ends_with_a_password_change(secured, rt):
    _, url = secured
    otto = login(url, "otto")
    rt.redis.delete("rt:user-sessions:otto")  # an older version gave the set an expiry, which ran out while otto clicked on
    assert otto.get("/config").status_code == 200
    users.update_user(rt, "otto", password="another password")
    assert otto.get("/config").status_code == 401


def test_files_gradio_serves_from_its_upload_folder_cannot_run_anything_in_the_consoles_origin(secured):
    _, url = secured
    vic = login(url, "vic")
    uploaded = vic.post(
        "/gradio_api/upload",
        files=[
            ("files", ("page.html", b"<script>alert(1)</script>", "text/html")),
            ("files", ("pump.png", b"\x89PNG\r\n", "image/png")),
        ],
    )
    assert uploaded.status_code == 200, uploaded.text
    page, picture = uploaded.json()
    served = {}
    for path in (page, picture):
        response = vic.get(f"/gradio_api/file={path}")
        assert response.status_code == 200, response.text
        headers = response.headers
        served[path.rsplit(".", 1)[-1]] = (
            headers["content-type"],
            headers["content-disposition"].split(";")[0],
            headers["x-content-type-options"],
            headers["content-security-policy"],
        )
    assert served == {
        "html": ("application/octet-stream", "attachment", "nosniff", "sandbox"),
        "png": ("image/png", "inline", "nosniff", "sandbox"),
    }


def test_an_event_added_after_the_console_is_built_needs_an_admin(people, monkeypatch):
    from ragtopics.ui import app as console

    build = console.build_app

    def build_then_add(rt):
        app = build(rt)
        with app:  # after build_app guarded its events, outside every page
            gr.Button("late").click(lambda: "ran", None, gr.Textbox(), api_name="late_event")
        return app

    monkeypatch.setattr(console, "build_app", build_then_add)
    server, _, _ = launch_console(people, host="127.0.0.1", port=free_port())
    try:
        event = next(f for f in server.blocks.fns.values() if f.api_name == "late_event")
        assert getattr(event.fn, "_ragtopics_need", None) == "admin"
        for name in ("vic", "otto"):
            caller = gr.Request(headers={}, cookies={sessions.SESSION_COOKIE: sessions.start_session(people, name)})
            with pytest.raises(gr.Error, match="it needs the admin role"):
                _fire(event, caller)
        admin = gr.Request(headers={}, cookies={sessions.SESSION_COOKIE: sessions.start_session(people, "ada")})
        assert _fire(event, admin) == "ran"
    finally:
        server.close()
