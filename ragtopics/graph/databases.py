"""Graph Databases (Admin): the FalkorDB servers a GraphRAG Topic can keep its graph in.

The app's own Redis (embedded, or ``REDIS_URL``) is always registered, as
:data:`DEFAULT_GRAPH_DATABASE`; it is the default of every Topic's Graph Database
setting (``graph_database``, empty or ``default``). Another server is registered by name
and URL (the compose file's separate FalkorDB container, say); registering checks that it
answers and has the FalkorDB module, so a Topic never points at a server that cannot
hold its graph. A registered server that a Topic uses cannot be removed.
"""

from __future__ import annotations

import logging
import re
import threading

import redis
from sqlmodel import select

from ragtopics.errors import InvalidSettingError, StoreUnavailableError
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.storage.metadata import GraphDatabaseRow
from ragtopics.topics.topics import list_topics

log = logging.getLogger(__name__)

#: The name under which the app's own Redis is always registered.
DEFAULT_GRAPH_DATABASE = "default"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def list_graph_databases(rt: Runtime) -> list[dict[str, str]]:
    """Every registered graph database: ``[{"name", "url"}]``, the app's own Redis first (URL without password)."""
    with rt.metadata.session() as s:
        rows = s.exec(select(GraphDatabaseRow).order_by(GraphDatabaseRow.name)).all()
    return [{"name": DEFAULT_GRAPH_DATABASE, "url": _safe(rt.settings.effective_redis_url)}] + [
        {"name": r.name, "url": _safe(r.url)} for r in rows
    ]


def register_graph_database(rt: Runtime, name: str, url: str) -> None:
    """Register a FalkorDB server under ``name``.

    Raises:
        InvalidSettingError: for a bad or taken name, a bad URL, or a server that does not
            answer or lacks the FalkorDB module (nothing is stored then).
    """
    name = (name or "").strip()
    if not _NAME.fullmatch(name) or name == DEFAULT_GRAPH_DATABASE:
        raise InvalidSettingError(
            f"a graph database name is 1 to 64 letters, digits, '_', '.' or '-' (not {name!r}, "
            f"and not {DEFAULT_GRAPH_DATABASE!r}, the app's own Redis)"
        )
    if not re.match(r"rediss?://", url or ""):
        raise InvalidSettingError(f"graph database {name!r}: the URL must start with redis:// or rediss://, not {url!r}")
    _check_server(name, url)
    with rt.metadata.session() as s:
        if s.get(GraphDatabaseRow, name) is not None:
            raise InvalidSettingError(f"a graph database called {name!r} is already registered")
        s.add(GraphDatabaseRow(name=name, url=url))
    log.info("registered graph database %s at %s", name, _safe(url))


def remove_graph_database(rt: Runtime, name: str) -> None:
    """Unregister a graph database (its graphs stay on that server).

    Raises:
        InvalidSettingError: for the app's own Redis, an unknown name, or one a Topic uses.
    """
    if name == DEFAULT_GRAPH_DATABASE:
        raise InvalidSettingError("the app's own Redis is always registered")
    users = [
        t.name for t in list_topics(rt) if isinstance(t.settings, GraphRagTopicSettings) and t.settings.graph_database == name
    ]
    if users:
        raise InvalidSettingError(
            f"graph database {name!r} is used by Topic(s) {', '.join(users)}; point them at another one first"
        )
    with rt.metadata.session() as s:
        row = s.get(GraphDatabaseRow, name)
        if row is None:
            raise InvalidSettingError(f"no graph database called {name!r} is registered")
        s.delete(row)


def check_graph_database(rt: Runtime, name: str) -> None:
    """Refuse a Graph Database setting that names no registered database.

    Raises:
        InvalidSettingError: naming the setting and the registered names.
    """
    if name in ("", DEFAULT_GRAPH_DATABASE):
        return
    with rt.metadata.session() as s:
        if s.get(GraphDatabaseRow, name) is not None:
            return
    known = ", ".join(d["name"] for d in list_graph_databases(rt))
    raise InvalidSettingError(
        f"graph_database: no graph database called {name!r} is registered (registered: {known}); "
        "register it under Admin → Graph Databases or with `ragtopics graphdb add NAME URL`"
    )


def graph_database_url(rt: Runtime, name_or_url: str) -> str:
    """The URL of a registered graph database (a ``redis://`` URL is returned as given).

    Raises:
        InvalidSettingError: when the name is not registered.
    """
    if re.match(r"rediss?://", name_or_url or ""):
        return name_or_url
    if name_or_url in ("", DEFAULT_GRAPH_DATABASE):
        return rt.settings.effective_redis_url
    with rt.metadata.session() as s:
        row = s.get(GraphDatabaseRow, name_or_url)
        if row is not None:
            return row.url
    known = ", ".join(d["name"] for d in list_graph_databases(rt))
    raise InvalidSettingError(f"no graph database called {name_or_url!r} is registered (registered: {known})")


def graph_client(rt: Runtime, name: str) -> redis.Redis:
    """The Redis client of a registered graph database (the app's own for ``""`` or ``default``).

    Raises:
        StoreUnavailableError: when the name is no longer registered.
    """
    if name in ("", DEFAULT_GRAPH_DATABASE):
        return rt.redis
    with rt.metadata.session() as s:
        row = s.get(GraphDatabaseRow, name)
        url = row.url if row is not None else None
    if url is None:
        raise StoreUnavailableError(
            f"graph database {name!r} is not registered any more; register it again or change the Topic's Graph Database"
        )
    with _clients_lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5, protocol=2)  # as the runtime's
        return _clients[url]


def _check_server(name: str, url: str) -> None:
    try:
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        modules = {(m.get(b"name") or m.get("name") or b"") for m in client.module_list()}
    except (redis.RedisError, ValueError) as exc:
        raise InvalidSettingError(f"graph database {name!r}: {_safe(url)} does not answer: {exc}") from exc
    names = {m.decode() if isinstance(m, bytes) else m for m in modules}
    if "graph" not in names:
        raise InvalidSettingError(
            f"graph database {name!r}: {_safe(url)} answers but has no FalkorDB module "
            f"(modules: {', '.join(sorted(names)) or 'none'})"
        )


def _safe(url: str) -> str:
    """A URL with its password replaced by ``***``."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url or "")
