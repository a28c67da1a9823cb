"""The model gateway: the one module through which every model call goes.

It maps a role to its endpoint, retries transient errors (connection, timeout,
HTTP 408, 429 and 5xx; never a bad request) under one :class:`RetryPolicy`, bounds
concurrency per endpoint, streams, and records model, tokens and duration of every
call into the caller's :class:`Trace` (the DEV-report hook).

Every model call goes through :meth:`ModelGateway._call`: chat, streamed chat (until
its first token), structured output, tool calls and embeddings over HTTP. The openai
SDK's own retries are off (``max_retries=0`` on every client), so there is one policy.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, replace
from typing import TypeVar

import instructor
import numpy as np
import openai
from instructor.core.exceptions import InstructorError
from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from ragtopics.errors import ConfigurationError, ModelUnavailableError, StructuredOutputError
from ragtopics.llm.embedding import Embedder, LocalEmbedder, OpenAIEmbedder
from ragtopics.settings.env import ModelEndpoint, Settings
from ragtopics.tracing import metrics
from ragtopics.tracing.trace import Trace


def _transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP client errors a stream can raise mid-way (read timeout, cut connection): the openai client's
    transport (``httpx2`` in recent releases, ``httpx`` before) does not wrap them in ``openai.APIError``."""
    errors: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            errors.append(__import__(name).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


_TRANSPORT_ERRORS = _transport_errors()
#: What a stream can raise mid-way: the client's own errors and its transport's.
_STREAM_ERRORS: tuple[type[Exception], ...] = (openai.APIError, *_TRANSPORT_ERRORS)

log = logging.getLogger(__name__)

MAX_CONCURRENT_CALLS = 4
#: Distinct short texts whose vectors :meth:`ModelGateway.embed_short` keeps (about 1.5 KB each at 384 dims: 30 MB).
SHORT_VECTOR_CACHE_SIZE = 20_000


class TextVectorCache:
    """A bounded, thread-safe least-recently-used map of (embedding model, text) → vector.

    Args:
        size: most vectors kept (>= 0; 0 keeps none).
    """

    def __init__(self, size: int):
        self.size = max(int(size), 0)
        self._vectors: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, model: tuple, texts: list[str]) -> dict[str, np.ndarray]:
        """The cached vectors of those of ``texts`` that have one (each marked as recently used)."""
        found = {}
        with self._lock:
            for text in texts:
                vector = self._vectors.get((model, text))
                if vector is not None:
                    self._vectors.move_to_end((model, text))
                    found[text] = vector
        return found

    def put_many(self, model: tuple, pairs) -> None:
        """Keep ``(text, vector)`` pairs (read-only copies), dropping the least recently used beyond the size."""
        with self._lock:
            for text, vector in pairs:
                kept = np.array(vector, dtype=np.float32)
                kept.setflags(write=False)
                self._vectors[(model, text)] = kept
                self._vectors.move_to_end((model, text))
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)

    def __len__(self) -> int:
        return len(self._vectors)


#: Tokens llama.cpp looks back over for its repeat penalty on the bundled model (its server's default).
REPEAT_LAST_N = 64

