"""Errors of the HTTP API in OpenAI's JSON shape: ``{"error": {"message", "type", "code"}}``.

OpenAI-compatible clients (the ``openai`` SDK, Open WebUI) read ``error.message``; ``code`` is
a stable word a program can test. The message is the one the console shows for the same
failure (an unknown Topic, an empty question, a model that does not answer).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ragtopics.errors import (
    STORE_DOWN_MESSAGE,
    AccessDeniedError,
    ModelUnavailableError,
    NotFoundError,
    RagTopicsError,
    is_store_outage,
)

log = logging.getLogger(__name__)

#: Path prefixes whose errors take the API's shape (the console's own routes keep theirs).
API_PREFIXES = ("/v1/", "/api/v1/", "/metrics")

#: OpenAI's error type for each HTTP status the API answers with.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    502: "server_error",
    503: "server_error",
    500: "server_error",
}


class ApiError(Exception):
    """A request the API refuses or cannot serve.

    Args:
        status: the HTTP status (400, 401, 403, 404, 502, 503...).
        message: what went wrong, for the person reading it.
        code: a stable word for programs (``model_not_found``, ``invalid_api_key``...).
    """

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    def response(self) -> JSONResponse:
        """The JSON response that says so."""
        return JSONResponse(error_body(self.status, self.message, self.code), status_code=self.status)


def error_body(status: int, message: str, code: str | None = None) -> dict:
    """``{"error": {"message", "type", "code"}}`` for an HTTP status (the type follows OpenAI's names)."""
    default_code = {401: "invalid_api_key", 403: "permission_denied", 503: "unavailable"}.get(status, "error")
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"), "code": code or default_code}}


def is_api_path(path: str) -> bool:
    """Whether ``path`` belongs to the API (its errors take the API's shape)."""
    return path.startswith(API_PREFIXES)


def api_error(exc: BaseException, *, not_found_code: str = "not_found") -> ApiError:
    """The API's answer to an error raised while serving a request.

    Args:
        exc: the error.
        not_found_code: the code of a :class:`NotFoundError` (``model_not_found`` where the missing
            thing is a Topic asked as a model).

    Returns:
        404 for a missing Topic or chat, 403 for a role below the one needed, 503 while Redis does
        not answer, 502 for a model endpoint that failed, 400 for any other error of the product's
        own (its message as the console shows it), 500 otherwise (logged; the message says only that).
    """
    if isinstance(exc, ApiError):
        return exc
    if is_store_outage(exc):
        return ApiError(503, STORE_DOWN_MESSAGE, "store_unavailable")
    if isinstance(exc, NotFoundError):
        return ApiError(404, str(exc), not_found_code)
    if isinstance(exc, AccessDeniedError):
        return ApiError(403, f"Not allowed: {exc}.", "permission_denied")
    if isinstance(exc, ModelUnavailableError):
        return ApiError(502, str(exc), "model_unavailable")
    if isinstance(exc, RagTopicsError):
        return ApiError(400, str(exc), "invalid_request")
    log.exception("the API failed", exc_info=exc)
    return ApiError(500, "internal error; the server log has the details", "internal_error")


def install(api: FastAPI) -> None:
    """Answer :class:`ApiError` and malformed API requests in the API's error shape."""

    @api.exception_handler(ApiError)
    async def on_api_error(request: Request, exc: ApiError):
        return exc.response()

    @api.exception_handler(RequestValidationError)
    async def on_invalid_request(request: Request, exc: RequestValidationError):
        if not is_api_path(request.url.path):
            return await request_validation_exception_handler(request, exc)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: {e.get('msg', '')}" for e in exc.errors()
        )
        return ApiError(400, f"invalid request: {problems}", "invalid_request").response()


def answered(call):
    """``call()``, any error it raises answered in the API's error shape (:func:`api_error`).

    Raises:
        ApiError: for every exception of ``call``.
    """
    try:
        return call()
    except Exception as exc:
        raise api_error(exc) from None
