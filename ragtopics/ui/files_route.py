"""The ``/files/<token>`` route: serves a source's original file for a signed, unexpired link.

A stored file is whatever someone uploaded, so it is served so that nothing in it can run in the
console's origin (see :func:`served_as`): every response says ``X-Content-Type-Options: nosniff``
and, but for PDFs, ``Content-Security-Policy: sandbox``; only PDFs, pictures and plain text open
in the browser, as what they are; every other type (HTML, SVG, XML, scripts, office files) is a
download of ``application/octet-stream``. Gradio's own file route (``/gradio_api/file=``, which
serves what the console's file inputs received) gets ``nosniff`` and ``sandbox`` too
(:class:`UploadFolderHeaders`).
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from ragtopics.access.context import caller_of
from ragtopics.runtime import Runtime
from ragtopics.storage.blobs import FileStoreError
from ragtopics.storage.links import LinkError
from ragtopics.text.file_types import STRUCTURED_TYPES, TEXT_EXTENSIONS, extension_of

log = logging.getLogger(__name__)

#: Types a browser shows without running anything of the file in the page: served inline as what they are.
INLINE_TYPES = {
    "pdf": "application/pdf",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
    "tiff": "image/tiff",
}
#: Extensions whose content a browser would render as a page or run (markup, SVG, scripts): never shown, only
#: downloaded, even though their text is readable.
ACTIVE_EXTENSIONS = frozenset(
    {
        "html",
        "htm",
        "xhtml",
        "xht",
        "shtml",
        "svg",
        "svgz",
        "xml",
        "xsl",
        "xslt",
        "js",
        "mjs",
        "cjs",
        "swf",
        "wasm",
        "mht",
        "mhtml",
    }
)
#: Readable text shown in the browser as ``text/plain`` (a source's file opens where it can be read).
TEXT_TYPES = (TEXT_EXTENSIONS | STRUCTURED_TYPES) - ACTIVE_EXTENSIONS
#: Sent with every stored file: the browser must not guess another type than the one sent.
NOSNIFF = ("X-Content-Type-Options", "nosniff")
#: Sent with every stored file but PDFs: the file is a sandboxed page of a unique origin, where nothing runs
#: (browsers show no PDF in a sandboxed page; their PDF viewers run a PDF's scripts outside the page's origin).
SANDBOX = ("Content-Security-Policy", "sandbox")


@dataclass(frozen=True, slots=True)
class Serving:
    """How a stored file is sent.

    Attributes:
        media_type: the ``Content-Type`` (from the file's extension, never from its content).
        disposition: ``inline`` (the browser shows it) or ``attachment`` (the browser saves it).
        headers: the security headers of the response, by name.
    """

    media_type: str
    disposition: str
    headers: dict[str, str]


def served_as(file_name: str) -> Serving:
    """How the file ``file_name`` is served, from its extension alone.

    Args:
        file_name: the stored file's name (``report.pdf``).

    Returns:
        PDFs and pictures inline as their type, readable text inline as ``text/plain; charset=utf-8``,
        everything else (active types included) as an ``application/octet-stream`` attachment; the
        headers always hold ``X-Content-Type-Options: nosniff``, and ``Content-Security-Policy: sandbox``
        for every type but PDF.
    """
    extension = extension_of(file_name)
    headers = dict([NOSNIFF] if extension == "pdf" else [NOSNIFF, SANDBOX])
    if extension in INLINE_TYPES:
        return Serving(INLINE_TYPES[extension], "inline", headers)
    if extension in TEXT_TYPES:
        return Serving("text/plain; charset=utf-8", "inline", headers)
    return Serving("application/octet-stream", "attachment", headers)


def add_file_route(api: FastAPI, rt: Runtime) -> None:
    """Add ``GET /files/{token}`` to the console's FastAPI app (before Gradio is mounted at ``/``).

    The access middleware has already refused anonymous callers. A link made for one user
    opens only for that user; a link made outside the console (the CLI) only for an admin.
    An expired, forged, malformed or someone else's link answers 403 with the reason; a link
    to a file that is no longer stored (deleted, or replaced by a newer upload) answers 410.
    Both are short pages that say what happened and what to do. A file is served as
    :func:`served_as` says, so that nothing in it runs in the console's origin.
    """

    @api.get("/files/{token}", include_in_schema=False)
    async def serve(token: str, request: Request):
        try:
            relative, owner = rt.signer.grant(token)
            rt.blobs.check(relative)
        except (LinkError, ValueError) as exc:
            return refusal_page("This source link is not valid", f"{exc}. Ask the question again for a fresh link.", 403)
        user = caller_of(request)
        allowed = user is not None and (owner == user.username or (owner is None and user.role == "admin"))
        if not allowed:
            return refusal_page(
                "This source link was made for someone else",
                "Source links work only for the user who asked. Ask the question yourself for a link.",
                403,
            )
        try:
            # the local store and the object store alike; blocking reads run off the event loop
            data = await run_in_threadpool(rt.blobs.read, relative)
        except FileNotFoundError:
            return refusal_page(
                "This file is no longer stored",
                "It was deleted from its Topic, or replaced by a newer upload of the same name. "
                "Ask the question again to get a link to the current file.",
                410,
            )
        except FileStoreError as exc:
            log.warning("source file %s could not be read: %s", relative, exc)
            return refusal_page("The file store is not reachable", f"{exc}. Try again in a moment.", 503)
        name = rt.blobs.file_name(relative)
        serving = served_as(name)
        headers = dict(serving.headers, **{"Content-Disposition": content_disposition(serving.disposition, name)})
        return Response(data, media_type=serving.media_type, headers=headers)


def content_disposition(disposition: str, file_name: str) -> str:
    """The ``Content-Disposition`` value for ``file_name`` (RFC 6266; ``filename*`` for names that need quoting)."""
    quoted = quote(file_name)
    if quoted != file_name:
        return f"{disposition}; filename*=utf-8''{quoted}"
    return f'{disposition}; filename="{file_name}"'


#: Paths of Gradio's own file route (files uploaded through the console's file inputs, and files its events return).
GRADIO_FILE_PATHS = ("/gradio_api/file=", "/gradio_api/file/")


class UploadFolderHeaders:
    """ASGI middleware: Gradio's file route sends the headers of a stored file too (``nosniff``, ``sandbox``).

    Gradio already sends a file of a type it does not trust as an ``application/octet-stream``
    download; these headers keep a file it sends inline (a picture, plain text) from being read as
    anything else or running anything if it is opened as a page. Pictures and media embedded in the
    console are unaffected (a sandbox applies only to a document).

    Args:
        app: the ASGI app behind it.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope.get("path", "").startswith(GRADIO_FILE_PATHS):
            return await self.app(scope, receive, send)
        extra = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in (NOSNIFF, SANDBOX)]

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in extra}
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": headers + extra}
            await send(message)

        return await self.app(scope, receive, sending)


def refusal_page(title: str, text: str, status: int) -> HTMLResponse:
    """A small HTML page saying why a download link is refused."""
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body style='font-family:sans-serif;max-width:40em;margin:3em auto'><h2>{html.escape(title)}</h2>"
        f"<p>{html.escape(text)}</p></body></html>"
    )
    return HTMLResponse(body, status_code=status)
