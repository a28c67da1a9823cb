"""Schema migrations of the SQL metadata (Alembic), applied when a :class:`MetadataStore` opens.

The migration scripts ship in ``ragtopics/storage/migrations/versions/``; Alembic is
configured here, in code, so no ``alembic.ini`` is needed. :func:`upgrade_to_head` brings
any database to the newest revision:

* a brand-new database is created by the migrations (revision ``0001`` onwards);
* a database from the release before migrations (tables, no ``alembic_version``) is
  recognised and marked as revision ``0001``, then upgraded;
* a database already at head is left alone (one cheap query).

All pending migrations run in one transaction (SQLite included), so a failed migration
leaves the database as it was. Two processes starting together (the console and the
worker) do not race: for SQLite a file lock next to the database file lets one migrate
while the other waits; PostgreSQL uses an advisory lock.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.pool import NullPool

from ragtopics.errors import ConfigurationError

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
#: The revision whose schema the release before migrations created with ``create_all``.
BASELINE_REVISION = "0001"
#: The tables of :data:`BASELINE_REVISION`; a database holding some of them but no
#: ``alembic_version`` comes from the release before migrations.
BASELINE_TABLES = (
    "topic",
    "topic_settings_version",
    "document",
    "picture",
    "chat_session",
    "chat_turn",
    "prompt_override",
    "trace",
)
#: Arbitrary key of the PostgreSQL advisory lock held while migrating.
_PG_LOCK_KEY = 7_242_315_001


class MigrationError(ConfigurationError):
    """The metadata database could not be brought to the current schema."""


@contextmanager
def quiet_alembic() -> Iterator[None]:
    """Hold back Alembic's INFO lines (plugins on import, context and steps per command).

    Alembic is imported only under this, on first need (its plugins log on import); this
    module logs one line per applied migration instead.
    """
    logger = logging.getLogger("alembic")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration for the package's migrations, built in code.

    Args:
        url: SQLAlchemy URL for ``env.py`` to connect to when no connection is handed
            over in ``config.attributes["connection"]``; None when one always is.

    Returns:
        The :class:`alembic.config.Config` (``script_location`` = the package's
        ``migrations`` folder; new revision files are named ``<rev>_<slug>.py``).
    """
    with quiet_alembic():
        # deferred: alembic takes about a second to import; only a schema check or upgrade needs it
        from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest revision among the package's migration scripts (``"0002"``...)."""
    with quiet_alembic():
        # deferred: alembic takes about a second to import; only a schema check or upgrade needs it
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise MigrationError("the package holds no migration scripts")
    return head


def schema_revision(engine: Engine) -> str | None:
    """The revision a database is at: its ``alembic_version``, None when it has none (new or pre-migrations)."""
    with engine.connect() as conn:
        return _revision(conn)


def _revision(conn: Connection) -> str | None:
    # read directly rather than through MigrationContext, which logs at INFO on every start-up
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade_to_head(url: str) -> None:
    """Bring the database at ``url`` to the newest revision; nothing happens when it is there already.

    Args:
        url: SQLAlchemy URL; for a ``sqlite:///`` file, the lock file is ``<file>.migrate.lock``.

    Raises:
        MigrationError: when a migration fails (the database is left as it was), the
            database is at a revision this release does not know (a newer release wrote
            it), or ``url`` is an in-memory SQLite (each connection would be another database).
    """
    if make_url(url).get_backend_name() == "sqlite" and sqlite_path(url) is None:
        raise MigrationError(f"{url} is an in-memory SQLite database; the metadata needs a file (sqlite:///PATH)")
    engine = migration_engine(url)
    try:
        if schema_revision(engine) == head_revision():
            return
        with _exclusive(url), quiet_alembic(), engine.begin() as conn:
            _upgrade(conn)
    finally:
        engine.dispose()


