"""The console's web server: the product's own FastAPI app, with Gradio mounted in it, and who may reach what.

Every request passes :class:`AccessMiddleware` first. It finds the caller from the session
cookie (a browser that logged in at ``/login``) or from ``Authorization: Bearer <API token>``
(programs: MCP clients, ``gradio_client``), and refuses everything else except the login page and
the pages of a demo link (:data:`PUBLIC_PATTERNS`, which check the link's token themselves):
a browser is sent to ``/login``, a program gets 401. That covers Gradio's pages, its API and
upload routes, the MCP server and the source-file links alike. A Gradio session hash or event id
that another user first used is refused too (:mod:`ragtopics.ui.session_binding`).

What a caller may *do* is checked per event: :func:`guard_events` wraps every Gradio event
function with the role its page needs (:data:`ROLE_OF_PAGE`), so an event fired by hand
through the API is refused on the server even when the page is hidden from that user.

With no admin in the user table the console is in *open mode*: no login, every caller is
:data:`~ragtopics.access.users.LOCAL_USER`, and the server listens on loopback only.
"""

from __future__ import annotations

import contextvars
import functools
import html
import inspect
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from ipaddress import ip_address
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
import gradio as gr
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from gradio import networking
from gradio import utils as gr_utils

from ragtopics.access import sessions, users
from ragtopics.access.context import SCOPE_USER, acting_username, caller_of
from ragtopics.access.users import LOCAL_USER, User
from ragtopics.errors import STORE_DOWN_MESSAGE, AccessDeniedError, RagTopicsError, is_store_outage
from ragtopics.runtime import Runtime
from ragtopics.ui import session_binding

log = logging.getLogger(__name__)

#: Health checks for container platforms: served without finding the caller (they answer with no data,
#: and must answer while a store is down).
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
#: Paths anyone may open: the login form and logging out, and the health checks.
PUBLIC_PATHS = frozenset({"/login", "/logout"}) | PROBE_PATHS
#: Paths anyone may reach without a caller, as patterns: only the demo pages of a demo link
#: (:mod:`ragtopics.ui.demo_page`), which check the link's token themselves and can only ask its Topic.
PUBLIC_PATTERNS = (
    re.compile(r"/demo/[A-Za-z0-9_-]{1,100}"),
    re.compile(r"/demo/[A-Za-z0-9_-]{1,100}/ask"),
    re.compile(r"/demo/[A-Za-z0-9_-]{1,100}/files/[A-Za-z0-9_.-]{1,4000}"),
)
#: Failed logins per username and client address before the login is refused for a while.
MAX_FAILED_LOGINS = 10
#: Seconds the failed-login count is kept (and a blocked login stays blocked).
FAILED_LOGIN_WINDOW_S = 900
#: Hosts that count as loopback, where open mode may serve.
LOOPBACK = ("127.0.0.1", "localhost", "::1")

_acting_user: contextvars.ContextVar[User | None] = contextvars.ContextVar("ragtopics_user", default=None)


def acting_user() -> User | None:
    """The user on whose behalf the current event runs (None outside a console event: CLI, worker)."""
    return _acting_user.get()


def is_open_mode(rt: Runtime) -> bool:
    """Whether the console runs without login: no admin exists, and none has since the console started.

    Once an admin exists, login stays required for the life of the process, even if every admin
    were then removed (such a console answers nobody rather than everybody).
    """
    if getattr(rt, "_login_required", False):
        return False
    if users.has_admin(rt):
        rt._login_required = True
        return False
    return True


def _bearer(authorization: str | None) -> str | None:
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    return None


def resolve_caller(rt: Runtime, *, authorization: str | None, session_id: str | None) -> User | None:
    """The user behind a request, from its API token or its session cookie; None when there is neither.

    In open mode every caller is :data:`LOCAL_USER`.
    """
    if is_open_mode(rt):
        return LOCAL_USER
    token = _bearer(authorization)
    if token is not None:
        return users.user_of_token(rt, token)
    username = sessions.session_user(rt, session_id)
    return users.get_user(rt, username) if username else None


