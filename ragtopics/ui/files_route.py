"""The ``/files/<token>`` route: serves a source's original file for a signed, unexpired link."""

from __future__ import annotations

import logging

import gradio as gr
from fastapi.responses import FileResponse, PlainTextResponse

from ragtopics.runtime import Runtime
from ragtopics.storage.links import LinkError

log = logging.getLogger(__name__)


def install_file_route(app: gr.Blocks, rt: Runtime) -> None:
    """Add ``GET /files/{token}`` to a launched console, ahead of Gradio's own routes.

    An expired, forged or malformed link answers 403 with the reason; a link to a file
    that no longer exists answers 404.
    """

    async def serve(token: str):
        try:
            relative = rt.signer.verify(token)
            path = rt.blobs.path(relative)
        except (LinkError, ValueError) as exc:
            return PlainTextResponse(f"This source link is not valid: {exc}", status_code=403)
        if not path.is_file():
            return PlainTextResponse("This file is no longer stored.", status_code=404)
        return FileResponse(path, filename=path.name)

    app.app.add_api_route("/files/{token}", serve, methods=["GET"])
    routes = app.app.router.routes
    routes.insert(0, routes.pop())  # before Gradio's catch-all routes
