"""``/api/v1``: its OpenAPI document, Topics, and ask (JSON and server-sent events) with API tokens and roles."""

from __future__ import annotations

import json
import re

import httpx
from fastapi.routing import APIRoute
from starlette.routing import Mount

from ragtopics.access import users
from ragtopics.answer.history import session_turns
from ragtopics.api.rest import PREFIX

QUESTION = "When does K-2 switch off?"


def api_client(url: str, rt, username: str | None) -> httpx.Client:
    headers = {"authorization": f"Bearer {users.make_token(rt, username)}"} if username else {}
    return httpx.Client(base_url=url.rstrip("/") + PREFIX, headers=headers, timeout=60)


def api_routes(server) -> list[tuple[str, str, str]]:
    """(method, path with ``x`` for parameters, role needed) of every route of the mounted API."""
    mount = next(r for r in server.api.routes if isinstance(r, Mount) and r.path == PREFIX)
    out = []
    for route in mount.app.routes:
        if not isinstance(route, APIRoute):
            continue
        [need] = [d.call.need for d in route.dependant.dependencies if hasattr(d.call, "need")]
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        out += [(method, path, need) for method in route.methods]
    return out


def test_every_api_route_refuses_the_anonymous_and_callers_below_its_role(secured, rt):
    server, url = secured
    routes = api_routes(server)
    assert {(m, p) for m, p, _ in routes} == {
        ("GET", "/topics"),
        ("GET", "/topics/x"),
        ("POST", "/topics/x/ask"),
        ("POST", "/topics/x/documents"),
        ("GET", "/topics/x/documents"),
        ("DELETE", "/topics/x/documents/x"),
        ("GET", "/jobs/x"),
        ("POST", "/topics/x/uploads/estimate"),
        ("GET", "/topics/x/chats"),
        ("GET", "/chats/x"),
        ("POST", "/topics"),
        ("PATCH", "/topics/x"),
        ("DELETE", "/topics/x"),
        ("POST", "/topics/x/communities"),
        ("GET", "/topics/x/communities"),
        ("GET", "/topics/x/graph"),
        ("GET", "/topics/x/graph/entities/x"),
        ("POST", "/topics/x/graph/corrections"),
        ("GET", "/topics/x/graph/corrections"),
        ("POST", "/topics/x/evals"),
        ("GET", "/evals/x"),
        ("POST", "/topics/x/demo-links"),
        ("GET", "/demo-links"),
        ("DELETE", "/demo-links/x"),
        ("GET", "/demo-links/x/chats"),
    }
    assert {(m, p) for m, p, need in routes if need == "viewer"} == {
        ("GET", "/topics"),
        ("POST", "/topics/x/ask"),
        ("GET", "/topics/x/chats"),
        ("GET", "/chats/x"),
        ("GET", "/topics/x/graph"),
        ("GET", "/topics/x/graph/entities/x"),
        ("GET", "/topics/x/graph/corrections"),
    }
    assert {need for _, _, need in routes} == {"viewer", "operator"}
    with api_client(url, rt, None) as anonymous:
        for method, path, _ in [*routes, ("GET", "/docs", ""), ("GET", "/openapi.json", "")]:
            response = anonymous.request(method, path, json={"question": "hi"})
            assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error", (method, path)
    with api_client(url, rt, "vic") as viewer:
        for method, path, need in routes:
            if need == "viewer":
                continue
            response = viewer.request(method, path, json={"question": "hi"})
            assert response.status_code == 403, (method, path)
            message = f"Not allowed: vic (viewer) may not do this: it needs the {need} role."
            assert response.json()["error"] == {"message": message, "type": "permission_error", "code": "permission_denied"}


def test_the_openapi_document_and_docs_are_served_to_a_logged_in_caller(secured, rt):
    _, url = secured
    with api_client(url, rt, "vic") as viewer:
        document = viewer.get("/openapi.json").json()
        assert set(document["paths"]) == {
            "/topics",
            "/topics/{name}",
            "/topics/{name}/ask",
            "/topics/{name}/documents",
            "/topics/{name}/documents/{file_name}",
            "/jobs/{job_id}",
            "/topics/{name}/chats",
            "/topics/{name}/uploads/estimate",
            "/chats/{session_id}",
            "/topics/{name}/communities",
            "/topics/{name}/graph",
            "/topics/{name}/graph/entities/{entity}",
            "/topics/{name}/graph/corrections",
            "/topics/{name}/evals",
            "/evals/{run_id}",
            "/topics/{name}/demo-links",
            "/demo-links",
            "/demo-links/{link_id}",
            "/demo-links/{link_id}/chats",
        }
        assert {
            "CreateTopicRequest",
            "ConfigureTopicRequest",
            "EvalRunRequest",
            "CreateDemoLinkRequest",
            "GraphCorrectionRequest",
        } <= set(document["components"]["schemas"])
        assert "AskRequest" in document["components"]["schemas"]
        page = viewer.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text and f"{PREFIX}/openapi.json" in page.text


