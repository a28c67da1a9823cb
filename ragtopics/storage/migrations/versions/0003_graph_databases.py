"""Graph Databases: FalkorDB servers registered under Admin, by name.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

A GraphRAG Topic's ``graph_database`` setting names one of them; empty (the default)
is the app's own Redis, which is not a row.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "graph_database",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("url", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("graph_database")
