"""Demo links: one Topic's chat without login, nothing else reachable, expiry, revocation, rate limits, CLI and console."""

from __future__ import annotations

import threading
from datetime import timedelta

import gradio as gr
import httpx
import pytest
from sqlmodel import func, select

from ragtopics.access import sessions
from ragtopics.demo import links
from ragtopics.errors import ConfigurationError
from ragtopics.storage.metadata import ChatSessionRow, ChatTurnRow, DemoLinkRow, utcnow
from ragtopics.topics.delete import delete_topic
from ragtopics.ui import web
from ragtopics.ui.cli import main
from ragtopics.ui.demo_page import VISITOR_COOKIE
from tests.api.test_rest import api_client
from tests.ui.test_access import _probe_paths

QUESTION = "When does K-2 switch off?"
ANSWER = "It switches off at 100 degrees [S1]."


def visitor(url: str, cookie: str | None = None) -> httpx.Client:
    """A browser with no login: no session, no token; ``cookie`` its demo visitor id."""
    client = httpx.Client(base_url=url, timeout=60, follow_redirects=False)
    if cookie:
        client.cookies.set(VISITOR_COOKIE, cookie)
    return client


def make_link(url: str, rt, **body) -> dict:
    with api_client(url, rt, "otto") as operator:
        response = operator.post("/topics/Kettles/demo-links", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def test_a_link_lasts_24_hours_by_default_at_most_30_days_and_only_its_digest_is_stored(rt, kettles):
    new = links.create_link(rt, "Kettles")
    assert new.link.expires_at - new.link.created_at == timedelta(hours=24) and len(new.token) >= 43
    with rt.metadata.session() as s:
        row = s.get(DemoLinkRow, new.link.id)
    assert row.digest == links.digest(new.token) and new.token not in row.model_dump_json()
    assert links.create_link(rt, "Kettles", hours=720).link.state() == "active"
    with pytest.raises(ConfigurationError, match=r"^hours: a demo link lasts at most 30 days \(720 hours\), got 721"):
        links.create_link(rt, "Kettles", hours=721)
    with pytest.raises(ConfigurationError, match="more than 0 hours"):
        links.create_link(rt, "Kettles", hours=0)
    with pytest.raises(ConfigurationError, match="rate: questions per minute from 1 to 600, got 0"):
        links.create_link(rt, "Kettles", visitor_rate=0)
    assert [k.id for k in links.list_links(rt, "Kettles")][-1] == new.link.id


def test_a_visitor_without_login_asks_the_topic_and_the_turn_is_kept_with_the_link(secured, rt, kettles, scripted_llm):
    _, url = secured
    scripted_llm.replies["answer"] = ANSWER
    made = make_link(url, rt)
    assert made["urls"] == [url.rstrip("/") + made["path"]] and made["path"] == f"/demo/{made['token']}"
    assert any("Only this machine can open this link" in note for note in made["notes"])
    with visitor(url) as browser:
        page = browser.get(made["path"])
        assert page.status_code == 200 and '<h1 id="topic"' in page.text and ">Kettles</h1>" in page.text
        assert "This is a demo" in page.text and VISITOR_COOKIE in page.headers["set-cookie"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        response = browser.post(made["path"] + "/ask", json={"question": QUESTION})
        assert response.status_code == 200, response.text
        assert response.json() == {
            "answer": "It switches off at 100 degrees [kettles.txt].",
            "sources": [{"file": "kettles.txt"}],
            "no_answer": False,
        }
        assert browser.post(made["path"] + "/ask", json={"question": " "}).status_code == 400
    with api_client(url, rt, "otto") as operator:
        [turn] = operator.get(f"/demo-links/{made['id']}/chats").json()
        [listed] = operator.get("/demo-links").json()
    assert (turn["question"], turn["answer"], turn["sources"]) == (
        QUESTION,
        "It switches off at 100 degrees [kettles.txt].",
        ["kettles.txt"],
    )
    assert listed["turns"] == 1 and listed["created_by"] == "otto" and "token" not in listed
    with rt.metadata.session() as s:  # users' chats are untouched
        assert s.exec(select(func.count()).select_from(ChatSessionRow)).one() == 0
        assert s.exec(select(func.count()).select_from(ChatTurnRow)).one() == 0


def test_source_files_open_only_through_a_link_that_allows_them(secured, rt, kettles, scripted_llm):
    _, url = secured
    scripted_llm.replies["answer"] = ANSWER
    sharing, closed = make_link(url, rt, allow_sources=True), make_link(url, rt)
    with visitor(url) as browser:
        [source] = browser.post(sharing["path"] + "/ask", json={"question": QUESTION}).json()["sources"]
        assert source["file"] == "kettles.txt" and source["link"].startswith(sharing["path"] + "/files/")
        opened = browser.get(source["link"])
        assert opened.status_code == 200 and opened.text.startswith("Kettle K-2 switches itself off")
        assert opened.headers["content-security-policy"] == "sandbox"
        file_token = source["link"].rsplit("/", 1)[1]
        assert browser.get(f"/files/{file_token}").status_code == 401  # the console's own file route wants a login
        refused = browser.get(f"{closed['path']}/files/{file_token}")
        assert refused.status_code == 403 and "did not allow downloads" in refused.text
    with api_client(url, rt, "otto") as operator:  # a user's own link to the file is no demo's
        own = operator.post("/topics/Kettles/ask", json={"question": QUESTION, "save": False}).json()["sources"][0]["link"]
    with visitor(url) as browser:
        foreign = browser.get(f"{sharing['path']}/files/{own.split('/files/')[1].split('#')[0]}")
        assert foreign.status_code == 403 and "not part of this demo" in foreign.text


def test_every_route_and_console_event_refuses_a_demo_token(secured, rt, kettles):
    server, url = secured
    token = make_link(url, rt)["token"]
    probes = _probe_paths(server.api.routes)
    assert ("GET", "/demo/x") in probes and ("POST", "/demo/x/ask") in probes and ("POST", "/gradio_api/queue/join") in probes
    held = {"authorization": f"Bearer {token}", "cookie": f"{sessions.SESSION_COOKIE}={token}; {VISITOR_COOKIE}={token}"}
    with httpx.Client(base_url=url, timeout=30) as client:
        for method, path in probes:
            if path in web.PUBLIC_PATHS:
                continue
            if method != "WEBSOCKET" and web.is_public_pattern(path):  # the demo routes themselves, with another token
                assert client.request(method, path, headers=held, params={"token": token}).status_code == 404, path
                continue
            headers = {**held, **({"connection": "upgrade", "upgrade": "websocket"} if method == "WEBSOCKET" else {})}
            response = client.request("GET" if method == "WEBSOCKET" else method, path, headers=headers, params={"token": token})
            assert response.status_code == 401, (method, path, response.status_code)
        # Nothing else hangs below the demo link's own path.
        for extra in ("/config", "/gradio_api/info", "/../config", "/ask/x", "/files"):
            assert client.get(f"/demo/{token}{extra}", headers=held).status_code in (401, 404), extra
        assert client.get(f"/demo/{token}/config", headers=held).status_code == 401
    request = gr.Request(
        headers={"authorization": f"Bearer {token}"}, cookies={sessions.SESSION_COOKIE: token, VISITOR_COOKIE: token}
    )
    refused = 0
    for block_fn in server.blocks.fns.values():
        if block_fn.fn is None:
            continue
        with pytest.raises(gr.Error, match="Not allowed: log in first"):
            result = block_fn.fn(request, *[None] * len(block_fn.inputs))
            if hasattr(result, "__next__"):
                next(result)
        refused += 1
    assert refused > 50


def test_revoked_expired_and_unknown_links_answer_with_a_page_that_says_so(secured, rt, kettles, capsys):
    _, url = secured
    revoked, expired, orphan = make_link(url, rt), make_link(url, rt), make_link(url, rt)
    with visitor(url) as browser:
        assert browser.get(revoked["path"]).status_code == 200
        assert main(["demo", "revoke", revoked["id"]]) == 0
        page = browser.get(revoked["path"])
        assert page.status_code == 410 and "This demo link was revoked" in page.text
        asked = browser.post(revoked["path"] + "/ask", json={"question": QUESTION})
        assert asked.status_code == 410 and asked.json()["error"].startswith("This demo link was revoked.")
        with rt.metadata.session() as s:
            row = s.get(DemoLinkRow, expired["id"])
            row.expires_at = utcnow() - timedelta(minutes=1)
            s.add(row)
        page = browser.get(expired["path"])
        assert page.status_code == 410 and "This demo link has expired" in page.text
        page = browser.get("/demo/" + "A" * 43)
        assert page.status_code == 404 and "This demo link does not exist" in page.text
        with api_client(url, rt, "otto") as operator:
            states = {k["id"]: k["state"] for k in operator.get("/demo-links").json()}
        assert (states[revoked["id"]], states[expired["id"]], states[orphan["id"]]) == ("revoked", "expired", "active")
        links.record_turn(rt, links.get_link(rt, orphan["id"]), "cookie:someone", "Why?", "Because.", [])
        deletion = delete_topic(rt, "Kettles")
        assert deletion.removed["demo_links_revoked"] == 3 and deletion.removed["demo_turns"] == 1
        assert links.get_link(rt, orphan["id"]).state() == "revoked"
        page = browser.get(orphan["path"])
        assert page.status_code == 404 and "The Topic Kettles that it showed has been deleted" in page.text


def _fire(url: str, path: str, cookies: list[str | None]) -> list[int]:
    """POST the question once per cookie (None: no cookie), all threads released at once; the status codes."""
    barrier, codes = threading.Barrier(len(cookies)), [0] * len(cookies)

    def one(i: int) -> None:
        with visitor(url, cookies[i]) as client:
            barrier.wait()
            codes[i] = client.post(path + "/ask", json={"question": QUESTION}).status_code

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cookies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def test_rate_limits_hold_under_concurrent_visitors(secured, rt, kettles, scripted_llm):
    _, url = secured
    scripted_llm.replies["answer"] = ANSWER
    busy = make_link(url, rt, rate=600, link_rate=3)
    codes = _fire(url, busy["path"], [f"visitor-number-{i:04d}" for i in range(10)])
    assert sorted(codes) == [200] * 3 + [429] * 7
    one_visitor = make_link(url, rt, rate=2, link_rate=600)
    codes = _fire(url, one_visitor["path"], ["the-same-visitor-id"] * 6 + ["another-visitor-id0"])
    assert sorted(codes[:6]) == [200] * 2 + [429] * 4 and codes[6] == 200
    with visitor(url, "the-same-visitor-id") as again:
        refused = again.post(one_visitor["path"] + "/ask", json={"question": QUESTION})
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.json()["error"].startswith("You asked 2 questions this minute")
    # Without a cookie, a visitor is its address: every cookie-less request from here counts as one visitor.
    no_cookie = make_link(url, rt, rate=1, link_rate=600)
    assert sorted(_fire(url, no_cookie["path"], [None, None, None])) == [200, 429, 429]


def test_cli_makes_lists_shows_and_revokes_links(rt, kettles, reconfigure, capsys):
    assert main(["demo", "create", "Kettles", "--hours", "2", "--rate", "3"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("http://127.0.0.1:7860/demo/") and "Only this machine can open this link" in err
    token = out.strip().rsplit("/", 1)[1]
    [link] = links.list_links(rt)
    assert (link.visitor_rate, link.expires_at - link.created_at) == (3, timedelta(hours=2))
    reconfigure(PUBLIC_BASE_URL="https://rag.example.com/console")
    assert main(["demo", "create", "Kettles", "--allow-sources"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("https://rag.example.com/console/demo/") and "Only this machine" not in err
    assert main(["demo", "create", "Kettles", "--hours", "800"]) == 2
    assert "a demo link lasts at most 30 days (720 hours), got 800" in capsys.readouterr().err
    opened, _ = links.open_link(rt, token)
    links.record_turn(rt, opened, "cookie:someone", "Why?", "Because [kettles.txt].", ["kettles.txt"])
    assert main(["demo", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"{link.id}\tKettles\tactive" in listed and "1 question(s)" in listed and token not in listed
    assert main(["demo", "chats", link.id]) == 0
    assert "Q: Why?\nA: Because [kettles.txt]." in capsys.readouterr().out
    assert main(["demo", "revoke", link.id, "--delete-chats"]) == 0
    assert "1 question(s) of its visitors deleted" in capsys.readouterr().err
    assert links.list_turns(rt, link.id) == [] and links.get_link(rt, link.id).state() == "revoked"
    assert main(["demo", "revoke", "nosuchid"]) == 2
    assert "no demo link 'nosuchid'" in capsys.readouterr().err


def test_the_console_panel_makes_a_link_behind_a_proxy_for_operators_only(secured, rt, kettles):
    server, _ = secured
    needs = server.blocks.ragtopics_needs
    make = next(f for i, f in server.blocks.fns.items() if f.name == "on_make")
    revoke = next(f for i, f in server.blocks.fns.items() if f.name == "on_revoke")
    assert {needs[i] for i, f in server.blocks.fns.items() if f.name in ("on_make", "on_revoke", "on_show")} == {"operator"}
    proxied = {"host": "127.0.0.1:9", "x-forwarded-host": "rag.example.com", "x-forwarded-proto": "https"}
    operator = gr.Request(headers=proxied, cookies={sessions.SESSION_COOKIE: sessions.start_session(rt, "otto")})
    viewer = gr.Request(headers=proxied, cookies={sessions.SESSION_COOKIE: sessions.start_session(rt, "vic")})
    with pytest.raises(gr.Error, match=r"Not allowed: vic \(viewer\) may not do this: it needs the operator role"):
        make.fn(viewer, "Kettles", 24, 5, 30, False, viewer)
    text, table = make.fn(operator, "Kettles", 24, 5, 30, True, operator)
    assert "<code id='demo-link-url'>https://rag.example.com/demo/" in text and "Only this machine" not in text
    [row] = table
    assert row[1:3] == ["Kettles", "active"] and row[4] == "yes" and row[-1] == "otto"
    text, _ = make.fn(operator, "Kettles", 24 * 31, 5, 30, False, operator)
    assert text.startswith("**No link made:** hours: a demo link lasts at most 30 days")
    status, table, _ = revoke.fn(operator, row[0], False)
    assert "it opens nothing from now on" in status and table[0][2] == "revoked"


def test_links_name_the_share_link_and_the_public_base_url_which_must_be_an_address(rt, kettles, reconfigure, settings):
    links.remember_share_url(rt, "https://0123abcd.gradio.live")
    new = links.create_link(rt, "Kettles", base_urls=["http://127.0.0.1:7860/"])
    assert new.urls == [f"http://127.0.0.1:7860{new.path}", f"https://0123abcd.gradio.live{new.path}"]
    assert not any("Only this machine" in n for n in new.notes) and any("72 hours" in n for n in new.notes)
    links.remember_share_url(rt, None)
    assert links.create_link(rt, "Kettles").urls == []
    with pytest.raises(ValueError, match="PUBLIC_BASE_URL must be an http:// or https:// address"):
        reconfigure(PUBLIC_BASE_URL="rag.example.com")
    assert reconfigure(PUBLIC_BASE_URL="https://rag.example.com").settings.public_base_url == "https://rag.example.com/"
