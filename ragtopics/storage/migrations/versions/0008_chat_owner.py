"""A chat session belongs to the console user who started it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

Chats saved before this revision have no owner ("") and stay visible where no one logs in.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chat_session") as batch:
        batch.add_column(sa.Column("owner", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("chat_session") as batch:
        batch.drop_column("owner")