def _cookie(raw: str | None, name: str) -> str | None:
    if not raw:
        return None
    jar = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:
        return None
    return jar[name].value if name in jar else None


class AccessMiddleware:
    """ASGI middleware: identify the caller of every HTTP and websocket request, refuse the anonymous.

    Args:
        app: the ASGI app behind it.
        rt: the runtime whose user table and sessions decide.
    """

    def __init__(self, app, rt: Runtime):
        self.app = app
        self.rt = rt

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("path", "/")
        if path in PROBE_PATHS:
            return await self.app(scope, receive, send)
        try:
            user = await anyio.to_thread.run_sync(
                functools.partial(
                    resolve_caller,
                    self.rt,
                    authorization=headers.get("authorization"),
                    session_id=_cookie(headers.get("cookie"), sessions.SESSION_COOKIE),
                )
            )
        except Exception as exc:
            if not is_store_outage(exc):
                log.exception("could not check the caller of %s", path)
            return await _refuse(scope, receive, send, 503, STORE_DOWN_MESSAGE)
        scope[SCOPE_USER] = user
        refusal = _cross_site(scope, headers) or (_foreign_host(headers) if user is LOCAL_USER else None)
        if refusal:
            return await _refuse(scope, receive, send, 403, refusal)
        if user is not None and user is not LOCAL_USER:  # open mode has one user: there is nobody to bind to
            try:
                refusal, receive, send = await session_binding.guard_client_ids(self.rt, scope, receive, send, user)
            except Exception as exc:
                if not is_store_outage(exc):
                    log.exception("could not check the session hash of %s", path)
                return await _refuse(scope, receive, send, 503, STORE_DOWN_MESSAGE)
            if refusal:
                return await _refuse(scope, receive, send, 403, refusal)
            return await self.app(scope, receive, send)
        if user is not None:
            return await self.app(scope, receive, send)
        if path in PUBLIC_PATHS or (scope["type"] == "http" and is_public_pattern(path)):
            return await self.app(scope, receive, send)
        if scope["type"] == "http" and scope.get("method") == "GET" and "text/html" in headers.get("accept", ""):
            target = path + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
            response = RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
            return await response(scope, receive, send)
        return await _refuse(
            scope,
            receive,
            send,
            401,
            "Not logged in (or the session ended): reload the page to log in. "
            "Programs send an API token (Admin → Users) as a Bearer token.",
        )


def is_public_pattern(path: str) -> bool:
    """Whether ``path`` is one of :data:`PUBLIC_PATTERNS` (a demo page), served without a caller."""
    return any(p.fullmatch(path) for p in PUBLIC_PATTERNS)


#: Methods that change nothing, which another site may send (a link, an image).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _cross_site(scope, headers: dict[str, str]) -> str | None:
    """Why a state-changing request (or a websocket) from another site is refused, or None (CSRF defence).

    A browser names the page that sent a request in ``Origin`` (and ``Sec-Fetch-Site``); it must be
    this console itself. Programs (``gradio_client``, MCP clients) send neither and pass.
    """
    if scope["type"] == "http" and scope.get("method") in SAFE_METHODS:
        return None
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return f"cross-site request refused ({fetch_site})"
    origin = headers.get("origin")
    here = headers.get("x-forwarded-host") or headers.get("host", "")  # behind a proxy: the host the browser used
    if origin and origin != "null" and urlsplit(origin).netloc != here:
        return f"cross-site request refused (from {origin})"
    return None


def _foreign_host(headers: dict[str, str]) -> str | None:
    """In open mode, a request addressed to a host name other than this machine's (DNS rebinding) is refused."""
    host = urlsplit("//" + headers.get("host", "")).hostname or ""
    return None if is_loopback(host) else f"this console serves only 127.0.0.1 until an admin exists (Host {host!r})"


async def _refuse(scope, receive, send, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4401 if status == 401 else 1013, "reason": message[:120]})
        return
    from ragtopics.api.errors import error_body, is_api_path  # the API's clients read OpenAI's error shape

    body = error_body(status, message) if is_api_path(scope.get("path", "")) else {"error": message}
    await JSONResponse(body, status_code=status)(scope, receive, send)


