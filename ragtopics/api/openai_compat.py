"""Every Topic as an OpenAI-compatible model: ``GET /v1/models`` and ``POST /v1/chat/completions``.

A chat front end that speaks OpenAI's API (Open WebUI, LibreChat, the ``openai`` SDK) lists the
Topics as models and chats with one by its name. The answer comes from the Topic's own pipeline
(:func:`ragtopics.answer.turn.ask`: routing, retrieval, citations), streamed as
``chat.completion.chunk`` events or whole. The text cites files by name (``[manual.pdf]``), and
the response carries the sources in an extra field, ``sources``: ``[{"file", "score", "link",
...}]`` (the CLI's and MCP's source shape; ``link`` absolute).

The messages sent are the conversation: the last one is the question, the earlier user and
assistant messages are its history. Each answer is saved as a turn of a chat of the caller, as
in the console; a conversation that continues one answered here continues the same chat, and
one that starts elsewhere is saved with its earlier messages first. System messages are not
used: the Topic's own system prompt applies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ragtopics.access import users
from ragtopics.access.context import acting_username, caller_of
from ragtopics.access.users import LOCAL_USER, User
from ragtopics.answer.history import new_session_id, save_turn, session_turns
from ragtopics.answer.turn import ChatUpdate, ask
from ragtopics.api import shapes
from ragtopics.api.errors import ApiError, api_error, error_body
from ragtopics.errors import AccessDeniedError
from ragtopics.runtime import Runtime
from ragtopics.storage import chats
from ragtopics.topics.topics import Topic, get_topic, list_topics
from ragtopics.tracing.metrics import observe_answer

log = logging.getLogger(__name__)

#: The role chatting with a Topic needs (the console's Chat page needs the same).
CHAT_ROLE = "viewer"
#: Redis key prefix: a conversation's digest → the chat it was saved in (so a follow-up continues it).
CONVERSATION_PREFIX = "rt:openai-chat:"
#: Seconds a conversation is remembered after its last answer.
CONVERSATION_TTL_S = 7 * 24 * 3600
#: Route recorded for an earlier turn that a client sent rather than one answered here.
SENT_TURN_REASON = "an earlier message of the conversation, sent by an API client"


class ChatMessage(BaseModel):
    """One message of an OpenAI chat request (content as text, or a list of ``{"type": "text", "text"}`` parts)."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message's text (its text parts joined; other parts are not read)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content or [] if p.get("type") == "text")