def migration_engine(url: str) -> Engine:
    """An engine for running migrations: no pooling; for SQLite, foreign keys off and real transactions.

    SQLite's batch mode rebuilds a table by copying it, dropping the original and renaming
    the copy, which enforced foreign keys would refuse; :func:`_upgrade` checks them
    all before committing instead. pysqlite's own transaction handling would commit
    before DDL, so BEGIN is emitted here (the SQLAlchemy recipe for transactional DDL).
    """
    if make_url(url).get_backend_name() != "sqlite":
        return create_engine(url, poolclass=NullPool)
    engine = create_engine(url, poolclass=NullPool, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=OFF")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _upgrade(conn: Connection) -> None:
    """Run the pending migrations on ``conn`` (inside its transaction), after marking a pre-migrations database."""
    # deferred: alembic takes about a second to import; only a schema check or upgrade needs it
    from alembic import command

    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY})")
    current = _revision(conn)  # again: another process may have migrated meanwhile
    if current == head_revision():
        return
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    try:
        if current is None:
            _mark_baseline(conn, cfg)
        command.upgrade(cfg, "head")
    except Exception as exc:
        raise MigrationError(
            f"the metadata database could not be migrated from revision {current or 'none'} to {head_revision()}: {exc}"
        ) from exc
    if conn.dialect.name == "sqlite":
        broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise MigrationError(f"the migrated metadata database has rows whose references are broken: {broken[:5]}")


def _mark_baseline(conn: Connection, cfg: Config) -> None:
    """Stamp a database from the release before migrations as :data:`BASELINE_REVISION`.

    That release created its tables with ``create_all``, which also added the tables an
    even older release lacked; such missing tables are created by running the baseline
    revision, which skips the tables that exist.
    """
    # deferred: alembic takes about a second to import; only a schema check or upgrade needs it
    from alembic import command

    tables = set(inspect(conn).get_table_names())
    present = [t for t in BASELINE_TABLES if t in tables]
    if not present:
        return
    missing = [t for t in BASELINE_TABLES if t not in tables]
    log.info(
        "metadata database from before schema migrations: marking it as revision %s%s",
        BASELINE_REVISION,
        f" (creating {', '.join(missing)})" if missing else "",
    )
    if missing:
        command.upgrade(cfg, BASELINE_REVISION)
    else:
        command.stamp(cfg, BASELINE_REVISION)


@contextmanager
def _exclusive(url: str) -> Iterator[None]:
    """Hold ``<sqlite file>.migrate.lock`` (``flock``) while migrating; no file lock for other URLs."""
    path = sqlite_path(url)
    if path is None:
        yield
        return
    try:
        # deferred: fcntl exists only on POSIX; elsewhere the file lock is skipped
        import fcntl
    except ImportError:  # not POSIX: BEGIN IMMEDIATE and the re-check in _upgrade still serialise
        yield
        return
    with open(path.with_name(path.name + ".migrate.lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def new_revision(message: str) -> Path:
    """Write a new migration script into ``migrations/versions/``, autogenerated from the models.

    The models are compared with a scratch SQLite database upgraded to head, so the
    script holds what changed in ``ragtopics/storage/metadata.py`` since the newest
    revision (review it: renames come out as drop + add, and data is never carried over).

    Args:
        message: one line saying what the revision changes.

    Returns:
        The path of the new script, named ``<next number>_<slug>.py``.
    """
    import ragtopics.storage.metadata  # noqa: F401  (the models autogenerate compares with)

    with quiet_alembic():
        # deferred: alembic takes about a second to import; only a schema check or upgrade needs it
        from alembic import command
        from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    numbers = [int(r.revision) for r in script.walk_revisions() if re.fullmatch(r"\d+", r.revision)]
    rev_id = f"{max(numbers, default=0) + 1:04d}"
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'scratch.db'}"
        upgrade_to_head(url)
        engine = migration_engine(url)
        try:
            with engine.begin() as conn:
                cfg = alembic_config()
                cfg.attributes["connection"] = conn
                written = command.revision(cfg, message=message, autogenerate=True, rev_id=rev_id)
        finally:
            engine.dispose()
    head_revision.cache_clear()
    if written is None or isinstance(written, list):
        raise MigrationError(f"alembic wrote no single migration script for {message!r}")
    return Path(written.path)