# ---------------------------------------------------------------------------------------------- events


#: The role each page's events need; ``console`` holds the events of the console's frame (its load event).
ROLE_OF_PAGE = {
    "topics": "operator",
    "upload": "operator",
    "chat": "viewer",
    "prompts": "operator",
    "qa": "operator",
    "graph": "viewer",
    "logs": "operator",
    "admin": "admin",
    "dev_reports": users.DEV_REPORTING,
    "mcp": "viewer",
    "demo_links": "operator",
    "graph_corrections": "operator",
    "console": "viewer",
}
#: What an event registered outside every :meth:`EventRoles.page` needs: a new event is denied (to all but
#: admins) until it is given a page.
UNLISTED_EVENT_ROLE = "admin"


@dataclass
class EventRoles:
    """Which role each Gradio event of a Blocks app needs, recorded while the pages are built.

    Use :meth:`page` around a page's build: every event registered inside needs that page's role.
    """

    blocks: gr.Blocks
    needs: dict[int, str] = field(default_factory=dict)

    @contextmanager
    def page(self, name: str) -> Iterator[None]:
        """Record the events registered inside the block as needing ``ROLE_OF_PAGE[name]``."""
        before = set(self.blocks.fns)
        yield
        for fn_id in set(self.blocks.fns) - before:
            self.needs.setdefault(fn_id, ROLE_OF_PAGE[name])


def guard_events(rt: Runtime, blocks: gr.Blocks, needs: dict[int, str]) -> int:
    """Wrap every event function of ``blocks`` so that it runs only for a caller with the role it needs.

    An event missing from ``needs`` (registered outside every page) needs :data:`UNLISTED_EVENT_ROLE`.
    The wrapper takes the :class:`gr.Request` as an extra first parameter (Gradio fills it in),
    finds the caller from the request's token or cookie, raises :class:`gr.Error` with the
    reason when the caller may not, and otherwise runs the event with :func:`acting_user` set.

    Returns:
        How many event functions were wrapped.
    """
    wrapped = 0
    for fn_id, block_fn in blocks.fns.items():
        if block_fn.fn is None or getattr(block_fn.fn, "_ragtopics_guarded", False):
            continue
        need = needs.get(fn_id)
        if need is None:
            log.warning("console event %s (%s) is on no page's role list: only admins may run it", fn_id, block_fn.name)
            need = UNLISTED_EVENT_ROLE
        block_fn.fn = _guarded(rt, block_fn.fn, need)
        wrapped += 1
    return wrapped


def _check(rt: Runtime, request: gr.Request | None, need: str) -> User:
    if request is None:
        raise gr.Error("This event needs a request; it cannot be called here.")
    try:
        user = resolve_caller(
            rt, authorization=request.headers.get("authorization"), session_id=request.cookies.get(sessions.SESSION_COOKIE)
        )
        return users.require(user, need)
    except AccessDeniedError as exc:
        raise gr.Error(f"Not allowed: {exc}.") from None
    except RagTopicsError as exc:
        raise gr.Error(str(exc)) from None


@contextmanager
def _acting(user: User) -> Iterator[None]:
    """Run a block as ``user``: :func:`acting_user` answers it; links signed and chats started inside are theirs."""
    token, link_token = _acting_user.set(user), acting_username.set(None if user is LOCAL_USER else user.username)
    try:
        yield
    finally:
        acting_username.reset(link_token)
        _acting_user.reset(token)