#: Attempts per model call, the first included. Four attempts with waits of about
#: 0.5, 1 and 2 s ride out a model server restarting or a short overload (llama.cpp
#: and vLLM answer 503 while busy) without making a dead endpoint take long to report.
RETRY_ATTEMPTS = 4
#: First wait and cap of the exponential backoff (seconds; each wait gets up to 0.5 s of jitter).
RETRY_INITIAL_WAIT_S = 0.5
RETRY_MAX_WAIT_S = 8.0
#: A server's ``Retry-After`` is honoured up to this many seconds; a longer one means
#: "not soon", and the caller is better told now than after minutes of silence.
RETRY_AFTER_MAX_S = 30.0
#: HTTP statuses worth another attempt besides 5xx: request timeout, rate limit.
RETRY_STATUSES = frozenset({408, 429})

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long the gateway waits before trying a model call again.

    Attributes:
        attempts: attempts per call, the first included (>= 1).
        initial_wait_s: first backoff wait in seconds; it doubles per retry.
        max_wait_s: cap on one backoff wait in seconds.
        max_retry_after_s: a ``Retry-After`` (or ``retry-after-ms``) up to this many
            seconds replaces the backoff wait; a longer one is capped to it.
    """

    attempts: int = RETRY_ATTEMPTS
    initial_wait_s: float = RETRY_INITIAL_WAIT_S
    max_wait_s: float = RETRY_MAX_WAIT_S
    max_retry_after_s: float = RETRY_AFTER_MAX_S

    def retrying(self, label: str) -> Retrying:
        """A tenacity ``Retrying`` for one call to ``label`` (logged before each wait)."""
        backoff = wait_exponential_jitter(initial=self.initial_wait_s, max=self.max_wait_s, jitter=min(0.5, self.initial_wait_s))

        def wait(state: RetryCallState) -> float:
            after = retry_after_s(state.outcome.exception()) if state.outcome else None
            return min(after, self.max_retry_after_s) if after is not None else backoff(state)

        def before_sleep(state: RetryCallState) -> None:
            log.warning(
                "%s: attempt %s of %s failed (%s); retrying in %.1f s",
                label,
                state.attempt_number,
                self.attempts,
                _describe(state.outcome.exception() if state.outcome else None),
                state.upcoming_sleep,
            )

        return Retrying(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(self.attempts),
            wait=wait,
            before_sleep=before_sleep,
            reraise=True,
        )


def is_transient(exc: BaseException) -> bool:
    """Whether a model call that raised ``exc`` may succeed when tried again.

    True for connection errors and timeouts and for HTTP 408, 429 and 5xx; False for
    any other status (400 bad request, 401, 404 unknown model...) and non-HTTP errors.
    """
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError is one
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUSES or exc.status_code >= 500
    return False


def retry_after_s(exc: BaseException | None) -> float | None:
    """The wait in seconds a failed response asks for (``retry-after-ms`` or ``Retry-After`` seconds), or None."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:  # an HTTP date: rare from model servers, use the backoff
            return None
        return seconds if seconds >= 0 else None
    return None


@contextlib.contextmanager
def _outcome_counted(role: str) -> Iterator[None]:
    """Count the model call run inside the block by its outcome: ok, error, or stopped (the caller stopped reading)."""
    try:
        yield
    except GeneratorExit:
        metrics.count_model_call(role, "stopped")
        raise
    except BaseException:
        metrics.count_model_call(role, "error")
        raise
    metrics.count_model_call(role, "ok")


