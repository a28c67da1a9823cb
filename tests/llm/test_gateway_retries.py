"""The gateway's one retry policy, against the scripted server answering 429 / 5xx / 400."""

from __future__ import annotations

import time

import httpx
import numpy as np
import openai
import pytest
from pydantic import BaseModel

from ragtopics.errors import ModelUnavailableError
from ragtopics.llm.embedding import OpenAIEmbedder
from ragtopics.llm.gateway import RETRY_ATTEMPTS, ModelGateway, RetryPolicy, is_transient, retry_after_s
from ragtopics.settings.env import Settings

#: The default policy's shape with waits short enough for tests.
FAST = RetryPolicy(initial_wait_s=0.01, max_wait_s=0.05, max_retry_after_s=1.0)
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture
def llm(scripted_llm):
    scripted_llm.reset()
    yield scripted_llm
    scripted_llm.reset()


@pytest.fixture
def gateway(settings, embedder, llm) -> ModelGateway:
    tools = Settings(**{**settings.model_dump(by_alias=True), "LLM_SUPPORTS_TOOLS": True}, _env_file=None)
    return ModelGateway(tools, embedder=embedder, retry=FAST)


def test_two_server_errors_then_success_answers_after_three_requests(gateway, llm):
    llm.replies["greet"] = "hi there"
    llm.fail_next(2, 500)
    assert gateway.chat("language_model", MESSAGES, prompt_name="greet").text == "hi there"
    assert len(llm.prompts("greet")) == 3


def test_rate_limit_is_retried_after_the_servers_retry_after(gateway, llm):
    llm.replies["greet"] = "hi there"
    llm.fail_next(2, 429, retry_after=0.2)
    t0 = time.monotonic()
    assert gateway.chat("language_model", MESSAGES, prompt_name="greet").text == "hi there"
    assert time.monotonic() - t0 >= 0.4  # two waits of Retry-After 0.2 s, not the 0.01 s backoff
    assert len(llm.prompts("greet")) == 3


def test_bad_request_is_not_retried(gateway, llm):
    llm.replies["greet"] = "hi there"
    llm.fail_next(1, 400)
    with pytest.raises(ModelUnavailableError, match=r"the language model at http://127\.0\.0\.1:\d+/v1 failed: .*400"):
        gateway.chat("language_model", MESSAGES, prompt_name="greet")
    assert len(llm.prompts("greet")) == 1


def test_failures_beyond_the_attempts_give_one_clear_error(gateway, llm):
    llm.replies["greet"] = "hi there"
    llm.fail_next(FAST.attempts + 1, 503)
    with pytest.raises(ModelUnavailableError) as caught:
        gateway.chat("language_model", MESSAGES, prompt_name="greet")
    message = str(caught.value)
    assert f"the language model at {llm.base_url} failed after {FAST.attempts} attempts: HTTP 503" in message
    assert len(llm.prompts("greet")) == FAST.attempts


def test_stream_is_retried_before_its_first_token(gateway, llm):
    llm.replies["answer"] = "one two three"
    llm.fail_next(2, 502)
    assert "".join(gateway.stream_chat("language_model", MESSAGES, prompt_name="answer")) == "one two three"
    assert len(llm.prompts("answer")) == 3


class Verdict(BaseModel):
    ok: bool


def test_structured_and_tool_calls_are_retried(gateway, llm):
    llm.replies["verdict"] = '{"ok": true}'
    llm.fail_next(1, 500)
    assert gateway.structured("language_model", MESSAGES, Verdict, prompt_name="verdict").ok is True
    assert len(llm.prompts("verdict")) == 2

    llm.replies["tools"] = {"tool_calls": [{"name": "search", "arguments": {"q": "x"}}]}
    llm.fail_next(1, 429)
    _text, calls = gateway.complete_with_tools("language_model", MESSAGES, [], prompt_name="tools")
    assert [c["name"] for c in calls] == ["search"] and len(llm.prompts("tools")) == 2


