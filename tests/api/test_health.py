"""``/healthz`` and ``/readyz`` on the real console: no login needed, each dependency checked, 503 when one fails."""

from __future__ import annotations

import httpx

from ragtopics.settings.env import ROLES
from tests.conftest import free_port


def test_healthz_answers_without_login(secured):
    _, url = secured
    response = httpx.get(url + "healthz", timeout=30)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_checks_every_store_and_model_endpoint(secured, scripted_llm):
    _, url = secured
    response = httpx.get(url + "readyz", timeout=30)
    body = response.json()
    assert response.status_code == 200 and body["status"] == "ready", body
    endpoint = "model:" + ",".join(ROLES)  # every role uses the Language Model's endpoint; the embedder is in-process
    assert set(body["checks"]) == {"redis", "sql", "graph:default", endpoint}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["redis"]["detail"] == "answers, search module loaded"
    assert body["checks"]["graph:default"]["detail"] == "answers, graph module loaded"
    assert body["checks"][endpoint]["detail"] == "answers" and scripted_llm.base_url not in response.text


def test_readyz_is_503_when_a_model_endpoint_does_not_answer(secured, reconfigure):
    _, url = secured
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    reconfigure(ROUTER_BASE_URL=closed, ROUTER_MODEL="router-model")
    response = httpx.get(url + "readyz", timeout=30)
    body = response.json()
    assert response.status_code == 503 and body["status"] == "not ready"
    assert body["checks"]["model:router"]["ok"] is False and body["checks"]["model:router"]["detail"].startswith("ConnectError")
    others = {name: check for name, check in body["checks"].items() if name != "model:router"}
    assert "model:router" not in set(others) and all(check["ok"] for check in others.values())
    assert httpx.get(url + "healthz", timeout=30).status_code == 200  # the process itself still serves


def test_readyz_is_503_while_redis_does_not_answer(secured, rt, monkeypatch):
    import redis

    _, url = secured
    monkeypatch.setattr(rt, "redis", redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1))
    response = httpx.get(url + "readyz", timeout=30)
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["redis"]["ok"] is False and "ConnectionError" in body["checks"]["redis"]["detail"]
    assert body["checks"]["graph:default"]["ok"] is False and body["checks"]["sql"]["ok"] is True
