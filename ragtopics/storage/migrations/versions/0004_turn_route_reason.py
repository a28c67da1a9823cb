"""A saved turn keeps why its way was taken: the router's reason and method.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Turns saved before this revision have an empty reason and method.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chat_turn") as batch:
        batch.add_column(sa.Column("route_reason", sa.String(), nullable=False, server_default=""))
        batch.add_column(sa.Column("route_method", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("chat_turn") as batch:
        batch.drop_column("route_method")
        batch.drop_column("route_reason")
