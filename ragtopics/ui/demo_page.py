"""The demo pages under ``/demo/<token>``: one Topic's chat for whoever holds a demo link, without login.

These are the only routes the access middleware lets through without a caller
(:data:`ragtopics.ui.web.PUBLIC_PREFIXES`); their one capability is asking the link's Topic:

- ``GET /demo/<token>``: a small page (no Gradio) with the Topic's name, a line saying it is a
  demo, and a question box. It gives the visitor a cookie id for the per-visitor rate limit.
- ``POST /demo/<token>/ask``: ``{"question"}`` → ``{"answer", "sources": [{"file", "link"?}], "no_answer"}``;
  429 with ``Retry-After`` over a rate limit. Connected Topics are not offered as tools, and the
  turn is kept with the link (:func:`ragtopics.demo.links.record_turn`), not in users' chats.
- ``GET /demo/<token>/files/<file token>``: a cited source file, only when the link allows
  sources, and only through links made for this demo link's answers.

A revoked or expired link answers 410, an unknown one 404, each with a page that says so.
"""

from __future__ import annotations

import html
import json
import logging
import secrets

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from ragtopics.access.context import acting_username
from ragtopics.answer.turn import ask
from ragtopics.demo import links
from ragtopics.demo.links import DEMO_PREFIX, DemoLink, DemoLinkGone, RateLimited
from ragtopics.errors import STORE_DOWN_MESSAGE, RagTopicsError, is_store_outage
from ragtopics.runtime import Runtime
from ragtopics.storage.blobs import FileStoreError
from ragtopics.storage.links import LinkError
from ragtopics.ui.files_route import content_disposition, served_as

log = logging.getLogger(__name__)

#: The cookie that tells one visitor of a demo link from another (a random id, nothing else).
VISITOR_COOKIE = "rt_demo_visitor"
#: Longest question the page sends (the answer pipeline has its own limit too).
MAX_QUESTION_CHARS = 2000


def _headers(nonce: str | None = None) -> dict[str, str]:
    """Security headers of every demo response: nothing loads from elsewhere, the page is never framed,
    the token in the URL is sent nowhere (no referrer) and nothing is cached."""
    script = f"'nonce-{nonce}'" if nonce else "'none'"
    return {
        "Content-Security-Policy": f"default-src 'none'; script-src {script}; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
    }


def gone_page(gone: DemoLinkGone) -> HTMLResponse:
    """The page of a link that opens nothing: its heading and sentence, with its status (403, 404, 410 or 503)."""
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
        f"<title>{html.escape(gone.title)}</title></head><body style='font-family:system-ui,sans-serif;max-width:36em;"
        f"margin:4em auto;padding:0 1em'><h2>{html.escape(gone.title)}</h2><p>{html.escape(str(gone))}</p>"
        f"</body></html>"
    )
    return HTMLResponse(body, status_code=gone.status, headers=_headers())


def _visitor(request: Request) -> tuple[str, str | None]:
    """(the visitor's id, a new cookie id to set or None): the cookie's id, else the client's address."""
    cookie = request.cookies.get(VISITOR_COOKIE, "")
    if 16 <= len(cookie) <= 64 and cookie.replace("-", "").replace("_", "").isalnum():
        return f"cookie:{cookie}", None
    fresh = secrets.token_urlsafe(18)
    host = request.client.host if request.client else "?"
    return f"address:{host}", fresh


def _set_visitor(response: Response, request: Request, fresh: str | None) -> None:
    if fresh:
        secure = request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"
        response.set_cookie(
            VISITOR_COOKIE,
            fresh,
            max_age=links.MAX_HOURS * 3600,
            httponly=True,
            samesite="strict",
            secure=secure,
            path=DEMO_PREFIX.rstrip("/"),
        )


def demo_html(link: DemoLink, topic_name: str, token: str, nonce: str) -> str:
    """The demo page of ``link``: the Topic's name, the demo line, a question box and the answers so far (in the page only)."""
    name = html.escape(topic_name)
    sources = "Answers cite their source files; you may open them." if link.allow_sources else "Answers name their source files."
    line = (
        f"This is a demo: you can ask questions of the Topic <b>{name}</b> only, and answers come from its documents. "
        f"{sources} What you ask is kept for the people running this demo. "
        f"The link works until {link.expires_at:%Y-%m-%d %H:%M} UTC."
    )
    ask_url = json.dumps(f"{DEMO_PREFIX}{token}/ask")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="robots" content="noindex"><title>{name} · demo</title></head>
