"""The product's HTTP API beside the console: its own API (``/api/v1``), Topics as OpenAI-compatible models,
health checks and metrics.

:func:`add_api_routes` adds every route to the console's FastAPI app. The console's access
middleware (:mod:`ragtopics.ui.web`) has identified the caller of every request before a
route runs (an API token, a session cookie, or everyone in open mode); the routes here check
the role they need with the console's own role table.
"""

from __future__ import annotations

from fastapi import FastAPI

from ragtopics.runtime import Runtime


def add_api_routes(api: FastAPI, rt: Runtime) -> None:
    """Add the OpenAI-compatible routes (``/v1``), the product's API (``/api/v1``), ``/healthz``, ``/readyz``
    and ``/metrics`` to ``api``.

    Args:
        api: the console's FastAPI app (before Gradio is mounted at ``/``).
        rt: the runtime whose stores and gateway the routes use.
    """
    # deferred: importing one module of the package (api.shapes in the CLI, api.errors in the console) must not load every route
    from ragtopics.api import errors, health, metrics, openai_compat, rest

    errors.install(api)
    openai_compat.add_routes(api, rt)
    health.add_routes(api, rt)
    metrics.add_routes(api, rt)
    rest.mount(api, rt)
