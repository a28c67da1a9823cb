"""Health checks for container platforms: ``/healthz`` (the process serves) and ``/readyz`` (it can work).

``/readyz`` checks each dependency in parallel, each within :data:`CHECK_TIMEOUT_S`: Redis with
its search module, the graph module (the app's Redis, and every registered graph database),
the SQL metadata database, the object store of the files (``FILE_STORE=s3``), and every model endpoint the roles use (``GET <base_url>/models``).
It answers 200 when every check passed and 503 when one failed, with a JSON object naming each
check. Neither needs login (a probe carries no token); they show no data and no endpoint URLs
(a store's own error message may name its host; passwords in URLs are hidden).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy import text

from ragtopics.graph.databases import graph_client, list_graph_databases
from ragtopics.ops.redis_server import REQUIRED_MODULES
from ragtopics.runtime import Runtime
from ragtopics.settings.env import ROLES

log = logging.getLogger(__name__)

#: Seconds each readiness check may take before it counts as failed.
CHECK_TIMEOUT_S = 3.0


def _modules(client) -> set[str]:
    names = {m.get(b"name", m.get("name", b"")) for m in client.module_list()}
    return {n.decode() if isinstance(n, bytes) else n for n in names}


def check_redis(rt: Runtime) -> str:
    """Ping the app's Redis and find its search module; returns what was found.

    Raises:
        RuntimeError: the search module is missing (a connection error propagates as redis-py raises it).
    """
    rt.redis.ping()
    if "search" not in _modules(rt.redis):
        raise RuntimeError(f"Redis answers but lacks the {REQUIRED_MODULES['search']} module")
    return "answers, search module loaded"


def check_graph(rt: Runtime, name: str) -> str:
    """Find the FalkorDB module on a registered graph database (``default``: the app's own Redis).

    Raises:
        RuntimeError: the module is missing; redis-py's errors when the server does not answer.
    """
    if "graph" not in _modules(graph_client(rt, name)):
        raise RuntimeError(f"the server answers but lacks the {REQUIRED_MODULES['graph']} module")
    return "answers, graph module loaded"


def check_sql(rt: Runtime) -> str:
    """Run ``SELECT 1`` on the metadata database."""
    with rt.metadata.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return "answers"


def check_endpoint(base_url: str, api_key: str) -> str:
    """``GET <base_url>/models`` on an OpenAI-compatible endpoint.

    Raises:
        RuntimeError: the server answered with an HTTP error; httpx's errors when it is not reachable.
    """
    response = httpx.get(
        base_url.rstrip("/") + "/models", headers={"authorization": f"Bearer {api_key}"}, timeout=CHECK_TIMEOUT_S
    )
    if response.status_code >= 400:
        raise RuntimeError(f"HTTP {response.status_code} from GET /models")
    return "answers"


def readiness_checks(rt: Runtime) -> dict[str, Callable[[], str]]:
    """The checks ``/readyz`` runs, by name: ``redis``, ``sql``, ``files`` (with ``FILE_STORE=s3``), ``graph:<database>``,
    ``model:<role>[,<role>...]`` (one per distinct endpoint, named by the roles it serves; the in-process embedder needs none)."""
    checks: dict[str, Callable[[], str]] = {"redis": lambda: check_redis(rt), "sql": lambda: check_sql(rt)}
    if rt.settings.file_store == "s3":  # the object store of the files (a local folder needs no check)
        checks["files"] = rt.blobs.ping
    for database in list_graph_databases(rt):
        checks[f"graph:{database['name']}"] = partial(check_graph, rt, database["name"])
    endpoints: dict[tuple[str, str], list[str]] = {}
    for role in (*ROLES, "embedding"):
        endpoint = rt.settings.endpoint(role)
        if endpoint.base_url:
            endpoints.setdefault((endpoint.base_url, endpoint.api_key), []).append(role)
    for (base_url, api_key), roles in endpoints.items():
        checks["model:" + ",".join(roles)] = partial(check_endpoint, base_url, api_key)
    return checks


def _hide_passwords(message: str) -> str:
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", message)


def readiness(rt: Runtime) -> tuple[bool, dict[str, dict]]:
    """Run every readiness check in parallel.

    Returns:
        ``(all passed, {name: {"ok": bool, "detail": str, "ms": float}})``; a check that raised or
        took longer than :data:`CHECK_TIMEOUT_S` (plus a second) has ``ok`` False and says why.
    """
    try:
        checks = readiness_checks(rt)
    except Exception as exc:
        return False, {"sql": {"ok": False, "detail": _hide_passwords(f"{type(exc).__name__}: {exc}"[:300]), "ms": 0.0}}
    results: dict[str, dict] = {}

    def run(name: str, check: Callable[[], str]) -> None:
        t0 = time.perf_counter()
        try:
            results[name] = {"ok": True, "detail": check()}
        except Exception as exc:
            results[name] = {"ok": False, "detail": _hide_passwords(f"{type(exc).__name__}: {exc}"[:300])}
        results[name]["ms"] = round((time.perf_counter() - t0) * 1000, 1)

    pool = ThreadPoolExecutor(max_workers=len(checks), thread_name_prefix="readyz")
    wait([pool.submit(run, name, check) for name, check in checks.items()], timeout=CHECK_TIMEOUT_S + 1)
    pool.shutdown(wait=False)
    out = {
        name: results.get(name, {"ok": False, "detail": f"no answer within {CHECK_TIMEOUT_S + 1:.0f} s", "ms": None})
        for name in checks
    }
    return all(r["ok"] for r in out.values()), out


def add_routes(api: FastAPI, rt: Runtime) -> None:
    """Add ``GET /healthz`` and ``GET /readyz``."""

    @api.get("/healthz", tags=["health"])
    def healthz() -> dict:
        """The process serves requests: ``{"status": "ok"}`` (checks nothing else)."""
        return {"status": "ok"}

    @api.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        """``{"status": "ready" | "not ready", "checks": {...}}``; 503 when a check failed."""
        ready, checks = readiness(rt)
        if not ready:
            log.warning("not ready: %s", ", ".join(n for n, r in checks.items() if not r["ok"]))
        return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks}, status_code=200 if ready else 503)