def _guarded(rt: Runtime, fn: Callable, need: str) -> Callable:
    if inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn):
        raise TypeError(f"async event functions are not guarded yet: {fn!r}")
    if inspect.isgeneratorfunction(fn):

        def wrapper(_request, *args, **kwargs):
            user = _check(rt, _request, need)
            iterator = fn(*args, **kwargs)
            while True:
                with _acting(user):  # on every step: Gradio may resume the generator in another thread
                    try:
                        value = next(iterator)
                    except StopIteration:
                        return
                yield value
    else:

        def wrapper(_request, *args, **kwargs):
            user = _check(rt, _request, need)
            with _acting(user):
                return fn(*args, **kwargs)

    guarded: Any = functools.update_wrapper(wrapper, fn)  # Any: it also carries the attributes set below
    signature = inspect.signature(fn)
    first = inspect.Parameter("_request", inspect.Parameter.POSITIONAL_ONLY, annotation=gr.Request)
    guarded.__signature__ = signature.replace(parameters=[first, *signature.parameters.values()])
    # The original's own hints stay (a gr.Request parameter of its own is still filled in by Gradio).
    guarded.__annotations__ = {**gr_utils.get_type_hints(fn), "_request": gr.Request}
    guarded._ragtopics_guarded = True
    guarded._ragtopics_need = need
    return guarded


# ---------------------------------------------------------------------------------------------- pages


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
        f"<title>{html.escape(title)} · ragtopics</title></head>"
        f"<body style='font-family:system-ui,sans-serif;max-width:26em;margin:4em auto;padding:0 1em'>"
        f"<h2>ragtopics</h2>{body}</body></html>",
        status_code=status,
    )


def _login_form(next_path: str, message: str = "") -> str:
    note = f"<p role='alert' style='color:#b91c1c'>{html.escape(message)}</p>" if message else ""
    field_style = "display:block;width:100%;padding:6px;margin:4px 0 12px;box-sizing:border-box"
    return (
        f"{note}<form method='post' action='/login'>"
        f"<input type='hidden' name='next' value='{html.escape(next_path)}'>"
        f"<label>Username<input name='username' autocomplete='username' required style='{field_style}'></label>"
        f"<label>Password<input name='password' type='password' autocomplete='current-password' required "
        f"style='{field_style}'></label><button type='submit' style='padding:6px 16px'>Log in</button></form>"
    )


def open_mode_text() -> str:
    """What the console says while no admin exists."""
    return (
        "No admin exists yet, so the console needs no login and serves on 127.0.0.1 only. To require login "
        "(and to serve other machines or a share link), set ADMIN_USERNAME and ADMIN_PASSWORD in .env and "
        "restart, or run `ragtopics user add NAME --role admin`."
    )


def _safe_next(value: str | None) -> str:
    """A post-login target on this site only (no scheme, no host, no ``//``)."""
    value = value or "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


#: Failed logins of one account from every address before it is refused for a while (a locked-out account
#: recovers after FAILED_LOGIN_WINDOW_S; the per-address limit stops one guesser long before).
MAX_ACCOUNT_FAILURES = 50


#: Prefix of the failed-login counters: ``<prefix><address>:<account>`` and ``<prefix>account:<account>``.
FAILURES_PREFIX = "rt:login-failures:"


def _account(username: str) -> str:
    """The canonical form of a login name that the counters use (spaces and case ignored)."""
    return username.strip().casefold()[:64]


def _failure_keys(request: Request, username: str) -> tuple[str, str]:
    """Redis keys counting a login name's attempts: from this address, and from all addresses."""
    host = request.client.host if request.client else "?"
    account = _account(username)
    return f"{FAILURES_PREFIX}{host}:{account}", f"{FAILURES_PREFIX}account:{account}"


def unlock_logins(rt: Runtime, username: str) -> int:
    """Forget a login name's failed attempts (from every address); returns how many counters were removed."""
    account = _account(username)
    keys = [
        k
        for k in rt.redis.scan_iter(match=f"{FAILURES_PREFIX}*", count=1000)
        if (k.decode() if isinstance(k, bytes) else k).rsplit(":", 1)[-1] == account
    ]
    return int(rt.redis.delete(*keys)) if keys else 0


