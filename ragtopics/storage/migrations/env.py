"""Alembic environment: migrate the connection handed over by :mod:`ragtopics.storage.migrate`.

``config.attributes["connection"]`` is the connection to migrate, inside its transaction;
without one (an ``alembic`` command run by hand with ``sqlalchemy.url`` set), a
connection of :func:`ragtopics.storage.migrate.migration_engine` is used. SQLite needs
batch mode for most ALTERs, so autogenerate writes ``batch_alter_table`` blocks.
"""

from __future__ import annotations

import logging

from alembic import context
from sqlmodel import SQLModel

import ragtopics.storage.metadata  # noqa: F401  (registers the tables on SQLModel.metadata)
from ragtopics.storage.migrate import migration_engine

log = logging.getLogger("ragtopics.storage.migrate")


def log_applied(*, ctx, step, heads, run_args) -> None:
    """One log line per applied migration (a stamp is logged by whoever stamps)."""
    if step.is_stamp:
        return
    if step.is_upgrade:
        log.info("applied schema migration %s: %s", step.up_revision_id, step.up_revision.doc.splitlines()[0])
    else:
        log.info("reverted schema migration %s", ", ".join(step.down_revision_ids) or "to base")


def run_migrations(connection) -> None:
    context.configure(
        connection=connection, target_metadata=SQLModel.metadata, render_as_batch=True, on_version_apply=[log_applied]
    )  # type: ignore[arg-type]  # alembic calls it with keywords
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: revision 0002 converts data in Python")
connection = context.config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    engine = migration_engine(context.config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.begin() as conn:
            run_migrations(conn)
    finally:
        engine.dispose()
