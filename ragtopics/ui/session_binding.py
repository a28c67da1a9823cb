"""Gradio's session hashes and event ids, bound to the console user who first used them.

Gradio keys a browser tab's (or a program's) events, their results and its ``gr.State`` by a
``session_hash`` the client makes up, and an event's results by its event id; it does not tie
either to the logged-in user. :class:`~ragtopics.ui.web.AccessMiddleware` therefore calls
:func:`guard_client_ids` for every request under ``/gradio_api/`` once it knows the caller:

- a session hash, wherever the request carries it (the ``session_hash`` query parameter, the
  path of ``heartbeat/<hash>`` and ``GET stream/<hash>/…``, a POST body's ``session_hash``), is
  bound to the first user who sends it, and refused to anyone else;
- an event id the console hands out (the reply of ``queue/join`` and ``call/<api>``) is bound to
  the caller before the reply leaves, and one a request names (``call/<api>/<event_id>``,
  ``POST stream/<event_id>``, a POST body's ``event_id``) must be the caller's: an event id never
  handed out to them is refused.

Every POST body but a multipart one is read as JSON whatever its ``Content-Type`` says (Gradio's
``component_server`` reads any body but a multipart one as JSON, and FastAPI versions differ on a
body sent without the header), so leaving the header out or naming another type hides no session hash. A multipart body is
read only by ``upload`` (which names no session) and ``component_server``; the latter is refused
in multipart form, since its session hash would sit in a form field (no component of the console
calls it that way).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import anyio

from ragtopics.access import sessions
from ragtopics.access.users import LOCAL_USER, User
from ragtopics.runtime import Runtime

log = logging.getLogger(__name__)

#: Where Gradio's API routes live (Gradio is mounted at ``/``).
GRADIO_API = "/gradio_api/"
#: Routes whose path holds a session hash right after their name (``stream`` only for GET: a POST there names an event).
HASH_IN_PATH = ("heartbeat", "stream")
#: Routes that read a multipart body's fields as the request (a session hash among them): refused in that form.
MULTIPART_REFUSED = ("component_server",)
#: What a refused multipart request to one of :data:`MULTIPART_REFUSED` is told.
MULTIPART_REFUSAL = "send this request as JSON: a multipart body's session hash is not accepted here"
#: The owner recorded for the open-mode user (no username can contain ``*``).
OPEN_MODE_OWNER = "*open"
#: What a refused request is told.
REFUSED = "this Gradio session or event belongs to another user; reload the page"

Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def owner_of(user: User) -> str:
    """The owner a session hash of ``user``'s is bound to: the username, or :data:`OPEN_MODE_OWNER` in open mode."""
    return OPEN_MODE_OWNER if user is LOCAL_USER else user.username


async def guard_client_ids(
    rt: Runtime, scope: dict, receive: Receive, send: Send, user: User
) -> tuple[str | None, Receive, Send]:
    """Check the session hashes and event ids of a Gradio API request against ``user``.

    Args:
        rt: the runtime whose Redis holds the bindings.
        scope, receive, send: the ASGI request (a JSON body is read here, then replayed to the app).
        user: the caller the access middleware found.

    Returns:
        ``(refusal, receive, send)``: the reason to refuse the request (None to serve it), and the
        ``receive``/``send`` to pass on (the body replayed; a reply's event id bound on its way out).
    """
    path = scope.get("path", "")
    if not path.startswith(GRADIO_API) or path.startswith(GRADIO_API + "mcp"):
        return None, receive, send
    owner = owner_of(user)
    parts = path[len(GRADIO_API) :].strip("/").split("/")
    hashes = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_hash", [])
    event_ids: list[str] = []
    method = scope.get("method")
    if parts[0] in HASH_IN_PATH and len(parts) > 1:
        (event_ids if parts[0] == "stream" and method == "POST" else hashes).append(parts[1])
    if scope["type"] == "http" and method == "GET" and parts[0] == "call" and len(parts) >= 3:
        event_ids.append(parts[-1])  # call/<api>/<event_id> or call/v2/<api>/<event_id>
    if scope["type"] == "http" and method == "POST" and _is_multipart(scope):
        if parts[0] in MULTIPART_REFUSED:
            log.warning("refused a multipart %s for %s", path, owner)
            return MULTIPART_REFUSAL, receive, send
    elif scope["type"] == "http" and method == "POST":  # JSON, or sent as something else but read as JSON all the same
        body, receive = await _read_body(receive)
        fields = _json_fields(body)
        hashes += [fields["session_hash"]] if isinstance(fields.get("session_hash"), str) else []
        event_ids += [fields["event_id"]] if isinstance(fields.get("event_id"), str) else []
    refusal = await anyio.to_thread.run_sync(_refusal, rt, owner, hashes, event_ids)
    if refusal:
        log.warning("refused %s %s for %s: %s", method, path, owner, refusal)
        return refusal, receive, send
    if method == "POST" and (parts[0] == "call" or parts[:2] == ["queue", "join"]):
        send = _binding_event_ids(rt, owner, send)
    return None, receive, send


def _refusal(rt: Runtime, owner: str, hashes: list[str], event_ids: list[str]) -> str | None:
    for session_hash in filter(None, hashes):
        if not sessions.claim_client_session(rt, session_hash, owner):
            return REFUSED
    for event_id in filter(None, event_ids):
        if not sessions.claim_client_session(rt, event_id, owner, bind=False):
            return REFUSED
    return None


def _is_multipart(scope: dict) -> bool:
    """Whether the request's body is ``multipart/…`` (a form with files), which is not read here."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-type":
            return value.strip().lower().startswith(b"multipart/")
    return False


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a ``receive`` that gives it to the app again."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client left: let the app see it
            return b"", _replay([message], receive)
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks), _replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}], receive)


def _replay(messages: list[dict], receive: Receive) -> Receive:
    async def replayed() -> dict:
        return messages.pop(0) if messages else await receive()

    return replayed


def _json_fields(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:  # not JSON after all: Gradio answers it with its own error
        return {}
    return value if isinstance(value, dict) else {}


def _binding_event_ids(rt: Runtime, owner: str, send: Send) -> Send:
    """A ``send`` that binds the event id of a JSON reply (``{"event_id": ...}``) to ``owner`` before it leaves."""
    held: list[dict] = []

    async def sending(message: dict) -> None:
        if message["type"] != "http.response.body":
            held.append(message)  # the start is held back until the body is read: a reply is small
            return
        if message.get("more_body"):
            held.append(message)
            return
        body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body") + message.get("body", b"")
        event_id = _json_fields(body).get("event_id")
        if isinstance(event_id, str) and event_id:
            await anyio.to_thread.run_sync(sessions.claim_client_session, rt, event_id, owner)
        for earlier in held:
            await send(earlier)
        held.clear()
        await send(message)

    return sending