def test_embeddings_over_http_use_the_same_policy(settings, llm):
    remote = OpenAIEmbedder(llm.base_url, "k", "remote-model", 384, timeout_s=5)
    gateway = ModelGateway(settings, embedder=remote, retry=FAST)
    assert remote._client.max_retries == 0  # the SDK's own retries are off: one policy
    llm.fail_next(2, 500)
    vectors = gateway.embed(["alpha", "beta"])
    assert vectors.shape == (2, 384) and len(llm.prompts(llm.EMBEDDINGS)) == 3

    llm.requests.clear()
    llm.fail_next(FAST.attempts, 503)
    with pytest.raises(
        ModelUnavailableError, match=rf"the embedding model at {llm.base_url} failed after {FAST.attempts} attempts"
    ):
        gateway.embed(["alpha"])
    assert len(llm.prompts(llm.EMBEDDINGS)) == FAST.attempts


def test_unreachable_embedding_endpoint_says_so(settings):
    gateway = ModelGateway(settings, embedder=OpenAIEmbedder("http://127.0.0.1:9/v1", "k", "m", 384, timeout_s=1), retry=FAST)
    with pytest.raises(ModelUnavailableError, match=r"the embedding model at http://127\.0\.0\.1:9/v1 is not reachable"):
        gateway.embed(["alpha"])


def test_chat_clients_have_sdk_retries_off(gateway):
    client, _ = gateway._client(gateway.endpoint("language_model"))
    assert client.max_retries == 0


def _status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    response = httpx.Response(status, headers=headers or {}, request=request)
    return openai.APIStatusError("failed", response=response, body=None)


@pytest.mark.parametrize(
    "status,transient",
    [(400, False), (401, False), (404, False), (408, True), (429, True), (500, True), (502, True), (503, True)],
)
def test_which_statuses_are_transient(status, transient):
    assert is_transient(_status_error(status)) is transient


def test_retry_after_headers_are_read():
    assert retry_after_s(_status_error(429, {"retry-after": "2"})) == 2.0
    assert retry_after_s(_status_error(429, {"retry-after-ms": "250"})) == 0.25
    assert retry_after_s(_status_error(429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) is None
    assert retry_after_s(_status_error(500)) is None
    assert retry_after_s(ValueError("no response")) is None


def test_default_policy_is_the_documented_one():
    assert RetryPolicy().attempts == RETRY_ATTEMPTS >= 3


def test_short_texts_are_embedded_once_per_model_and_kept_in_order(settings, llm):
    remote = OpenAIEmbedder(llm.base_url, "k", "remote-model", 384, timeout_s=5)
    gateway = ModelGateway(settings, embedder=remote, retry=FAST)
    first = gateway.embed_short(["Paris", "Lyon", "Paris"], purpose="entity embedding")
    assert first.shape == (3, 384) and np.array_equal(first[0], first[2])
    assert np.allclose(first[:2], gateway.embed(["Paris", "Lyon"]), atol=1e-6)
    llm.requests.clear()
    again = gateway.embed_short(["Lyon", "Nice", "Paris"], purpose="deduplication")
    [request] = llm.prompts(llm.EMBEDDINGS)  # one request, for the one text not embedded before
    assert "Nice" in str(request) and "Lyon" not in str(request)
    assert np.array_equal(again[0], first[1]) and np.array_equal(again[2], first[0])
    llm.requests.clear()
    assert gateway.embed_short([], purpose="deduplication").shape == (0, 384) and not llm.prompts(llm.EMBEDDINGS)


def test_the_short_text_cache_drops_the_least_recently_used():
    from ragtopics.llm.gateway import TextVectorCache

    cache = TextVectorCache(2)
    cache.put_many(("", "m"), [("a", np.ones(3)), ("b", np.zeros(3))])
    assert set(cache.get_many(("", "m"), ["a"])) == {"a"}  # "a" used: "b" is now the oldest
    cache.put_many(("", "m"), [("c", np.ones(3))])
    assert set(cache.get_many(("", "m"), ["a", "b", "c"])) == {"a", "c"} and len(cache) == 2
    assert cache.get_many(("", "other model"), ["a"]) == {}