<body style="font-family:system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em;color:#111827">
<h1 id="topic" style="margin-bottom:0.2em">{name}</h1>
<p id="demo-note" style="background:#fef3c7;border:1px solid #f59e0b;border-radius:6px;padding:8px 12px">{line}</p>
<div id="log" aria-live="polite"></div>
<form id="ask" style="display:flex;gap:8px;margin-top:1em">
<textarea id="question" name="question" rows="2" maxlength="{MAX_QUESTION_CHARS}" placeholder="Ask a question"
 style="flex:1;padding:8px;font:inherit" required></textarea>
<button id="send" type="submit" style="padding:8px 18px">Ask</button></form>
<p id="status" role="status" style="color:#6b7280;min-height:1.2em"></p>
<script nonce="{nonce}">
const form = document.getElementById("ask"), box = document.getElementById("question"),
      log = document.getElementById("log"), status = document.getElementById("status"),
      send = document.getElementById("send");
function add(cls, text) {{
  const div = document.createElement("div"); div.className = cls;
  div.style.cssText = cls === "q" ? "margin:1em 0 0.3em;font-weight:600" : "white-space:pre-wrap;margin:0 0 0.5em";
  div.textContent = text; log.appendChild(div); return div;
}}
form.addEventListener("submit", async (event) => {{
  event.preventDefault();
  const question = box.value.trim(); if (!question) return;
  add("q", question); box.value = ""; send.disabled = true; status.textContent = "Searching the documents…";
  try {{
    const response = await fetch({ask_url}, {{method: "POST", headers: {{"content-type": "application/json"}},
                                             body: JSON.stringify({{question}})}});
    const body = await response.json();
    if (!response.ok) {{ add("error", body.error || "The question could not be answered.").style.color = "#b91c1c"; }}
    else {{
      add("answer", body.answer);
      if (body.sources.length) {{
        const list = add("sources", "Sources: "); list.style.cssText = "font-size:0.9em;color:#374151;margin-bottom:1em";
        body.sources.forEach((source, i) => {{
          if (i) list.appendChild(document.createTextNode(", "));
          if (source.link) {{
            const a = document.createElement("a"); a.href = source.link; a.target = "_blank"; a.rel = "noopener noreferrer";
            a.textContent = source.file; list.appendChild(a);
          }} else {{ list.appendChild(document.createTextNode(source.file)); }}
        }});
      }}
    }}
  }} catch (error) {{ add("error", "The server could not be reached.").style.color = "#b91c1c"; }}
  status.textContent = ""; send.disabled = false; box.focus();
}});
</script></body></html>"""


def add_demo_routes(api: FastAPI, rt: Runtime) -> None:
    """Add the demo pages (``/demo/{token}``, its ``/ask`` and ``/files/{file_token}``) to the console's FastAPI app."""

    def opened(token: str) -> tuple[DemoLink, object]:
        return links.open_link(rt, token)

    async def open_or_page(token: str):
        try:
            return await anyio.to_thread.run_sync(opened, token), None
        except DemoLinkGone as gone:
            return None, gone
        except Exception as exc:
            if not is_store_outage(exc):
                raise
            return None, DemoLinkGone(503, "This demo cannot answer right now", STORE_DOWN_MESSAGE)

    @api.get(DEMO_PREFIX + "{token}", include_in_schema=False)
    async def page(token: str, request: Request):
        found, gone = await open_or_page(token)
        if gone is not None:
            return gone_page(gone)
        link, topic = found
        nonce = secrets.token_urlsafe(16)
        response = HTMLResponse(demo_html(link, topic.name, token, nonce), headers=_headers(nonce))
        _set_visitor(response, request, _visitor(request)[1])
        return response

    @api.post(DEMO_PREFIX + "{token}/ask", include_in_schema=False)
    async def ask_demo(token: str, request: Request):
        found, gone = await open_or_page(token)
        if gone is not None:
            return JSONResponse({"error": f"{gone.title}. {gone}"}, status_code=gone.status, headers=_headers())
        link, topic = found
        try:
            body = await request.json()
            question = body.get("question") if isinstance(body, dict) else None
        except ValueError:
            question = None
        if not isinstance(question, str) or not question.strip():
            return JSONResponse({"error": 'Send a question: {"question": "..."}.'}, status_code=400, headers=_headers())
        if len(question) > MAX_QUESTION_CHARS:
            return JSONResponse(
                {"error": f"The question is {len(question)} characters long; the limit is {MAX_QUESTION_CHARS}."},
                status_code=400,
                headers=_headers(),
            )
        visitor, fresh = _visitor(request)
        try:
            await anyio.to_thread.run_sync(links.take_question, rt, link, visitor)
        except RateLimited as exc:
            return JSONResponse(
                {"error": str(exc)}, status_code=429, headers={**_headers(), "Retry-After": str(exc.retry_after_s)}
            )

        def answer() -> dict:
            token_var = acting_username.set(links.source_owner(link))  # source links open only through this demo link
            try:
                *_, final = ask(rt, topic, question, save=False, allow_tools=False)
            finally:
                acting_username.reset(token_var)
            files = list(dict.fromkeys(s.file for s in final.sources))
            links.record_turn(rt, link, visitor, question.strip(), final.text, files)
            shown = []
            for file in files:
                link_path = next((s.link for s in final.sources if s.file == file and s.link), "")
                item = {"file": file}
                if link.allow_sources and link_path.startswith("/files/"):
                    item["link"] = f"{DEMO_PREFIX}{token}/files/{link_path.removeprefix('/files/')}"
                shown.append(item)
            return {"answer": final.text, "sources": shown, "no_answer": final.no_answer}

        try:
            result = await anyio.to_thread.run_sync(answer)
        except RagTopicsError as exc:
            status = 503 if is_store_outage(exc) else 400
            return JSONResponse(
                {"error": STORE_DOWN_MESSAGE if status == 503 else str(exc)}, status_code=status, headers=_headers()
            )
        except Exception as exc:
            if is_store_outage(exc):
                return JSONResponse({"error": STORE_DOWN_MESSAGE}, status_code=503, headers=_headers())
            log.exception("a demo answer failed (link %s)", link.id)
            return JSONResponse({"error": "The answer failed; try again in a moment."}, status_code=500, headers=_headers())
        response = JSONResponse(result, headers=_headers())
        _set_visitor(response, request, fresh)
        return response

    @api.get(DEMO_PREFIX + "{token}/files/{file_token}", include_in_schema=False)
    async def source_file(token: str, file_token: str):
        found, gone = await open_or_page(token)
        if gone is not None:
            return gone_page(gone)
        link, topic = found
        refused = DemoLinkGone(
            403,
            "Source files are not shared in this demo",
            "The person who made this demo link did not allow downloads of source files.",
        )
        if not link.allow_sources:
            return gone_page(refused)
        try:
            relative, owner = rt.signer.grant(file_token)
            rt.blobs.check(relative)
        except (LinkError, ValueError) as exc:
            return gone_page(
                DemoLinkGone(403, "This source link is not valid", f"{exc}. Ask the question again for a fresh link.")
            )
        if owner != links.source_owner(link) or not relative.startswith(f"{topic.id}/"):
            return gone_page(DemoLinkGone(403, "This source link is not part of this demo", "Ask the question here for a link."))
        try:  # the local store and the object store alike; blocking reads run off the event loop
            data = await anyio.to_thread.run_sync(rt.blobs.read, relative)
        except ValueError as exc:  # the local store: a link that resolves outside it
            return gone_page(DemoLinkGone(403, "This source link is not valid", f"{exc}."))
        except FileNotFoundError:
            return gone_page(
                DemoLinkGone(410, "This file is no longer stored", "Ask the question again for a link to the current file.")
            )
        except FileStoreError as exc:
            log.warning("source file %s of a demo could not be read: %s", relative, exc)
            return gone_page(DemoLinkGone(503, "The file store is not reachable", f"{exc}. Try again in a moment."))
        name = rt.blobs.file_name(relative)
        serving = served_as(name)
        return Response(
            data,
            media_type=serving.media_type,
            headers={
                **serving.headers,
                "Content-Disposition": content_disposition(serving.disposition, name),
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )
