"""``/metrics``: Prometheus text that prometheus_client's own parser reads, moved by a real chat turn."""

from __future__ import annotations

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragtopics.access import users


def scrape(url: str, token: str) -> dict[tuple[str, frozenset], float]:
    """The metrics as ``{(sample name, labels): value}``, read by prometheus_client's parser."""
    response = httpx.get(url + "metrics", headers={"authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_need_an_operator_token(secured, rt):
    _, url = secured
    anonymous = httpx.get(url + "metrics", timeout=30)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_api_key"
    refused = httpx.get(url + "metrics", headers={"authorization": f"Bearer {users.make_token(rt, 'vic')}"}, timeout=30)
    assert refused.status_code == 403 and "it needs the operator role" in refused.json()["error"]["message"]


def test_a_chat_turn_moves_the_counters(secured, rt, kettles, scripted_llm):
    _, url = secured
    operator = users.make_token(rt, "otto")
    before = scrape(url, operator)
    queue = rt.settings.queue_name
    assert value(before, "ragtopics_documents", status="indexed") == 1
    assert value(before, "ragtopics_queue_depth", queue=queue) == 0
    assert value(before, "ragtopics_jobs", queue=queue, state="finished") == 1  # the upload's ingest job
    assert value(before, "ragtopics_store_readable", store="redis") == 1
    assert value(before, "ragtopics_store_readable", store="sql") == 1

    scripted_llm.replies["answer"] = "It switches off at 100 degrees [S1]."
    client = openai.OpenAI(base_url=url + "v1", api_key=users.make_token(rt, "vic"), max_retries=0, timeout=60)
    client.chat.completions.create(model="Kettles", messages=[{"role": "user", "content": "When does K-2 switch off?"}])
    after = scrape(url, operator)

    def moved(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    answers = len(scripted_llm.prompts("answer"))
    assert answers == 1 and moved("ragtopics_model_calls_total", role="language_model", outcome="ok") == 1
    assert moved("ragtopics_model_calls_total", role="embedding", outcome="ok") >= 1  # the question's embedding
    assert moved("ragtopics_model_tokens_total", role="language_model", direction="completion") > 0
    assert moved("ragtopics_answer_duration_seconds_count", kind="rag", route="SEARCH") == 1
    assert moved("ragtopics_answer_duration_seconds_sum", kind="rag", route="SEARCH") > 0
    assert moved("ragtopics_http_request_duration_seconds_count", route="/v1/chat/completions", method="POST", status="200") == 1
    assert moved("ragtopics_http_request_duration_seconds_count", route="/metrics", method="GET", status="200") == 1


def test_a_failed_model_call_is_counted_as_an_error(secured, rt, kettles, scripted_llm):
    _, url = secured
    operator = users.make_token(rt, "otto")
    before = scrape(url, operator)
    scripted_llm.replies["answer"] = "unused"
    scripted_llm.fail_next(1, 400)  # a refused request is not retried: the answer fails at once
    client = openai.OpenAI(base_url=url + "v1", api_key=users.make_token(rt, "vic"), max_retries=0, timeout=60)
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="Kettles", messages=[{"role": "user", "content": "When does K-2 switch off?"}])
    assert failed.value.status_code == 502 and failed.value.body["code"] == "model_unavailable"
    after = scrape(url, operator)
    assert (
        value(after, "ragtopics_model_calls_total", role="language_model", outcome="error")
        - value(before, "ragtopics_model_calls_total", role="language_model", outcome="error")
        == 1
    )
