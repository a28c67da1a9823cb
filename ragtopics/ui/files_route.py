"""The ``/files/<token>`` route: serves a source's original file for a signed, unexpired link."""

from __future__ import annotations

import html
import logging

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse

from ragtopics.runtime import Runtime
from ragtopics.storage.links import LinkError
from ragtopics.ui.web import caller_of

log = logging.getLogger(__name__)


def add_file_route(api: FastAPI, rt: Runtime) -> None:
    """Add ``GET /files/{token}`` to the console's FastAPI app (before Gradio is mounted at ``/``).

    The access middleware has already refused anonymous callers. A link made for one user
    opens only for that user; a link made outside the console (the CLI) only for an admin.
    An expired, forged, malformed or someone else's link answers 403 with the reason; a link
    to a file that is no longer stored (deleted, or replaced by a newer upload) answers 410.
    Both are short pages that say what happened and what to do.
    """

    @api.get("/files/{token}", include_in_schema=False)
    async def serve(token: str, request: Request):
        try:
            relative, owner = rt.signer.grant(token)
            path = rt.blobs.path(relative)
        except (LinkError, ValueError) as exc:
            return refusal_page("This source link is not valid", f"{exc}. Ask the question again for a fresh link.", 403)
        user = caller_of(request)
        allowed = user is not None and (owner == user.username or (owner is None and user.role == "admin"))
        if not allowed:
            return refusal_page("This source link was made for someone else",
                                "Source links work only for the user who asked. Ask the question yourself for a link.", 403)  # fmt: skip
        if not path.is_file():
            return refusal_page("This file is no longer stored",
                                "It was deleted from its Topic, or replaced by a newer upload of the same name. "
                                "Ask the question again to get a link to the current file.", 410)  # fmt: skip
        return FileResponse(path, filename=path.name, content_disposition_type="inline")


def refusal_page(title: str, text: str, status: int) -> HTMLResponse:
    """A small HTML page saying why a download link is refused."""
    body = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif;max-width:40em;margin:3em auto'><h2>{html.escape(title)}</h2>"
            f"<p>{html.escape(text)}</p></body></html>")  # fmt: skip
    return HTMLResponse(body, status_code=status)
