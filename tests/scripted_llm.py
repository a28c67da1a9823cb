"""A scripted OpenAI-compatible server on loopback for tests.

Replies are keyed by prompt name (the ``X-Prompt-Name`` header the gateway sends).
A reply is a string or a function of the request body that returns a string.
Every request is kept, so tests can assert on what the model was given.
``/v1/embeddings`` answers deterministic vectors (prompt name ``"embeddings"``), and
:meth:`ScriptedLLM.fail_next` makes the next requests fail with an HTTP status.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: A reply: text, a function of the request body, or ``{"tool_calls": [{"name", "arguments"}]}``.
Reply = str | dict | Callable[[dict[str, Any]], "str | dict"]


class ScriptedLLM:
    """Serve ``/v1/chat/completions`` (plain and streamed) from a script.

    Attributes:
        replies: prompt name → reply; a missing name answers HTTP 400.
        requests: ``(prompt_name, body)`` of every request, in order.
        delay_s: pause between streamed tokens.
        embedding_dims: dimension of the vectors ``/v1/embeddings`` returns.
        stream_fault: how the next streamed replies break, None for not at all: ``"truncate"`` (the
            connection closes after half the tokens, without a finish reason or ``[DONE]``) or
            ``"hang"`` (the first token, then nothing for ``hang_s`` seconds).
        hang_s: how long a ``"hang"`` stream stays silent.
    """

    #: Prompt name under which ``/v1/embeddings`` requests are recorded.
    EMBEDDINGS = "embeddings"

    def __init__(self) -> None:
        self.replies: dict[str, Reply] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.delay_s = 0.0
        self.embedding_dims = 384
        self.stream_fault: str | None = None
        self.hang_s = 30.0
        self._failures: list[tuple[int, str | None]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        """Forget replies and requests (between tests)."""
        self.replies.clear()
        self.requests.clear()
        self.delay_s = 0.0
        self.embedding_dims = 384
        self.stream_fault = None
        self.hang_s = 30.0
        with self._lock:
            self._failures.clear()

    def fail_next(self, n: int, status: int, retry_after: float | None = None) -> None:
        """Answer the next ``n`` requests (any path, recorded as usual) with HTTP ``status``.

        Args:
            n: how many requests fail.
            status: the HTTP status, e.g. 429 or 503.
            retry_after: sent as ``Retry-After`` (seconds) when given.
        """
        with self._lock:
            self._failures.extend([(status, None if retry_after is None else str(retry_after))] * n)

    def _next_failure(self) -> tuple[int, str | None] | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    def prompts(self, name: str) -> list[dict[str, Any]]:
        """Bodies of the requests made with prompt ``name``."""
        return [body for n, body in self.requests if n == name]

    def _handler(self):
        script = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                self._json(200, {"status": "ok"} if self.path.endswith("health") else {"data": [{"id": "scripted"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                embeddings = self.path.rstrip("/").endswith("/embeddings")
                name = script.EMBEDDINGS if embeddings else self.headers.get("X-Prompt-Name", "")
                script.requests.append((name, body))
                failure = script._next_failure()
                if failure is not None:
                    status, retry_after = failure
                    headers = {"Retry-After": retry_after} if retry_after is not None else {}
                    self._json(status, {"error": {"message": f"scripted failure {status}"}}, headers)
                    return
                if embeddings:
                    self._json(200, _embeddings(body, script.embedding_dims))
                    return
                reply = script.replies.get(name)
                if reply is None:
                    self._json(400, {"error": {"message": f"no scripted reply for prompt {name!r}"}})
                    return
                text = reply(body) if callable(reply) else reply
                if isinstance(text, dict):
                    self._json(200, _tool_completion(text["tool_calls"], body))
                    return
                if body.get("stream"):
                    self._stream(text, body)
                else:
                    self._json(200, _completion(text, body))

            def _json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, text: str, body: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                tokens = [t + " " for t in text.split(" ")]
                tokens[-1] = tokens[-1][:-1]
                limit = body.get("max_tokens") or body.get("max_completion_tokens")
                finish = "length" if limit and len(tokens) > limit else "stop"  # one word counts as one token
                tokens = tokens[:limit] if finish == "length" else tokens
                fault = script.stream_fault
                try:
                    for n, token in enumerate(tokens):
                        if fault == "truncate" and n >= max(1, len(tokens) // 2):
                            self.close_connection = True
                            return  # the connection ends mid-answer: no finish reason, no [DONE]
                        self._event(
                            {
                                "id": "c",
                                "object": "chat.completion.chunk",
                                "created": 0,
                                "model": body.get("model"),
                                "choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}],
                            }
                        )
                        if fault == "hang":
                            time.sleep(script.hang_s)
                            return
                        if script.delay_s:
                            time.sleep(script.delay_s)
                    self._event(
                        {
                            "id": "c",
                            "object": "chat.completion.chunk",
                            "created": 0,
                            "model": body.get("model"),
                            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                        }
                    )
                    self._event(
                        {
                            "id": "c",
                            "object": "chat.completion.chunk",
                            "created": 0,
                            "model": body.get("model"),
                            "choices": [],
                            "usage": _usage(text, body),
                        }
                    )
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _event(self, payload: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.flush()

        return Handler


def _embeddings(body: dict, dims: int) -> dict:
    """Deterministic vectors: each text's SHA-256 repeated, as floats in [-1, 1)."""
    texts = body.get("input") or []
    texts = [texts] if isinstance(texts, str) else texts
    data = []
    for i, text in enumerate(texts):
        seed = hashlib.sha256(str(text).encode()).digest() * (dims // 32 + 1)
        data.append({"object": "embedding", "index": i, "embedding": [b / 128 - 1 for b in seed[:dims]]})
    return {"object": "list", "data": data, "model": body.get("model"), "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def _usage(text: str, body: dict) -> dict:
    prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    return {"prompt_tokens": prompt, "completion_tokens": len(text.split()), "total_tokens": prompt + len(text.split())}


def _completion(text: str, body: dict) -> dict:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": _usage(text, body),
    }


def _tool_completion(calls: list[dict], body: dict) -> dict:
    tool_calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)
    ]
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": tool_calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": _usage("", body),
    }


def capitalised_entities(body: dict[str, Any]) -> str:
    """A scripted Graph Extraction reply: every capitalised word (4+ letters) of the chunk is an entity,
    each linked to the next one; deterministic, so a re-upload gets the same graph."""
    text = body["messages"][-1]["content"].split("Text:")[-1]
    names = list(dict.fromkeys(re.findall(r"\b([A-Z][a-z]{3,})\b", text)))
    entities = [{"name": n, "type": "CONCEPT", "description": f"{n} as the text names it.", "aliases": []} for n in names]
    relationships = [
        {"source": a, "target": b, "description": f"{a} and {b} appear together.", "strength": 5}
        for a, b in itertools.pairwise(names)
    ]
    return json.dumps({"entities": entities, "relationships": relationships})
