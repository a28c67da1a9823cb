"""On PostgreSQL, the time columns hold instants (``timestamp with time zone``), as the models say.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

The models store timezone-aware UTC datetimes; the earlier revisions created ``timestamp without time
zone`` columns, into which PostgreSQL converts an aware value with the session's time zone (a server not
set to UTC would shift every stored time). The stored values are UTC, so they are read as UTC. SQLite
keeps datetimes as text either way: nothing changes there.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

#: The time columns of revisions 0001 to 0009: table -> columns.
COLUMNS = {
    "topic": ("created_at", "updated_at"),
    "topic_settings_version": ("created_at",),
    "document": ("created_at", "updated_at"),
    "picture": ("created_at",),
    "chat_session": ("created_at",),
    "chat_turn": ("created_at",),
    "graph_database": ("created_at",),
    "prompt_override": ("updated_at",),
    "trace": ("created_at",),
    "user": ("created_at",),
    "api_token": ("created_at", "last_used_at"),
    "dev_report": ("created_at",),
    "role_endpoint": ("updated_at",),
}


def _retype(target: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in COLUMNS.items():
        changes = ", ".join(f'ALTER COLUMN "{c}" TYPE {target} USING "{c}" AT TIME ZONE \'UTC\'' for c in columns)
        op.execute(f'ALTER TABLE "{table}" {changes}')


def upgrade() -> None:
    _retype("TIMESTAMP WITH TIME ZONE")


def downgrade() -> None:
    _retype("TIMESTAMP WITHOUT TIME ZONE")