def add_access_routes(api: FastAPI, rt: Runtime) -> None:
    """Add ``/login`` (form and check) and ``/logout`` to the FastAPI app."""

    @api.get("/login", include_in_schema=False)
    def login_page(request: Request, next: str = "/"):
        if is_open_mode(rt):
            return _page("No login needed", f"<p>{html.escape(open_mode_text())}</p><p><a href='/'>Open the console</a></p>")
        return _page("Log in", _login_form(_safe_next(next)))

    @api.post("/login", include_in_schema=False)
    async def login(request: Request):
        form = await request.form()
        username, password = str(form.get("username", ""))[:200], str(form.get("password", ""))[:1000]
        target = _safe_next(str(form.get("next", "/")))
        if is_open_mode(rt):
            return RedirectResponse("/", status_code=303)
        keys = _failure_keys(request, username)
        with rt.redis.pipeline() as pipe:  # counted before the check, atomically: parallel guesses cannot slip through
            for key in keys:
                pipe.incr(key)
                pipe.expire(key, FAILED_LOGIN_WINDOW_S)
            here, _, everywhere, _ = pipe.execute()
        if here > MAX_FAILED_LOGINS or everywhere > MAX_ACCOUNT_FAILURES:
            return _page(
                "Log in", _login_form(target, f"Too many failed logins; try again in {FAILED_LOGIN_WINDOW_S // 60} minutes."), 429
            )
        try:
            user = await anyio.to_thread.run_sync(users.authenticate, rt, username, password)
        except AccessDeniedError:
            return _page("Log in", _login_form(target, "Wrong username or password."), 401)
        rt.redis.delete(*keys)
        response = RedirectResponse(target, status_code=303)
        secure = request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"
        response.set_cookie(
            sessions.SESSION_COOKIE,
            sessions.start_session(rt, user.username),
            max_age=rt.settings.session_ttl_s,
            httponly=True,
            samesite="lax",
            secure=secure,
            path="/",
        )
        log.info("login: %s (%s)", user.username, user.role)
        return response

    @api.post("/logout", include_in_schema=False)  # POST only: a link on another site cannot log anyone out
    def logout(request: Request):
        sessions.end_session(rt, request.cookies.get(sessions.SESSION_COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(sessions.SESSION_COOKIE, path="/")
        return response


def auth_dependency(request: Request) -> str | None:
    """Gradio's view of the caller: the username the middleware found (Gradio then fills ``gr.Request.username``)."""
    user = caller_of(request)
    return user.username if user is not None else None


# ---------------------------------------------------------------------------------------------- server


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only."""
    if host in LOOPBACK:
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ConsoleServer:
    """A running console: the uvicorn server in its thread, and where it can be reached.

    Attributes:
        blocks: the Gradio app mounted at ``/``.
        api: the FastAPI app that serves it.
        local_url: ``http://host:port/``.
        share_url: the public share link, or None.
        notices: what the operator was told at start (open mode, share link refused or failed).
    """

    blocks: gr.Blocks
    api: FastAPI
    server: uvicorn.Server
    thread: threading.Thread
    local_url: str
    share_url: str | None = None
    notices: list[str] = field(default_factory=list)

    def close(self) -> None:
        """Stop serving and wait for the server thread (at most 10 s)."""
        self.server.should_exit = True
        self.thread.join(timeout=10)
        with suppress(Exception):
            self.blocks.close()


def serve(api: FastAPI, blocks: gr.Blocks, *, host: str, port: int) -> ConsoleServer:
    """Run ``api`` with uvicorn in a daemon thread; returns once it accepts connections.

    Raises:
        RagTopicsError: the server did not start within 30 s (the port is taken, for instance).
    """
    config = uvicorn.Config(
        api, host=host, port=port, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="console-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RagTopicsError(f"the console could not listen on {host}:{port} (is the port taken?)")
        time.sleep(0.05)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return ConsoleServer(blocks, api, server, thread, f"http://{shown}:{port}/")


def open_share_link(port: int) -> str:
    """Ask Gradio's share service for a public link to ``127.0.0.1:port``.

    Raises:
        RuntimeError (or OSError): the share service cannot be reached (no internet).
    """
    return networking.setup_tunnel("127.0.0.1", port, secrets.token_urlsafe(32), None, None)
