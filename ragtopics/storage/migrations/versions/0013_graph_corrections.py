"""Graph corrections: an operator's merge, split, rename, retype or delete of an entity, kept as a rule of the Topic.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "graph_correction",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("topic_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("names", sa.JSON(), nullable=False),
        sa.Column("target_name", sa.String(), nullable=False, server_default=""),
        sa.Column("target_type", sa.String(), nullable=False, server_default=""),
        sa.Column("outcome", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_graph_correction_topic_id", "graph_correction", ["topic_id"])


def downgrade() -> None:
    op.drop_index("ix_graph_correction_topic_id", "graph_correction")
    op.drop_table("graph_correction")