class ChatCompletionRequest(BaseModel):
    """The fields of an OpenAI chat completion request that a Topic uses (the others are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False


def require(request: Request, need: str = CHAT_ROLE) -> User:
    """The caller the access middleware found, when its role allows ``need``.

    Raises:
        ApiError: 401 without a caller, 403 for a role below ``need`` (the console's message).
    """
    user = caller_of(request)
    try:
        return users.require(user, need)
    except AccessDeniedError as exc:
        raise ApiError(401 if user is None else 403, f"Not allowed: {exc}.", "permission_denied") from None


@contextmanager
def acting_as(user: User) -> Iterator[None]:
    """Run a block for ``user``: chats saved and links signed inside are theirs (nobody's in open mode)."""
    token = acting_username.set(None if user is LOCAL_USER else user.username)
    try:
        yield
    finally:
        acting_username.reset(token)


def split_conversation(messages: list[ChatMessage]) -> tuple[str, list[tuple[str, str]]]:
    """The question (the last message, the user's) and the earlier exchanges as (question, answer) pairs.

    System, developer and tool messages are left out; user messages in a row count as one.

    Raises:
        ApiError: 400 when the last message is not a user's message with text.
    """
    said = [(m.role, m.text().strip()) for m in messages if m.role in ("user", "assistant")]
    if not said or said[-1][0] != "user" or not said[-1][1]:
        raise ApiError(400, "the last message must be the user's question, with text", "invalid_request")
    pairs: list[tuple[str, str]] = []
    asked: list[str] = []
    for role, text in said[:-1]:
        if role == "user":
            asked.append(text)
        elif asked:
            pairs.append(("\n\n".join(asked), text))
            asked = []
    question = "\n\n".join([*asked, said[-1][1]])
    return question, pairs


def _conversation_key(user: User, topic: Topic, pairs: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256(json.dumps([user.username, topic.id, pairs], ensure_ascii=False).encode()).hexdigest()
    return CONVERSATION_PREFIX + digest


def chat_for(rt: Runtime, user: User, topic: Topic, pairs: list[tuple[str, str]]) -> str | None:
    """The saved chat that holds exactly these earlier exchanges: the one they were answered in, or a new
    one with them saved first (None when there are none: the answer starts a chat of its own).

    Call inside :func:`acting_as` (the chat is the caller's).
    """
    if not pairs:
        return None
    known = rt.redis.get(_conversation_key(user, topic, pairs))
    if known is not None:
        session_id = known.decode() if isinstance(known, bytes) else known
        row = chats.get_session(rt.metadata, session_id)
        owner = acting_username.get()
        if (
            row is not None
            and row.topic_id == topic.id
            and (owner is None or row.owner == owner)
            and len(session_turns(rt, session_id)) == len(pairs)
        ):
            return session_id
    session_id = new_session_id()
    for question, answer in pairs:
        save_turn(
            rt,
            topic,
            session_id=session_id,
            question=question,
            answer=answer,
            sources=[],
            route="DIRECT",
            route_confidence=None,
            timings_ms={},
            route_reason=SENT_TURN_REASON,
        )
    return session_id


def remember(rt: Runtime, user: User, topic: Topic, pairs: list[tuple[str, str]], question: str, final: ChatUpdate) -> None:
    """Remember the chat a conversation was saved in, so that its next message (sending this answer back) continues it."""
    if final.session_id and final.turn_id is not None:
        rt.redis.set(_conversation_key(user, topic, [*pairs, (question, final.text)]), final.session_id, ex=CONVERSATION_TTL_S)


def _extra(final: ChatUpdate, base_url: str) -> dict:
    """The fields a response carries besides OpenAI's: sources, the way taken and the saved chat."""
    return {
        "sources": shapes.sources(final, base_url),
        "route": final.route,
        "session_id": final.session_id,
        "no_answer": final.no_answer,
    }


def completion(model: str, final: ChatUpdate, base_url: str) -> dict:
    """A whole answer as an OpenAI ``chat.completion`` object, with ``sources``."""
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": final.text}, "finish_reason": "stop"}],
        **_extra(final, base_url),
    }


def _chunk(chunk_id: str, model: str, delta: dict, finish_reason: str | None = None, **extra) -> str:
    body = {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        **extra,
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def stable_prefix(text: str) -> str:
    """The part of an answer so far that later updates will not change: up to an unclosed ``[`` (a
    citation code not yet turned into a file name)."""
    opened = text.rfind("[")
    return text[:opened] if opened > text.rfind("]") else text


def sse_events(
    model: str, updates: Generator[ChatUpdate, None, None], first: ChatUpdate, base_url: str, on_final
) -> Iterator[str]:
    """The streamed answer as server-sent events: ``chat.completion.chunk`` objects, then ``data: [DONE]``.

    Deltas only ever add text. The last chunk has ``finish_reason`` "stop" and the sources; an error
    after the stream started is sent as ``data: {"error": ...}``.

    Args:
        model: the Topic's name, as the client asked.
        updates: the rest of :func:`ask`'s updates (closed when the stream ends or the client leaves).
        first: the update already read (so errors before the answer are HTTP errors).
        base_url: this server's URL, for absolute source links.
        on_final: called with the final update (in the thread that read it), before it is sent.
    """
    chunk_id = "chatcmpl-" + uuid.uuid4().hex
    sent = ""
    try:
        yield _chunk(chunk_id, model, {"role": "assistant", "content": ""})
        update = first
        while True:
            if update.done:
                on_final(update)
                rest = update.text[len(sent) :] if update.text.startswith(sent) else "\n\n" + update.text
                if rest:  # a final answer that no longer extends what was shown (rare) follows it whole
                    yield _chunk(chunk_id, model, {"content": rest})
                yield _chunk(chunk_id, model, {}, "stop", **_extra(update, base_url))
                break
            shown = stable_prefix(update.text)
            if shown.startswith(sent) and len(shown) > len(sent):
                yield _chunk(chunk_id, model, {"content": shown[len(sent) :]})
                sent = shown
            update = next(updates)
    except Exception as exc:
        failure = api_error(exc)
        yield f"data: {json.dumps(error_body(failure.status, failure.message, failure.code), ensure_ascii=False)}\n\n"
    finally:
        updates.close()  # a client that left stops the answer (nothing is saved then)
    yield "data: [DONE]\n\n"


def stepped_as(user: User, updates: Generator[ChatUpdate, None, None]) -> Generator[ChatUpdate, None, None]:
    """``updates`` with each step run for ``user`` (each step may run in another thread)."""
    try:
        while True:
            with acting_as(user):
                try:
                    value = next(updates)
                except StopIteration:
                    return
            yield value
    finally:
        updates.close()


def final_update(first: ChatUpdate, stepped: Iterator[ChatUpdate]) -> ChatUpdate:
    """Run an answer to its end: the last of ``first`` and the ``stepped`` updates after it.

    Raises:
        ApiError: the answer failed (in the API's error shape).
    """
    final = first
    try:
        if not first.done:
            for final in stepped:  # noqa: B007 (the last update of the stream is the answer)
                pass
    except Exception as exc:
        raise api_error(exc) from None
    return final


def add_routes(api: FastAPI, rt: Runtime) -> None:
    """Add ``GET /v1/models`` and ``POST /v1/chat/completions``."""

    @api.get("/v1/models", tags=["openai"])
    def models(request: Request) -> dict:
        """The Topics the caller may chat with, as OpenAI models (``id`` is the Topic's name)."""
        require(request)
        try:
            topics = list_topics(rt)
        except Exception as exc:
            raise api_error(exc) from None
        return {
            "object": "list",
            "data": [
                {
                    "id": t.name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "ragtopics",
                    "kind": t.kind,
                    "description": t.description,
                }
                for t in topics
            ],
        }

    @api.post("/v1/chat/completions", tags=["openai"])
    async def chat_completions(request: Request, body: ChatCompletionRequest):
        """Ask the Topic named by ``model``; the answer streams as server-sent events when ``stream`` is true."""
        user = require(request)
        question, pairs = split_conversation(body.messages)
        base_url = str(request.base_url)

        def start() -> tuple[Topic, Generator[ChatUpdate, None, None], ChatUpdate]:
            with acting_as(user):
                try:
                    topic = get_topic(rt, body.model)
                except Exception as exc:
                    raise api_error(exc, not_found_code="model_not_found") from None
                try:
                    session_id = chat_for(rt, user, topic, pairs)
                    updates = ask(rt, topic, question, session_id=session_id)
                    first = next(updates)
                except Exception as exc:
                    raise api_error(exc) from None
            return topic, updates, first

        topic, updates, first = await anyio.to_thread.run_sync(start)
        stepped = stepped_as(user, updates)

        def on_final(final: ChatUpdate) -> None:
            observe_answer(topic.kind, final.route, final.timings_ms)
            remember(rt, user, topic, pairs, question, final)

        if body.stream:
            return StreamingResponse(
                sse_events(body.model, stepped, first, base_url, on_final),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )

        def finish() -> ChatUpdate:
            final = final_update(first, stepped)
            on_final(final)
            return final

        return JSONResponse(completion(body.model, await anyio.to_thread.run_sync(finish), base_url))