def test_topics_and_a_json_answer_with_the_clis_shapes(secured, rt, kettles, scripted_llm):
    _, url = secured
    scripted_llm.replies["answer"] = "It switches off at 100 degrees [S1]."
    with api_client(url, rt, "vic") as viewer, api_client(url, rt, "otto") as operator:
        assert viewer.get("/topics").json() == [
            {"id": kettles.id, "name": "Kettles", "kind": "rag", "description": "", "settings_version": kettles.settings_version}
        ]
        shown = operator.get("/topics/Kettles").json()
        assert shown["name"] == "Kettles" and shown["settings"]["top_k_results"] == kettles.settings.top_k_results
        assert operator.get("/topics/Teapots").json()["error"]["code"] == "not_found"
        response = viewer.post("/topics/Kettles/ask", json={"question": QUESTION})
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {
            "answer",
            "sources",
            "route",
            "route_confidence",
            "route_reason",
            "route_method",
            "route_planned",
            "no_answer",
            "note",
            "rerank",
            "session_id",
            "timings_ms",
        }
        assert body["answer"] == "It switches off at 100 degrees [kettles.txt]." and body["route"] == "SEARCH"
        assert [s["file"] for s in body["sources"]] == ["kettles.txt"] and body["timings_ms"]["total"] > 0
        assert body["sources"][0]["link"].startswith(url + "files/")
        assert [t.answer for t in session_turns(rt, body["session_id"])] == [body["answer"]]
        empty = viewer.post("/topics/Kettles/ask", json={"question": "  "})
        assert empty.status_code == 400 and empty.json()["error"]["message"] == "the question is empty"
        malformed = viewer.post("/topics/Kettles/ask", json={"query": QUESTION})
        assert malformed.status_code == 400 and "question: Field required" in malformed.json()["error"]["message"]


def test_a_streamed_answer_sends_tokens_then_route_sources_and_timings(secured, rt, kettles, scripted_llm):
    _, url = secured
    scripted_llm.replies["answer"] = "It switches off at 100 degrees [S1], then cools."
    with api_client(url, rt, "vic") as viewer:
        with viewer.stream("POST", "/topics/Kettles/ask", json={"question": QUESTION, "stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            text = response.read().decode()
    events = [
        (block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1].removeprefix("data: ")))
        for block in text.strip().split("\n\n")
    ]
    names = [name for name, _ in events if name != "phase"]
    assert names[-4:] == ["route", "sources", "timings", "done"] and set(names[:-4]) == {"token"}
    streamed = "".join(data["text"] for name, data in events if name == "token")
    done = events[-1][1]
    assert streamed == done["answer"] == "It switches off at 100 degrees [kettles.txt], then cools."
    assert [s["file"] for s in dict(events)["sources"]] == ["kettles.txt"] and dict(events)["route"]["route"] == "SEARCH"
    assert dict(events)["timings"] == done["timings_ms"]


