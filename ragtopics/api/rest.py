"""The product's own HTTP API under ``/api/v1``, with its OpenAPI document and interactive docs.

``/api/v1/docs`` (Swagger UI) and ``/api/v1/openapi.json`` describe every route; like every
route of the console they need a logged-in caller once an admin exists. Each route needs a
role of the console's table (:func:`needs`): listing Topics and asking one needs ``viewer``,
showing a Topic's settings ``operator``. Errors are ``{"error": {"message", "type", "code"}}``
with the console's messages. The JSON objects are the CLI's (:mod:`ragtopics.api.shapes`).

Routes: ``GET /topics``, ``GET /topics/{name}``, ``POST /topics/{name}/ask`` (JSON, or
server-sent events with ``"stream": true``), ``POST|GET /topics/{name}/documents``,
``DELETE /topics/{name}/documents/{file_name}``, ``POST /topics/{name}/uploads/estimate``, ``GET /jobs/{job_id}``, and the caller's chats:
``GET /topics/{name}/chats`` and ``GET /chats/{session_id}``; creating, configuring and deleting
Topics, communities, the graph and evaluation runs are in :mod:`ragtopics.api.rest_topics`; demo links
(``POST /topics/{name}/demo-links``, ``GET /demo-links``, ``DELETE /demo-links/{id}``,
``GET /demo-links/{id}/chats``) in :mod:`ragtopics.api.rest_demo`.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator

import anyio
from fastapi import Depends, FastAPI, File, Request, UploadFile
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from ragtopics.access.users import User
from ragtopics.answer.history import list_sessions, own_session, saved_turns
from ragtopics.answer.turn import ChatUpdate, ask
from ragtopics.api import errors, shapes
from ragtopics.api.openai_compat import acting_as, final_update, require, stable_prefix, stepped_as
from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import BatchedUploads, list_documents
from ragtopics.errors import RagTopicsError
from ragtopics.ingest.cost import comparison, estimate_upload
from ragtopics.jobs.queue import job_progress
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import get_topic, list_topics
from ragtopics.tracing.metrics import observe_answer

#: Where the API is mounted on the console's app.
PREFIX = "/api/v1"


def needs(role: str):
    """A FastAPI dependency: the caller, when its role allows ``role`` (else a 401 or 403 error).

    The returned dependency's callable carries ``role`` as its ``need`` attribute, so the route
    audit can read which role each route needs.
    """

    def caller(request: Request) -> User:
        return require(request, role)

    caller.need = role  # type: ignore[attr-defined]  # a function attribute, read by the route audit
    return Depends(caller)


class AskRequest(BaseModel):
    """A question to a Topic."""

    question: str = Field(description="The question; 1 to 8,000 characters.")
    session_id: str | None = Field(None, description="Continue this chat of yours (a `session_id` of an earlier answer).")
    route: str | None = Field(None, description="Force a way instead of routing (SEARCH; PATH, LOCAL, GLOBAL, HYBRID; DIRECT).")
    save: bool = Field(True, description="Save the turn in your chats.")
    stream: bool = Field(
        False,
        description="Answer as server-sent events: `token` events, then `route`, `sources`, "
        "`timings` and `done` (the whole answer object).",
    )


def _event(name: str, data) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def answer_events(updates: Generator[ChatUpdate, None, None], first: ChatUpdate, on_final, base_url: str = "") -> Iterator[str]:
    """An answer as server-sent events: ``phase`` ({"phase", "status"}) while it searches, ``token``
    ({"text"}: text added to the answer), then ``route``, ``sources``, ``timings`` and ``done`` (the object
    :func:`~ragtopics.api.shapes.answer` gives); ``error`` ({"error": {...}}) if it fails on the way."""
    sent, phase = "", ""
    try:
        update = first
        while not update.done:
            if update.phase != phase or update.status:
                phase = update.phase
                yield _event("phase", {"phase": update.phase, "status": update.status})
            shown = stable_prefix(update.text)
            if shown.startswith(sent) and len(shown) > len(sent):
                yield _event("token", {"text": shown[len(sent) :]})
                sent = shown
            update = next(updates)
        on_final(update)
        if update.text.startswith(sent) and len(update.text) > len(sent):
            yield _event("token", {"text": update.text[len(sent) :]})
        whole = shapes.answer(update, base_url)
        route_fields = ("route", "route_confidence", "route_reason", "route_method", "route_planned")
        yield _event("route", {k: whole[k] for k in route_fields})
        yield _event("sources", whole["sources"])
        yield _event("timings", whole["timings_ms"])
        yield _event("done", whole)
    except Exception as exc:
        failure = errors.api_error(exc)
        yield _event("error", errors.error_body(failure.status, failure.message, failure.code))
    finally:
        updates.close()


def build(rt: Runtime) -> FastAPI:
    """The ``/api/v1`` app (mounted by :func:`mount`)."""
    app = FastAPI(
        title="ragtopics API",
        version="1",
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
        description="Topics and their answers. Send an API token as `Authorization: Bearer rt_...`.",
    )
    errors.install(app)

    @app.get("/topics", tags=["topics"])
    def topics(user: User = needs("viewer")) -> list[dict]:
        """Every Topic: `[{"id", "name", "kind", "description", "settings_version"}]`. Needs the viewer role."""
        try:
            return [shapes.topic_summary(t) for t in list_topics(rt)]
        except Exception as exc:
            raise errors.api_error(exc) from None

    @app.get("/topics/{name}", tags=["topics"])
    def topic(name: str, user: User = needs("operator")) -> dict:
        """A Topic with its settings, as `ragtopics topic show` prints it. Needs the operator role."""
        try:
            return shapes.topic_detail(get_topic(rt, name))
        except Exception as exc:
            raise errors.api_error(exc) from None

    @app.post("/topics/{name}/ask", tags=["chat"])
    async def ask_topic(request: Request, name: str, body: AskRequest, user: User = needs("viewer")):
        """Ask a Topic; the answer object of `ragtopics ask --json` (source links absolute), or server-sent events.
        Needs the viewer role."""

        def start():
            with acting_as(user):
                try:
                    topic = get_topic(rt, name)
                    updates = ask(rt, topic, body.question, session_id=body.session_id, route=body.route, save=body.save)
                    return topic, updates, next(updates)
                except Exception as exc:
                    raise errors.api_error(exc) from None

        topic, updates, first = await anyio.to_thread.run_sync(start)
        stepped = stepped_as(user, updates)
        base_url = str(request.base_url).removesuffix(PREFIX.lstrip("/") + "/")  # the console's, not the mount's

        def on_final(final: ChatUpdate) -> None:
            observe_answer(topic.kind, final.route, final.timings_ms)

        if body.stream:
            return StreamingResponse(
                answer_events(stepped, first, on_final, base_url),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )

        def finish() -> dict:
            final = final_update(first, stepped)
            on_final(final)
            return shapes.answer(final, base_url)

        return await anyio.to_thread.run_sync(finish)

    add_document_routes(app, rt)
    add_chat_routes(app, rt)
    from ragtopics.api import rest_demo, rest_topics  # they use needs() from here

    rest_topics.add_routes(app, rt)
    rest_demo.add_routes(app, rt)
    return app


def add_chat_routes(app: FastAPI, rt: Runtime) -> None:
    """The caller's own saved chats (list, read); each needs the viewer role, as the console's Chat page does."""

    @app.get("/topics/{name}/chats", tags=["chat"])
    def chats(name: str, user: User = needs("viewer")) -> list[dict]:
        """Your saved chats with a Topic, newest first: `[{"id", "title", "created_at"}]`. Needs the viewer role."""
        try:
            with acting_as(user):
                return [shapes.chat(c) for c in list_sessions(rt, get_topic(rt, name))]
        except Exception as exc:
            raise errors.api_error(exc) from None

    @app.get("/chats/{session_id}", tags=["chat"])
    def read_chat(request: Request, session_id: str, user: User = needs("viewer")) -> dict:
        """One of your saved chats: `{"id", "title", "created_at", "turns": [...]}`, each turn with its sources
        as they stand now (a file replaced or deleted since says so). Needs the viewer role."""
        base_url = str(request.base_url).removesuffix(PREFIX.lstrip("/") + "/")
        try:
            with acting_as(user):
                session = own_session(rt, session_id)
                if session is None:
                    raise errors.ApiError(404, f"no chat session {session_id} of yours", "not_found")
                turns = saved_turns(rt, session_id)
        except Exception as exc:
            raise errors.api_error(exc) from None
        return {**shapes.chat(session), "turns": [shapes.saved_turn(t, base_url) for t in turns]}


def add_document_routes(app: FastAPI, rt: Runtime) -> None:
    """Documents of a Topic (upload, list, delete) and job status; each needs the operator role, as the
    console's Upload page does."""

    @app.post("/topics/{name}/documents", tags=["documents"])
    def upload(
        name: str,
        files: list[UploadFile] = File(description="One or more files (multipart field `files`)."),
        user: User = needs("operator"),
    ) -> dict:
        """Upload files with the console's checks; small files share indexing jobs. Answers `{"enqueued": [{"id",
        "file_name", "job_id"}], "refused": [{"file_name", "error"}]}` (a refused file is not stored). Needs the
        operator role."""
        try:
            topic = get_topic(rt, name)
        except Exception as exc:
            raise errors.api_error(exc) from None
        enqueued, refused = [], []
        with BatchedUploads(rt, topic) as uploads:
            for upload in files:
                try:
                    row = uploads.add(upload.filename or "", upload.file.read())
                    enqueued.append({"id": row.id, "file_name": row.file_name, "job_id": row.job_id})
                except RagTopicsError as exc:
                    refused.append({"file_name": upload.filename or "", "error": str(exc)})
        failed = {row.job_id: message for row, message in uploads.not_queued}
        refused += [
            {"file_name": item["file_name"], "error": failed[item["job_id"]]} for item in enqueued if item["job_id"] in failed
        ]
        return {"enqueued": [item for item in enqueued if item["job_id"] not in failed], "refused": refused}

    @app.post("/topics/{name}/uploads/estimate", tags=["documents"])
    def estimate(
        name: str,
        files: list[UploadFile] = File(
            description="The files as they would be uploaded (multipart field `files`, as for `POST /topics/{name}/documents`)."
        ),
        user: User = needs("operator"),
    ) -> dict:
        """The cost estimate of uploading the files (as `ragtopics ingest --dry-run --json`): `{"topic", "chunks", "calls":
        {kind: {"calls", "tokens_in", "tokens_out", "seconds", "cost", "measured", "label", "at_rebuild", ...}},
        "tokens_in", "tokens_out", "seconds", "cost", "files": [...], "notes"}`. Nothing is stored or queued. Needs
        the operator role."""
        try:
            topic = get_topic(rt, name)
            return estimate_upload(rt, topic, [(upload.filename or "", upload.file.read()) for upload in files]).to_dict()
        except Exception as exc:
            raise errors.api_error(exc) from None

    @app.get("/topics/{name}/documents", tags=["documents"])
    def documents(name: str, user: User = needs("operator")) -> list[dict]:
        """The Topic's Indexed Documents, as `ragtopics docs --json` prints them. Needs the operator role."""
        try:
            return [shapes.document(d) for d in list_documents(rt, get_topic(rt, name))]
        except Exception as exc:
            raise errors.api_error(exc) from None

    @app.delete("/topics/{name}/documents/{file_name}", tags=["documents"])
    def delete(name: str, file_name: str, user: User = needs("operator")) -> dict:
        """Delete a document (its chunks, keywords, pictures, graph records and files): `{"deleted", "removed"}`,
        `removed` counting what went. Needs the operator role."""
        try:
            topic = get_topic(rt, name)
            rt.check_store()
            return {"deleted": file_name, "removed": delete_document(rt, topic, file_name)}
        except Exception as exc:
            raise errors.api_error(exc) from None

    @app.get("/jobs/{job_id}", tags=["documents"])
    def job(job_id: str, user: User = needs("operator")) -> dict:
        """An indexing job's status and progress: `{"job_id", "status", "phase", "done", "total", "error", "result",
        "shared_by", "cost"}`; status `queued`, `started`, `finished`, `failed`, `stopped` or `canceled`; `cost` the
        upload's estimate beside what it took (`{"estimate", "actual", "file_name"}`, `actual` empty until it is
        stored; None for an upload without an estimate). Needs the operator role."""
        try:
            progress = job_progress(rt, job_id)
            cost = comparison(rt, [job_id]).get(job_id) if progress.status != "missing" else None
        except Exception as exc:
            raise errors.api_error(exc) from None
        if progress.status == "missing":
            raise errors.ApiError(404, f"no job {job_id} (finished jobs are kept for a while, then forgotten)", "not_found")
        return {**shapes.job(progress), "cost": cost}


def mount(api: FastAPI, rt: Runtime) -> None:
    """Mount the API at :data:`PREFIX` on the console's app."""
    api.mount(PREFIX, build(rt))
