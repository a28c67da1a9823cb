"""``GET /metrics``: the process's metrics in Prometheus's text format, for an operator's token.

Besides the counters and histograms of :mod:`ragtopics.tracing.metrics` (model calls and tokens
by role, answer latency), the scrape reads queue depth, jobs by state and documents by status
from the stores, and includes prometheus_client's process metrics (CPU, memory, open files).
:class:`RequestTimer` times every HTTP request that reaches the app behind the access check.
"""

from __future__ import annotations

import time

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import REGISTRY as DEFAULT_REGISTRY

from ragtopics.api.openai_compat import require
from ragtopics.runtime import Runtime
from ragtopics.tracing import metrics

#: The role that may read the metrics (they describe the whole installation).
METRICS_ROLE = "operator"
#: Paths timed under their own name; every other request (the console's pages, Gradio's API) is ``console``.
TIMED_ROUTES = frozenset({"/v1/models", "/v1/chat/completions", "/healthz", "/readyz", "/metrics"})


def route_label(path: str) -> str:
    """The ``route`` label of a request path: the path for the API's routes (``/api/v1/<first segment>`` under
    ``/api/v1``), ``console`` for the rest
    (Gradio's paths carry event ids, which would make a series per request)."""
    if path.startswith("/api/v1/"):  # the API's first path segment: /api/v1/topics
        return "/api/v1/" + path.removeprefix("/api/v1/").split("/", 1)[0]
    return path if path in TIMED_ROUTES else "console"


class RequestTimer:
    """ASGI middleware: observe each HTTP request's duration, to its last response byte, by route, method and status.

    Args:
        app: the ASGI app behind it.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": 500}

        async def sending(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            metrics.REQUEST_SECONDS.labels(
                route=route_label(scope.get("path", "")), method=scope.get("method", ""), status=str(status["code"])
            ).observe(time.perf_counter() - t0)


def exposition(rt: Runtime) -> bytes:
    """The metrics text: the process's counters and histograms, the stores' figures, the process collectors."""
    stores = CollectorRegistry()
    stores.register(metrics.StoreCollector(rt))
    return generate_latest(metrics.REGISTRY) + generate_latest(stores) + generate_latest(DEFAULT_REGISTRY)


def add_routes(api: FastAPI, rt: Runtime) -> None:
    """Add ``GET /metrics`` and time every request."""
    api.add_middleware(RequestTimer)

    @api.get("/metrics", tags=["metrics"])
    async def metrics_text(request: Request) -> Response:
        """The metrics in Prometheus's text format (needs the operator role)."""
        require(request, METRICS_ROLE)
        return Response(await anyio.to_thread.run_sync(exposition, rt), media_type=CONTENT_TYPE_LATEST)