def test_upload_ask_and_delete_through_the_api(secured, rt, run_jobs, scripted_llm):
    from ragtopics.topics.topics import create_topic, get_topic

    _, url = secured
    create_topic(rt, "Boilers", settings={"file_types": ["txt", "md"]})
    with api_client(url, rt, "otto") as operator, api_client(url, rt, "vic") as viewer:
        sent = operator.post(
            "/topics/Boilers/documents",
            files=[
                ("files", ("boilers.md", b"# Boilers\n\nBoiler B-12 must be descaled every spring.", "text/markdown")),
                ("files", ("photo.jpg", b"\xff\xd8\xff", "image/jpeg")),
            ],
        )
        assert sent.status_code == 200
        [enqueued], [refused] = sent.json()["enqueued"], sent.json()["refused"]
        assert enqueued["file_name"] == "boilers.md" and refused["file_name"] == "photo.jpg" and "md, txt" in refused["error"]
        assert operator.get(f"/jobs/{enqueued['job_id']}").json()["status"] == "queued"
        run_jobs()
        job = operator.get(f"/jobs/{enqueued['job_id']}").json()
        assert job["status"] == "finished" and job["result"]["status"] == "indexed"
        [listed] = operator.get("/topics/Boilers/documents").json()
        assert (listed["file_name"], listed["status"], listed["chunk_count"]) == ("boilers.md", "indexed", 1)
        assert listed["updated_at"].endswith("+00:00")

        scripted_llm.replies["answer"] = "Descale it every spring [S1]."
        answer = viewer.post("/topics/Boilers/ask", json={"question": "When is boiler B-12 descaled?"}).json()
        assert answer["answer"] == "Descale it every spring [boilers.md]." and answer["sources"][0]["file"] == "boilers.md"

        deleted = operator.delete("/topics/Boilers/documents/boilers.md")
        assert deleted.status_code == 200 and deleted.json()["removed"]["chunks"] == 1
        assert operator.get("/topics/Boilers/documents").json() == []
        assert rt.chunk_index(get_topic(rt, "Boilers").id).document_chunk_ids(listed["id"]) == []
        again = operator.delete("/topics/Boilers/documents/boilers.md")
        assert again.status_code == 404
        assert again.json()["error"]["message"] == "Topic 'Boilers' has no document 'boilers.md' (it has none)"
        assert operator.get("/jobs/job-nothing").status_code == 404


def test_the_cost_estimate_route_and_the_estimate_beside_the_actual_counts_in_the_job(secured, rt, run_jobs, scripted_llm):
    from ragtopics.topics.topics import create_topic

    _, url = secured
    scripted_llm.replies["context_line"] = "A heater's inspection interval."
    create_topic(
        rt,
        "Heaters",
        settings={"file_types": ["txt", "md"], "chunking_strategy": "SEMANTIC", "chunk_size": 200, "chunk_overlap": 0},
    )
    text = "\n\n".join(f"Heater H-{i} is checked every {i + 1} weeks by the day shift in hall {i}." for i in range(12)).encode()
    files = [("files", ("heaters.txt", text, "text/plain")), ("files", ("photo.jpg", b"\xff\xd8\xff", "image/jpeg"))]
    with api_client(url, rt, "otto") as operator, api_client(url, rt, "vic") as viewer:
        assert viewer.post("/topics/Heaters/uploads/estimate", files=files).status_code == 403
        response = operator.post("/topics/Heaters/uploads/estimate", files=files)
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"topic", "chunks", "calls", "tokens_in", "tokens_out", "seconds", "cost", "files", "notes"}
        assert body["chunks"] > 1 and body["calls"]["context_line"]["calls"] == body["chunks"] and body["cost"] is None
        assert [f["refused"] != "" for f in body["files"]] == [False, True]
        assert operator.get("/topics/Heaters/documents").json() == []  # nothing stored
        assert operator.post("/topics/Nothing/uploads/estimate", files=files).json()["error"]["code"] == "not_found"

        [sent] = operator.post("/topics/Heaters/documents", files=files[:1]).json()["enqueued"]
        run_jobs()
        job = operator.get(f"/jobs/{sent['job_id']}").json()
        assert job["cost"]["estimate"]["chunks"] == body["chunks"] == job["cost"]["actual"]["chunks"]
        assert job["cost"]["actual"]["calls"]["context_line"] == body["chunks"]


def test_a_caller_lists_and_reads_only_their_own_chats(secured, rt, kettles, scripted_llm):
    _, url = secured
    scripted_llm.replies["answer"] = "It switches off at 100 degrees [S1]."
    with api_client(url, rt, "vic") as vic, api_client(url, rt, "otto") as otto:
        asked = vic.post("/topics/Kettles/ask", json={"question": QUESTION}).json()
        [listed] = vic.get("/topics/Kettles/chats").json()
        assert listed["id"] == asked["session_id"] and listed["title"] == QUESTION and listed["created_at"].endswith("+00:00")
        chat = vic.get(f"/chats/{asked['session_id']}").json()
        [turn] = chat["turns"]
        assert (turn["question"], turn["answer"], turn["route"]) == (QUESTION, asked["answer"], "SEARCH")
        assert turn["sources"][0]["file"] == "kettles.txt" and turn["sources"][0]["status"] == "current"
        assert turn["sources"][0]["link"].startswith(url + "files/")
        assert otto.get("/topics/Kettles/chats").json() == []
        refused = otto.get(f"/chats/{asked['session_id']}")
        assert refused.status_code == 404
        assert refused.json()["error"]["message"] == f"no chat session {asked['session_id']} of yours"