def _counted(role: str | None = None) -> Callable:
    """Count each call of a gateway method in the process's metrics, by role and outcome (ok, error, stopped).

    Args:
        role: the role counted; None for the method's first argument (its role).
    """

    def decorate(method: Callable) -> Callable:
        if inspect.isgeneratorfunction(method):

            @functools.wraps(method)
            def streamed(self, *args, **kwargs):
                with _outcome_counted(role or args[0]):
                    return (yield from method(self, *args, **kwargs))

            return streamed

        @functools.wraps(method)
        def plain(self, *args, **kwargs):
            with _outcome_counted(role or args[0]):
                return method(self, *args, **kwargs)

        return plain

    return decorate


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
        retry: the retry policy of every model call; :class:`RetryPolicy` defaults when omitted.
    """

    def __init__(self, settings: Settings, embedder: Embedder | None = None, *, retry: RetryPolicy | None = None):
        self.settings = settings
        self.embedder = embedder or build_embedder(settings)
        self.retry = retry or RetryPolicy()
        self._clients: dict[str, openai.OpenAI] = {}
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()
        self._short_vectors = TextVectorCache(SHORT_VECTOR_CACHE_SIZE)

    def endpoint(self, role: str, trace: Trace | None = None) -> ModelEndpoint:
        """The endpoint configured for ``role``, asking the model the run's Topic chose for it (``trace.model_overrides``)."""
        endpoint = self.settings.endpoint(role)
        model = trace.model_overrides.get(role) if trace is not None else None
        return replace(endpoint, model=model) if model else endpoint

    def _client(self, endpoint: ModelEndpoint) -> tuple[openai.OpenAI, threading.BoundedSemaphore]:
        with self._lock:
            key = f"{endpoint.base_url}|{endpoint.api_key}"
            if key not in self._clients:  # max_retries=0: the gateway's RetryPolicy is the only one
                self._clients[key] = openai.OpenAI(
                    base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=endpoint.timeout_s, max_retries=0
                )
        return self._clients[key], self._slot(endpoint.base_url or "")

    def _slot(self, base_url: str) -> threading.BoundedSemaphore:
        """The concurrency slots of one server (per base URL, shared by its roles and its embeddings)."""
        with self._lock:
            return self._slots.setdefault(base_url, threading.BoundedSemaphore(MAX_CONCURRENT_CALLS))

    def _call(self, label: str, request: Callable[[], T]) -> T:
        """Run one model request under the retry policy; the one place model errors are turned into ours.

        Args:
            label: ``"the language model at http://..."``, for logs and messages.
            request: sends the request; called once per attempt.

        Raises:
            ModelUnavailableError: a transient failure (connection, timeout, 408, 429, 5xx)
                outlasted :attr:`RetryPolicy.attempts`, or the server refused the
                request (any other HTTP status), naming ``label``.
        """
        try:
            return self.retry.retrying(label)(request)
        except openai.APIError as exc:
            raise ModelUnavailableError(_failure_message(label, exc, self.retry.attempts)) from exc

    @_counted()
    def chat(
        self,
        role: str,
        messages: list[dict],
        *,
        prompt_name: str,
        trace: Trace | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.2,
    ) -> ChatReply:
        """One chat completion.

        Args:
            role: model role.
            messages: OpenAI chat messages.
            prompt_name: the named prompt (sent as ``X-Prompt-Name``, recorded in the trace).

        Raises:
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        endpoint = self.endpoint(role, trace)
        client, slot = self._client(endpoint)
        max_tokens = max_tokens or self.settings.llm_max_tokens
        t0 = time.perf_counter()
        with slot:
            response = self._create(
                client, endpoint, messages, prompt_name, stream=False, max_tokens=max_tokens, temperature=temperature
            )
        usage = response.usage
        call = ModelCall(
            role,
            prompt_name,
            endpoint.model,
            getattr(usage, "prompt_tokens", 0) or 0,
            getattr(usage, "completion_tokens", 0) or 0,
            _ms(t0),
        )
        _record(trace, call, messages, response.choices[0].message.content or "")
        return ChatReply(text=response.choices[0].message.content or "", call=call)

    @_counted()
    def stream_chat(
        self,
        role: str,
        messages: list[dict],
        *,
        prompt_name: str,
        trace: Trace | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.2,
        tools: list[dict] | None = None,
    ) -> Generator[str, None, str | None]:
        """Stream a chat completion as text deltas.

        A failure before the first token is retried like any call; once a token has been
        yielded nothing is retried (the caller has already shown it).
        Closing the iterator early closes the HTTP stream and records the call as
        ``stopped`` (the server may still finish the generation in the background).
        The generator returns the finish reason (``"stop"``, or ``"length"`` when ``max_tokens``
        cut the answer): ``reason = yield from ...``. A stream that ends without one (a cut
        connection) raises, so half an answer is never taken for a whole one.

        Raises:
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        endpoint = self.endpoint(role, trace)
        client, slot = self._client(endpoint)
        max_tokens = max_tokens or self.settings.llm_max_tokens
        t0 = time.perf_counter()
        parts: list[str] = []
        usage = None
        stopped = True
        with slot:
            stream, head = self._create(
                client, endpoint, messages, prompt_name, stream=True, max_tokens=max_tokens, temperature=temperature, tools=tools
            )
            finish_reason = None
            try:
                for chunk in _chain(head, stream):
                    if chunk.usage is not None:
                        usage = chunk.usage
                    delta = chunk.choices[0].delta.content if chunk.choices else None
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish_reason = chunk.choices[0].finish_reason
                    if delta:
                        parts.append(delta)
                        yield delta
                if finish_reason is None:  # the connection ended mid-answer: never pass half an answer off as whole
                    raise ModelUnavailableError(
                        f"{_label(endpoint)} ended its stream before the answer was finished "
                        f"(after {len(parts)} piece(s), no finish reason)"
                    )
                stopped = False
            except _STREAM_ERRORS as exc:  # a read timeout or a cut connection mid-stream
                raise ModelUnavailableError(f"{_label(endpoint)} failed while streaming: {exc or type(exc).__name__}") from exc
            finally:
                stream.close()
                call = ModelCall(
                    role,
                    prompt_name,
                    endpoint.model,
                    getattr(usage, "prompt_tokens", 0) or 0,
                    getattr(usage, "completion_tokens", 0) or len(parts),
                    _ms(t0),
                    stopped=stopped,
                )
                _record(trace, call, messages, "".join(parts))
        return finish_reason

    @_counted()
    def structured(
        self,
        role: str,
        messages: list[dict],
        response_model: type[BaseModel],
        *,
        prompt_name: str,
        trace: Trace | None = None,
        max_tokens: int | None = 512,
    ) -> BaseModel:
        """One chat completion parsed into ``response_model`` (instructor, JSON-schema mode).

        JSON-schema mode makes llama.cpp and vLLM constrain their output to the schema;
        a reply that still does not parse is not retried (transport failures are).

        Raises:
            StructuredOutputError: when the reply does not fit ``response_model``.
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        endpoint = self.endpoint(role, trace)
        client, slot = self._client(endpoint)
        patched = instructor.from_openai(client, mode=instructor.Mode.JSON_SCHEMA)
        t0 = time.perf_counter()

        def request():
            try:
                return patched.chat.completions.create_with_completion(
                    model=endpoint.model,
                    messages=messages,
                    response_model=response_model,
                    max_retries=0,
                    max_tokens=max_tokens,
                    temperature=0.0,
                    extra_headers={"X-Prompt-Name": prompt_name},
                )
            except InstructorError as exc:  # instructor wraps transport errors; unwrap them for the retry policy
                cause = _api_error_in(exc)
                if cause is None:
                    raise
                raise cause from exc

        try:
            with slot:
                result, completion = self._call(_label(endpoint), request)
        except (ValidationError, InstructorError) as exc:
            _record(trace, ModelCall(role, prompt_name, endpoint.model, 0, 0, _ms(t0)), messages, f"unparsable: {exc}")
            raise StructuredOutputError(
                f"the {prompt_name} reply did not match {response_model.__name__}: {str(exc)[:300]}"
            ) from exc
        usage = completion.usage
        call = ModelCall(
            role,
            prompt_name,
            endpoint.model,
            getattr(usage, "prompt_tokens", 0) or 0,
            getattr(usage, "completion_tokens", 0) or 0,
            _ms(t0),
        )
        _record(trace, call, messages, result.model_dump_json())
        return result

    @_counted()
    def complete_with_tools(
        self, role: str, messages: list[dict], tools: list[dict], *, prompt_name: str, trace: Trace | None = None
    ) -> tuple[str, list[dict]]:
        """One non-streamed completion that may request tool calls.

        Returns:
            ``(text, tool_calls)`` where each tool call is ``{"id", "name", "arguments"}``
            (``arguments`` is the raw JSON string).

        Raises:
            ConfigurationError: when the role's model is not marked as supporting tools.
            ModelUnavailableError: when the endpoint is unreachable after retries or fails.
        """
        endpoint = self.endpoint(role, trace)
        if not endpoint.supports_tools:
            raise ConfigurationError(
                f"this Topic is connected to other Topics (MCP Interfaces), which needs a tool-capable language model; "
                f"{endpoint.model} is not marked as one. Set LLM_SUPPORTS_TOOLS=true for a model that supports "
                "OpenAI tool calls, or remove the connected Topics."
            )
        client, slot = self._client(endpoint)
        t0 = time.perf_counter()
        with slot:
            response = self._create(
                client,
                endpoint,
                messages,
                prompt_name,
                stream=False,
                max_tokens=self.settings.llm_max_tokens,
                temperature=0.2,
                tools=tools,
            )
        message = response.choices[0].message
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments or "{}"} for c in (message.tool_calls or [])
        ]
        usage = response.usage
        call = ModelCall(
            role,
            prompt_name,
            endpoint.model,
            getattr(usage, "prompt_tokens", 0) or 0,
            getattr(usage, "completion_tokens", 0) or 0,
            _ms(t0),
        )
        _record(trace, call, messages, (message.content or "") + (f" tool_calls={calls}" if calls else ""))
        return message.content or "", calls

    @_counted("embedding")
    def embed(
        self, texts: list[str], *, trace: Trace | None = None, purpose: str = "embedding", short: bool = False
    ) -> np.ndarray:
        """Embed texts with the configured embedding model.

        An embedder behind an HTTP endpoint (``embedder.base_url`` set) sends each batch
        under this gateway's retry policy and the endpoint's concurrency slots. ``short``: the
        texts are short phrases (:meth:`~ragtopics.llm.embedding.Embedder.embed`).

        Returns:
            Shape ``(len(texts), dims)`` float32, unit rows.

        Raises:
            ModelUnavailableError: when the embedding model is unreachable after retries or fails.
        """
        t0 = time.perf_counter()
        base_url = self.embedder.base_url
        if base_url:
            label, slot = f"the embedding model at {base_url}", self._slot(base_url)

            def send(request: Callable[[], np.ndarray]) -> np.ndarray:
                with slot:
                    return self._call(label, request)

            vectors = self.embedder.embed(texts, send=send, short=short)
        else:
            vectors = self.embedder.embed(texts, short=short)
        call = ModelCall("embedding", purpose, self.embedder.model, 0, 0, _ms(t0), items=len(texts))
        if trace is not None:
            trace.add("model_call", **asdict(call))
        return vectors

    def embed_short(self, texts: list[str], *, trace: Trace | None = None, purpose: str = "embedding") -> np.ndarray:
        """:meth:`embed` for short texts that recur (entity names, deduplication's descriptions): each distinct
        text is embedded once per process and embedding model, then taken from a bounded cache.

        A GraphRAG upload compares its entities with the stored ones they may merge with, whose
        descriptions come back upload after upload (on the HotpotQA passages 15 % of deduplication's
        texts had been embedded before, and 14 % were repeated within one call). Only the texts not
        cached go to the model, in one call (none when all are cached; its trace records only those).

        Returns:
            Shape ``(len(texts), dims)`` float32, unit rows, in the order of ``texts``.

        Raises:
            ModelUnavailableError: when the embedding model is unreachable after retries or fails.
        """
        model = (self.embedder.base_url or "", self.embedder.model)
        found = self._short_vectors.get_many(model, texts)
        todo = list(dict.fromkeys(t for t in texts if t not in found))
        if todo:
            vectors = self.embed(todo, trace=trace, purpose=purpose, short=True)
            found.update(zip(todo, vectors))
            self._short_vectors.put_many(model, zip(todo, vectors))
        if not texts:
            return np.zeros((0, self.embedder.dims), dtype=np.float32)
        return np.vstack([found[t] for t in texts]).astype(np.float32, copy=False)

    def _create(
        self,
        client: openai.OpenAI,
        endpoint: ModelEndpoint,
        messages: list[dict],
        prompt_name: str,
        *,
        stream: bool,
        max_tokens: int | None,
        temperature: float,
        tools: list[dict] | None = None,
    ):
        """A chat completion; for ``stream=True``, ``(stream, chunks read up to the first token)``."""
        extra: dict = {"stream_options": {"include_usage": True}} if stream else {}
        if tools:
            extra["tools"] = tools
        if endpoint.is_local:  # the bundled model's generation settings (llama.cpp's own request fields)
            extra["extra_body"] = {"repeat_penalty": self.settings.local_llm_repeat_penalty, "repeat_last_n": REPEAT_LAST_N}
            if self.settings.local_llm_temperature is not None:
                temperature = self.settings.local_llm_temperature

        def request():
            response = client.chat.completions.create(
                model=endpoint.model,
                messages=messages,
                stream=stream,
                max_tokens=max_tokens,
                temperature=temperature,
                extra_headers={"X-Prompt-Name": prompt_name},
                **extra,
            )
            return _read_to_first_token(response) if stream else response

        return self._call(_label(endpoint), request)


def _label(endpoint: ModelEndpoint) -> str:
    """``"the language model at http://..."``: how messages and logs name an endpoint."""
    return f"the {endpoint.role.replace('_', ' ')} at {endpoint.base_url}"


def _failure_message(label: str, exc: openai.APIError, attempts: int) -> str:
    """The operator's message for a model call that failed for good."""
    if not is_transient(exc):
        return f"{label} failed: {exc}"
    if isinstance(exc, openai.APIConnectionError):
        return f"{label} is not reachable ({type(exc).__name__}, {attempts} attempts); is the model server running?"
    return f"{label} failed after {attempts} attempts: {_describe(exc)}"


def _describe(exc: BaseException | None) -> str:
    """``HTTP 503: overloaded`` for a status error, else the exception's type."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {str(exc)[:200]}"
    return type(exc).__name__


def _api_error_in(exc: BaseException) -> openai.APIError | None:
    """The openai error an instructor error wraps (its cause chain, or its ``failed_attempts``), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, openai.APIError):
            return seen
        seen = seen.__cause__ or seen.__context__
    for attempt in getattr(exc, "failed_attempts", None) or []:
        if isinstance(getattr(attempt, "exception", None), openai.APIError):
            return attempt.exception
    return None


