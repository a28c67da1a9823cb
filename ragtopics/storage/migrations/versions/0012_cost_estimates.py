"""Cost preview: prices per endpoint, each upload's estimate beside its actual counts, figures measured here.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

Endpoints saved before this revision have no price (the estimate then shows no money).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("role_endpoint") as batch:
        batch.add_column(sa.Column("price_in_per_mtok", sa.Float(), nullable=True))
        batch.add_column(sa.Column("price_out_per_mtok", sa.Float(), nullable=True))
    op.create_table(
        "upload_cost",
        sa.Column("job_id", sa.String(), primary_key=True),
        sa.Column("document_id", sa.String(), nullable=False, index=True),
        sa.Column("topic_id", sa.String(), nullable=False, index=True),
        sa.Column("file_name", sa.String(), nullable=False, server_default=""),
        sa.Column("estimate", sa.JSON(), nullable=False),
        sa.Column("actual", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "usage_figure",
        sa.Column("name", sa.String(), primary_key=True),
        sa.Column("count", sa.Float(), nullable=False, server_default="0"),
        sa.Column("units", sa.Float(), nullable=False, server_default="0"),
        sa.Column("tokens_in", sa.Float(), nullable=False, server_default="0"),
        sa.Column("tokens_out", sa.Float(), nullable=False, server_default="0"),
        sa.Column("seconds", sa.Float(), nullable=False, server_default="0"),
        sa.Column("samples", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_figure")
    op.drop_table("upload_cost")
    with op.batch_alter_table("role_endpoint") as batch:
        batch.drop_column("price_out_per_mtok")
        batch.drop_column("price_in_per_mtok")
