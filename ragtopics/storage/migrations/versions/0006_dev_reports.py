"""DEV reports: an index row per report (the report is a JSON file under the data directory).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dev_report",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("topic_id", sa.String(), nullable=False, server_default=""),
        sa.Column("topic_name", sa.String(), nullable=False, server_default=""),
        sa.Column("subject", sa.String(), nullable=False, server_default=""),
        sa.Column("owner", sa.String(), nullable=False, server_default=""),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("steps", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("model_calls", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("duration_ms", sa.Float(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_dev_report_kind", "dev_report", ["kind"])
    op.create_index("ix_dev_report_topic_id", "dev_report", ["topic_id"])
    op.create_index("ix_dev_report_created_at", "dev_report", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_dev_report_created_at", "dev_report")
    op.drop_index("ix_dev_report_topic_id", "dev_report")
    op.drop_index("ix_dev_report_kind", "dev_report")
    op.drop_table("dev_report")