def _read_to_first_token(stream):
    """Read a chat stream up to its first text delta, so a failure before it can be retried.

    Returns:
        ``(stream, chunks read so far)``; the stream is closed when reading fails.
    """
    head = []
    try:
        for chunk in stream:
            head.append(chunk)
            if chunk.choices and chunk.choices[0].delta.content:
                break
    except BaseException:
        stream.close()
        raise
    return stream, head


def _chain(head: list, stream) -> Iterator:
    yield from head
    yield from stream


def build_embedder(settings: Settings) -> Embedder:
    """The embedder the settings ask for: a remote endpoint, or the bundled MiniLM."""
    endpoint = settings.endpoint("embedding")
    if endpoint.base_url:
        return OpenAIEmbedder(
            endpoint.base_url,
            endpoint.api_key,
            endpoint.model,
            settings.embedding_dim,
            timeout_s=endpoint.timeout_s,
            batch_size=settings.embedding_batch_size,
        )
    return LocalEmbedder(batch_size=settings.embedding_batch_size)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _record(trace: Trace | None, call: ModelCall, messages: list[dict], response: str) -> None:
    log.debug("model call %s", call)
    metrics.count_tokens(call.role, call.prompt_tokens, call.completion_tokens)
    if trace is not None:
        trace.add("model_call", **asdict(call), messages=messages, response=response)
