"""Console users (argon2 password hashes, roles, DEV_REPORTING) and their API tokens.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user",
        sa.Column("username", sa.String(), primary_key=True),
        sa.Column("password_hash", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("dev_reporting", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("username", sa.String(), sa.ForeignKey("user.username"), nullable=False),
        sa.Column("label", sa.String(), nullable=False, server_default=""),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_api_token_username", "api_token", ["username"])
    op.create_index("ix_api_token_digest", "api_token", ["digest"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_api_token_digest", "api_token")
    op.drop_index("ix_api_token_username", "api_token")
    op.drop_table("api_token")
    op.drop_table("user")
