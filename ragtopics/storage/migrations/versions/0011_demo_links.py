"""Demo links (one Topic's chat without login) and the questions their visitors asked.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "demo_link",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("topic_id", sa.String(), nullable=False),
        sa.Column("topic_name", sa.String(), nullable=False, server_default=""),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("allow_sources", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("visitor_rate", sa.Integer(), nullable=False, server_default="5"),
        sa.Column("link_rate", sa.Integer(), nullable=False, server_default="30"),
    )
    op.create_index("ix_demo_link_topic_id", "demo_link", ["topic_id"])
    op.create_index("ix_demo_link_digest", "demo_link", ["digest"], unique=True)
    op.create_table(
        "demo_turn",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("link_id", sa.String(), sa.ForeignKey("demo_link.id"), nullable=False),
        sa.Column("visitor", sa.String(), nullable=False, server_default=""),
        sa.Column("question", sa.String(), nullable=False),
        sa.Column("answer", sa.String(), nullable=False),
        sa.Column("sources", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_demo_turn_link_id", "demo_turn", ["link_id"])


def downgrade() -> None:
    op.drop_index("ix_demo_turn_link_id", "demo_turn")
    op.drop_table("demo_turn")
    op.drop_index("ix_demo_link_digest", "demo_link")
    op.drop_index("ix_demo_link_topic_id", "demo_link")
    op.drop_table("demo_link")
