"""``/api/v1`` Topic management, communities, graph and evaluation runs, through HTTP with API tokens."""

from __future__ import annotations

import json

from ragtopics.graph.ingest import graph_store
from ragtopics.graph.report import graph_stats
from ragtopics.quality.runs import run_path
from ragtopics.storage import topics as topic_store
from ragtopics.topics.topics import get_topic, list_topics, topic_id_for
from tests.api.test_rest import api_client
from tests.graph.test_corrections import plant  # noqa: F401 - a GraphRAG Topic with one uploaded file, a fixture
from tests.quality.conftest import QUESTIONS, fleet  # noqa: F401 - a RAG Topic of three files, a fixture
from tests.ui.test_graph_panel import CURIE, NLP, REPORT


def test_create_configure_and_delete_a_topic_with_the_consoles_checks(secured, rt):
    _, url = secured
    with api_client(url, rt, "otto") as operator:
        created = operator.post(
            "/topics",
            json={
                "name": "Boilers",
                "description": "boiler manuals",
                "settings": {"chunk_size": 800, "file_types": ["txt", "md"]},
            },
        )
        assert created.status_code == 201, created.text
        body = created.json()
        stored = get_topic(rt, "Boilers")
        assert body["id"] == stored.id == topic_id_for("Boilers") and body["settings_version"] == stored.settings_version
        assert stored.settings.chunk_size == 800 and stored.description == "boiler manuals"
        assert body["settings"]["chunk_size"] == 800

        again = operator.post("/topics", json={"name": "boilers"})
        assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_request"
        assert "already exists" in again.json()["error"]["message"]
        bad = operator.post("/topics", json={"name": "Kettles", "settings": {"chunk_size": "huge"}})
        assert bad.status_code == 400 and "chunk_size" in bad.json()["error"]["message"]
        unknown = operator.post("/topics", json={"name": "Kettles", "kind": "vectors"})
        assert unknown.status_code == 400
        assert [t.name for t in list_topics(rt)] == ["Boilers"]  # nothing stored by the refused ones

        changed = operator.patch("/topics/Boilers", json={"settings": {"top_k_results": 8}})
        assert changed.status_code == 200 and changed.json()["settings"]["top_k_results"] == 8
        now = get_topic(rt, "Boilers")
        assert now.settings.top_k_results == 8 and now.settings.chunk_size == 800
        assert now.settings_version == stored.settings_version + 1
        refused = operator.patch("/topics/Boilers", json={"settings": {"top_k_results": -3}})
        assert refused.status_code == 400 and "top_k_results" in refused.json()["error"]["message"]
        assert get_topic(rt, "Boilers").settings_version == now.settings_version
        assert operator.patch("/topics/Teapots", json={"settings": {"top_k_results": 8}}).status_code == 404
        assert operator.patch("/topics/Boilers", json={"settings": {}}).status_code == 400

        deleted = operator.delete("/topics/Boilers")
        assert deleted.status_code == 200 and deleted.json()["deleted"] == "Boilers" and deleted.json()["id"] == stored.id
        assert topic_store.find_topic(rt.metadata, stored.id) is None and list_topics(rt) == []
        gone = operator.delete("/topics/Boilers")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"


def test_create_upload_ask_delete_document_and_delete_topic_through_the_api(secured, rt, run_jobs, scripted_llm):
    _, url = secured
    with api_client(url, rt, "otto") as operator, api_client(url, rt, "vic") as viewer:
        assert operator.post("/topics", json={"name": "Heaters", "settings": {"file_types": ["txt"]}}).status_code == 201
        topic_id = get_topic(rt, "Heaters").id
        sent = operator.post(
            "/topics/Heaters/documents", files=[("files", ("heaters.txt", b"Heater H-4 runs on 240 volts.", "text/plain"))]
        )
        [enqueued] = sent.json()["enqueued"]
        run_jobs()
        assert operator.get(f"/jobs/{enqueued['job_id']}").json()["status"] == "finished"
        [listed] = operator.get("/topics/Heaters/documents").json()
        assert listed["status"] == "indexed" and rt.chunk_index(topic_id).document_chunk_ids(listed["id"])

        scripted_llm.replies["answer"] = "It runs on 240 volts [S1]."
        answer = viewer.post("/topics/Heaters/ask", json={"question": "What voltage does heater H-4 need?"}).json()
        assert answer["answer"] == "It runs on 240 volts [heaters.txt]." and answer["sources"][0]["file"] == "heaters.txt"

        assert operator.delete("/topics/Heaters/documents/heaters.txt").json()["removed"]["chunks"] == 1
        assert rt.chunk_index(topic_id).document_chunk_ids(listed["id"]) == []
        assert viewer.delete("/topics/Heaters").status_code == 403  # a viewer may not
        deleted = operator.delete("/topics/Heaters").json()
        assert deleted["deleted"] == "Heaters" and deleted["removed"]
        assert topic_store.find_topic(rt.metadata, topic_id) is None
        assert not rt.redis.keys(f"rt:{topic_id}:*")
        assert viewer.get("/topics").json() == []
        assert viewer.post("/topics/Heaters/ask", json={"question": "Voltage?"}).status_code == 404


