"""The model gateway: the one module through which every model call goes.

It maps a role to its endpoint, retries transient errors (connection, timeout,
rate limit; never a bad request), bounds concurrency per endpoint, streams, and
records model, tokens and duration of every call into the caller's :class:`Trace`
(the DEV-report hook).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass

import instructor
import numpy as np
import openai
from instructor.core.exceptions import InstructorError
from pydantic import BaseModel, ValidationError
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from ragtopics.settings.env import ModelEndpoint, Settings
from ragtopics.llm.embedding import Embedder, LocalEmbedder, OpenAIEmbedder
from ragtopics.errors import ModelUnavailableError, StructuredOutputError
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

TRANSIENT = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError)
MAX_CONCURRENT_CALLS = 4


@dataclass(frozen=True, slots=True)
class ModelCall:
    """Accounting of one model call.

    Attributes:
        role: the model role (``language_model``, ``embedding``, ...).
        prompt_name: the named prompt, or ``"embedding"``.
        model: the model name.
        prompt_tokens, completion_tokens: as reported by the server (0 when not reported).
        duration_ms: wall time of the call in milliseconds.
        items: texts embedded (embedding calls) or 1.
        stopped: a streamed call that the caller ended early.
    """

    role: str
    prompt_name: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    duration_ms: float
    items: int = 1
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class ChatReply:
    """A finished chat completion: its text and accounting."""

    text: str
    call: ModelCall


class ModelGateway:
    """Role → endpoint, retries, concurrency, streaming and accounting.

    Args:
        settings: process settings (endpoints per role).
        embedder: the embedder to use; built from settings when omitted.
    """

    def __init__(self, settings: Settings, embedder: Embedder | None = None):
        self.settings = settings
        self.embedder = embedder or build_embedder(settings)
        self._clients: dict[str, openai.OpenAI] = {}
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def endpoint(self, role: str) -> ModelEndpoint:
        """The endpoint configured for ``role``."""
        return self.settings.endpoint(role)

    def _client(self, endpoint: ModelEndpoint) -> tuple[openai.OpenAI, threading.BoundedSemaphore]:
        with self._lock:
            key = f"{endpoint.base_url}|{endpoint.api_key}"
            if key not in self._clients:
                self._clients[key] = openai.OpenAI(
                    base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=endpoint.timeout_s, max_retries=0
                )
                self._slots[key] = threading.BoundedSemaphore(MAX_CONCURRENT_CALLS)
            return self._clients[key], self._slots[key]

    def chat(self, role: str, messages: list[dict], *, prompt_name: str, trace: Trace | None = None,
             max_tokens: int | None = None, temperature: float = 0.2) -> ChatReply:  # fmt: skip
        """One chat completion.

        Args:
            role: model role.
            messages: OpenAI chat messages.
            prompt_name: the named prompt (sent as ``X-Prompt-Name``, recorded in the trace).

        Raises:
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        endpoint = self.endpoint(role)
        client, slot = self._client(endpoint)
        max_tokens = max_tokens or self.settings.llm_max_tokens
        t0 = time.perf_counter()
        with slot:
            response = self._create(client, endpoint, messages, prompt_name, stream=False, max_tokens=max_tokens, temperature=temperature)
        usage = response.usage
        call = ModelCall(role, prompt_name, endpoint.model, getattr(usage, "prompt_tokens", 0) or 0,
                         getattr(usage, "completion_tokens", 0) or 0, _ms(t0))  # fmt: skip
        _record(trace, call, messages, response.choices[0].message.content or "")
        return ChatReply(text=response.choices[0].message.content or "", call=call)

    def stream_chat(self, role: str, messages: list[dict], *, prompt_name: str, trace: Trace | None = None,
                    max_tokens: int | None = None, temperature: float = 0.2, tools: list[dict] | None = None) -> Generator[str, None, str | None]:  # fmt: skip
        """Stream a chat completion as text deltas.

        Closing the iterator early closes the HTTP stream and records the call as
        ``stopped`` (the server may still finish the generation in the background).
        The generator returns the finish reason (``"stop"``, ``"length"`` when ``max_tokens``
        cut the answer, or None when the server sent none): ``reason = yield from ...``.

        Raises:
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        endpoint = self.endpoint(role)
        client, slot = self._client(endpoint)
        max_tokens = max_tokens or self.settings.llm_max_tokens
        t0 = time.perf_counter()
        parts: list[str] = []
        usage = None
        stopped = True
        with slot:
            stream = self._create(client, endpoint, messages, prompt_name, stream=True, max_tokens=max_tokens,
                                  temperature=temperature, tools=tools)  # fmt: skip
            finish_reason = None
            try:
                for chunk in stream:
                    if chunk.usage is not None:
                        usage = chunk.usage
                    delta = chunk.choices[0].delta.content if chunk.choices else None
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish_reason = chunk.choices[0].finish_reason
                    if delta:
                        parts.append(delta)
                        yield delta
                stopped = False
            except openai.APIError as exc:
                raise ModelUnavailableError(f"the {endpoint.role} at {endpoint.base_url} failed while streaming: {exc}") from exc
            finally:
                stream.close()
                call = ModelCall(role, prompt_name, endpoint.model, getattr(usage, "prompt_tokens", 0) or 0,
                                 getattr(usage, "completion_tokens", 0) or len(parts), _ms(t0), stopped=stopped)  # fmt: skip
                _record(trace, call, messages, "".join(parts))
        return finish_reason

    def structured(self, role: str, messages: list[dict], response_model: type[BaseModel], *, prompt_name: str,
                   trace: Trace | None = None, max_tokens: int | None = 512) -> BaseModel:  # fmt: skip
        """One chat completion parsed into ``response_model`` (instructor, JSON-schema mode).

        JSON-schema mode makes llama.cpp and vLLM constrain their output to the schema;
        a reply that still does not parse is not retried.

        Raises:
            StructuredOutputError: when the reply does not fit ``response_model``.
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        endpoint = self.endpoint(role)
        client, slot = self._client(endpoint)
        patched = instructor.from_openai(client, mode=instructor.Mode.JSON_SCHEMA)
        t0 = time.perf_counter()
        try:
            with slot:
                result, completion = _with_retries(patched.chat.completions.create_with_completion)(
                    model=endpoint.model, messages=messages, response_model=response_model, max_retries=0,
                    max_tokens=max_tokens, temperature=0.0, extra_headers={"X-Prompt-Name": prompt_name},
                )  # fmt: skip
        except TRANSIENT as exc:
            raise ModelUnavailableError(f"the {endpoint.role.replace('_', ' ')} at {endpoint.base_url} is not reachable ({type(exc).__name__})") from exc
        except (ValidationError, InstructorError) as exc:
            _record(trace, ModelCall(role, prompt_name, endpoint.model, 0, 0, _ms(t0)), messages, f"unparsable: {exc}")
            raise StructuredOutputError(f"the {prompt_name} reply did not match {response_model.__name__}: {str(exc)[:300]}") from exc
        except openai.APIError as exc:
            raise ModelUnavailableError(f"the {endpoint.role.replace('_', ' ')} at {endpoint.base_url} failed: {exc}") from exc
        usage = completion.usage
        call = ModelCall(role, prompt_name, endpoint.model, getattr(usage, "prompt_tokens", 0) or 0,
                         getattr(usage, "completion_tokens", 0) or 0, _ms(t0))  # fmt: skip
        _record(trace, call, messages, result.model_dump_json())
        return result

    def complete_with_tools(self, role: str, messages: list[dict], tools: list[dict], *, prompt_name: str,
                            trace: Trace | None = None) -> tuple[str, list[dict]]:  # fmt: skip
        """One non-streamed completion that may request tool calls.

        Returns:
            ``(text, tool_calls)`` where each tool call is ``{"id", "name", "arguments"}``
            (``arguments`` is the raw JSON string).

        Raises:
            ConfigurationError: when the role's model is not marked as supporting tools.
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        from ragtopics.errors import ConfigurationError

        endpoint = self.endpoint(role)
        if not endpoint.supports_tools:
            raise ConfigurationError(
                f"this Topic is connected to other Topics (MCP Interfaces), which needs a tool-capable language model; "
                f"{endpoint.model} is not marked as one. Set LLM_SUPPORTS_TOOLS=true for a model that supports "
                "OpenAI tool calls, or remove the connected Topics."
            )
        client, slot = self._client(endpoint)
        t0 = time.perf_counter()
        with slot:
            response = self._create(client, endpoint, messages, prompt_name, stream=False,
                                    max_tokens=self.settings.llm_max_tokens, temperature=0.2, tools=tools)  # fmt: skip
        message = response.choices[0].message
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments or "{}"} for c in (message.tool_calls or [])]
        usage = response.usage
        call = ModelCall(role, prompt_name, endpoint.model, getattr(usage, "prompt_tokens", 0) or 0,
                         getattr(usage, "completion_tokens", 0) or 0, _ms(t0))  # fmt: skip
        _record(trace, call, messages, (message.content or "") + (f" tool_calls={calls}" if calls else ""))
        return message.content or "", calls

    def embed(self, texts: list[str], *, trace: Trace | None = None, purpose: str = "embedding") -> np.ndarray:
        """Embed texts with the configured embedding model.

        Returns:
            Shape ``(len(texts), dims)`` float32, unit rows.

        Raises:
            ModelUnavailableError: when the embedding model is unreachable.
        """
        t0 = time.perf_counter()
        vectors = self.embedder.embed(texts)
        call = ModelCall("embedding", purpose, self.embedder.model, 0, 0, _ms(t0), items=len(texts))
        if trace is not None:
            trace.add("model_call", **asdict(call))
        return vectors

    @staticmethod
    def _create(client: openai.OpenAI, endpoint: ModelEndpoint, messages: list[dict], prompt_name: str, *,
                stream: bool, max_tokens: int | None, temperature: float, tools: list[dict] | None = None):  # fmt: skip
        extra: dict = {"stream_options": {"include_usage": True}} if stream else {}
        if tools:
            extra["tools"] = tools
        try:
            return _with_retries(client.chat.completions.create)(
                model=endpoint.model, messages=messages, stream=stream, max_tokens=max_tokens,
                temperature=temperature, extra_headers={"X-Prompt-Name": prompt_name}, **extra,
            )  # fmt: skip
        except TRANSIENT as exc:
            raise ModelUnavailableError(
                f"the {endpoint.role.replace('_', ' ')} at {endpoint.base_url} is not reachable ({type(exc).__name__}); "
                "is the model server running?"
            ) from exc
        except openai.APIError as exc:
            raise ModelUnavailableError(f"the {endpoint.role.replace('_', ' ')} at {endpoint.base_url} failed: {exc}") from exc


def _with_retries(fn):
    return retry(
        retry=retry_if_exception_type(TRANSIENT),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.5, max=4),
        reraise=True,
    )(fn)


def build_embedder(settings: Settings) -> Embedder:
    """The embedder the settings ask for: a remote endpoint, or the bundled MiniLM."""
    endpoint = settings.endpoint("embedding")
    if endpoint.base_url:
        return OpenAIEmbedder(endpoint.base_url, endpoint.api_key, endpoint.model, settings.embedding_dim,
                              timeout_s=endpoint.timeout_s, batch_size=settings.embedding_batch_size)  # fmt: skip
    return LocalEmbedder(batch_size=settings.embedding_batch_size)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _record(trace: Trace | None, call: ModelCall, messages: list[dict], response: str) -> None:
    log.debug("model call %s", call)
    if trace is not None:
        trace.add("model_call", **asdict(call), messages=messages, response=response)
