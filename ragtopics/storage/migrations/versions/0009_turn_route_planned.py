"""A saved turn keeps the way the router chose when its search fell back to another one.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

Turns saved before this revision have an empty planned way (their route reason still says why).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chat_turn") as batch:
        batch.add_column(sa.Column("route_planned", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("chat_turn") as batch:
        batch.drop_column("route_planned")