def test_communities_recompute_and_status_and_the_graph_through_the_api(secured, rt, run_jobs, scripted_llm):
    _, url = secured
    scripted_llm.replies["community_report"] = REPORT
    with api_client(url, rt, "otto") as operator, api_client(url, rt, "vic") as viewer:
        assert operator.post("/topics", json={"name": "Physicists", "kind": "graphrag", "settings": NLP}).status_code == 201
        sent = operator.post("/topics/Physicists/documents", files=[("files", ("curie.txt", CURIE, "text/plain"))])
        assert sent.json()["enqueued"]
        run_jobs()
        stats = viewer.get("/topics/Physicists/graph").json()
        assert stats == json.loads(json.dumps(graph_stats(rt, get_topic(rt, "Physicists")), default=str))
        assert stats["entities"] > 3 and stats["communities"] == 0 and stats["recompute_due"]
        before = operator.get("/topics/Physicists/communities").json()
        assert (before["communities"], before["last_run"], before["job"]) == (0, None, None) and before["next_refresh"] > 0

        started = operator.post("/topics/Physicists/communities")
        assert started.status_code == 202 and started.json()["status"] == "queued"
        job_id = started.json()["job_id"]
        assert operator.post("/topics/Physicists/communities").json()["job_id"] == job_id  # the one queued
        assert operator.get("/topics/Physicists/communities").json()["job"]["status"] == "queued"
        run_jobs()
        after = operator.get("/topics/Physicists/communities").json()
        assert after["job"]["job_id"] == job_id and after["job"]["status"] == "finished"
        assert after["communities"] >= 1 and after["summaries"] >= 1 and after["last_run"]["finished"].endswith("UTC")
        assert viewer.get("/topics/Physicists/graph").json()["summaries"] == after["summaries"]

        curie = viewer.get("/topics/Physicists/graph/entities/marie curie")
        assert curie.status_code == 200 and curie.json()["name"] == "Marie Curie"
        assert any("Pierre Curie" in (r["source"], r["target"]) for r in curie.json()["relationships"])
        missing = viewer.get("/topics/Physicists/graph/entities/Albert Einstein")
        assert missing.status_code == 404 and "has no entity called 'Albert Einstein'" in missing.json()["error"]["message"]

        assert operator.post("/topics", json={"name": "Plain"}).status_code == 201
        for response in (
            operator.post("/topics/Plain/communities"),
            viewer.get("/topics/Plain/graph"),
            operator.get("/topics/Plain/communities"),
        ):
            assert response.status_code == 400
            assert response.json()["error"]["message"] == "Topic 'Plain' is a rag Topic; only GraphRAG Topics have a graph"


def test_an_evaluation_run_is_started_and_read_through_the_api(secured, rt, fleet, run_jobs):
    _, url = secured
    with api_client(url, rt, "otto") as operator:
        started = operator.post("/topics/Fleet/evals", json={"questions": QUESTIONS, "settings": {"top_k_results": 1}})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert json.loads(rt.blobs.read(run_path(run_id, "request.json")))["topic"] == "Fleet"
        queued = operator.get(f"/evals/{run_id}").json()
        assert (queued["summary"], queued["results"], queued["job"]["status"]) == (None, [], "queued")
        assert queued["questions"] == 3 and queued["settings_changed"] == {"top_k_results": "1"} and queued["retrieval_only"]
        run_jobs()
        done = operator.get(f"/evals/{run_id}").json()
        assert done["job"]["status"] == "finished" and done["summary"]["n"] == 3 and done["summary"]["recall@1"] == 1.0
        assert [r["question"] for r in done["results"]] == [q["question"] for q in QUESTIONS]

        bad_way = operator.post("/topics/Fleet/evals", json={"questions": QUESTIONS, "route": "PATH"})
        message = bad_way.json()["error"]["message"]
        assert bad_way.status_code == 400 and message.startswith("way 'PATH': a rag Topic has ") and "SEARCH" in message
        bad_setting = operator.post("/topics/Fleet/evals", json={"questions": QUESTIONS, "settings": {"top_k_results": 0}})
        assert bad_setting.status_code == 400 and "top_k_results" in bad_setting.json()["error"]["message"]
        assert operator.post("/topics/Teapots/evals", json={"questions": QUESTIONS}).status_code == 404
        assert operator.get("/evals/eval-20260101-000000-abcdef").status_code == 404
        assert operator.get("/evals/..%2F..%2Fetc").status_code == 404


def test_an_operator_corrects_the_graph_through_the_api_and_a_viewer_only_reads_the_corrections(secured, rt, plant):
    _, url = secured
    with api_client(url, rt, "otto") as operator, api_client(url, rt, "vic") as viewer:
        refused = viewer.post("/topics/Plant/graph/corrections", json={"kind": "delete", "name": "Gremlin"})
        assert refused.status_code == 403 and graph_store(rt, plant).entity_by_name("Gremlin") is not None
        made = operator.post("/topics/Plant/graph/corrections", json={"kind": "merge", "name": "USA", "value": "United States"})
        assert made.status_code == 201, made.text
        assert made.json()["summary"] == 'merged "USA" (PLACE) into "United States" (PLACE)' and made.json()["by"] == "otto"
        assert graph_store(rt, plant).entity_by_name("USA").name == "United States"
        bad = operator.post("/topics/Plant/graph/corrections", json={"kind": "rename", "name": "Nobody", "value": "X"})
        assert bad.status_code == 404 and "no entity called 'Nobody'" in bad.json()["error"]["message"]
        listed = viewer.get("/topics/Plant/graph/corrections")
        assert listed.status_code == 200 and [c["kind"] for c in listed.json()] == ["merge"]
        history = viewer.get("/topics/Plant/graph/entities/USA").json()["history"]
        assert [h["id"] for h in history] == [made.json()["id"]]
