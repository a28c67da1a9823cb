"""The ``/files/<token>`` route: serves a source's original file for a signed, unexpired link."""

from __future__ import annotations

import logging

import gradio as gr
import html

from fastapi.responses import FileResponse, HTMLResponse

from ragtopics.runtime import Runtime
from ragtopics.storage.links import LinkError

log = logging.getLogger(__name__)


def install_file_route(app: gr.Blocks, rt: Runtime) -> None:
    """Add ``GET /files/{token}`` to a launched console, ahead of Gradio's own routes.

    An expired, forged or malformed link answers 403 with the reason; a link to a file
    that is no longer stored (deleted, or replaced by a newer upload) answers 410. Both
    are short pages that say what happened and what to do.
    """

    async def serve(token: str):
        try:
            relative = rt.signer.verify(token)
            path = rt.blobs.path(relative)
        except (LinkError, ValueError) as exc:
            return refusal_page("This source link is not valid", f"{exc}. Ask the question again for a fresh link.", 403)
        if not path.is_file():
            return refusal_page("This file is no longer stored",
                                "It was deleted from its Topic, or replaced by a newer upload of the same name. "
                                "Ask the question again to get a link to the current file.", 410)  # fmt: skip
        return FileResponse(path, filename=path.name, content_disposition_type="inline")

    app.app.add_api_route("/files/{token}", serve, methods=["GET"])
    routes = app.app.router.routes
    routes.insert(0, routes.pop())  # before Gradio's catch-all routes


def refusal_page(title: str, text: str, status: int) -> HTMLResponse:
    """A small HTML page saying why a download link is refused."""
    body = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif;max-width:40em;margin:3em auto'><h2>{html.escape(title)}</h2>"
            f"<p>{html.escape(text)}</p></body></html>")  # fmt: skip
    return HTMLResponse(body, status_code=status)
