"""Baseline: the schema the release before migrations created with ``create_all``.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

JSON-valued columns are text here (``*_json``); revision 0002 turns them into JSON.
A table that already exists is skipped: :mod:`ragtopics.storage.migrate` runs this
revision on a pre-migrations database only to add the tables a still older release
lacked (``create_all`` used to add them at start-up).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def text(name: str) -> sa.Column:
    return sa.Column(name, sa.String(), nullable=False)


def integer(name: str) -> sa.Column:
    return sa.Column(name, sa.Integer(), nullable=False)


def created() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(), nullable=False)


def topic_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["topic_id"], ["topic.id"])


def _tables() -> dict[str, tuple[list[sa.SchemaItem], list[tuple[str, list[str], bool]]]]:
    """Each table's columns and constraints, and its indexes as ``(name, columns, unique)``, in creation order."""
    return {
        "topic": ([text("id"), text("name"), text("kind"), text("description"), text("settings_json"),
                   integer("settings_version"), created(), sa.Column("updated_at", sa.DateTime(), nullable=False),
                   sa.PrimaryKeyConstraint("id")],
                  [("ix_topic_name", ["name"], True)]),
        "prompt_override": ([integer("id"), text("scope"), text("name"), text("text"),
                             sa.Column("updated_at", sa.DateTime(), nullable=False), sa.PrimaryKeyConstraint("id"),
                             sa.UniqueConstraint("scope", "name")],
                            [("ix_prompt_override_scope", ["scope"], False)]),
        "trace": ([integer("id"), text("kind"), text("owner"), text("topic_id"), text("subject"), integer("size_bytes"),
                   sa.Column("events", sa.JSON(), nullable=True), created(), sa.PrimaryKeyConstraint("id")],
                  [("ix_trace_kind", ["kind"], False), ("ix_trace_owner", ["owner"], False),
                   ("ix_trace_topic_id", ["topic_id"], False)]),
        "topic_settings_version": ([integer("id"), text("topic_id"), integer("version"), text("settings_json"), created(),
                                    topic_fk(), sa.PrimaryKeyConstraint("id")],
                                   [("ix_topic_settings_version_topic_id", ["topic_id"], False)]),
        "document": ([text("id"), text("topic_id"), text("file_name"), text("content_sha256"), integer("size_bytes"),
                      text("blob_path"), text("pending_sha256"), text("pending_blob_path"), text("status"),
                      integer("chunk_count"), text("job_id"), text("error"), text("warning"), text("indexed_with_json"),
                      text("trace_json"), created(), sa.Column("updated_at", sa.DateTime(), nullable=False),
                      topic_fk(), sa.PrimaryKeyConstraint("id"), sa.UniqueConstraint("topic_id", "file_name")],
                     [("ix_document_topic_id", ["topic_id"], False)]),
        "picture": ([text("id"), text("topic_id"), text("document_id"), text("blob_path"), text("caption"),
                     text("description"), sa.Column("page", sa.Integer(), nullable=True), created(), topic_fk(),
                     sa.PrimaryKeyConstraint("id")],
                    [("ix_picture_document_id", ["document_id"], False), ("ix_picture_topic_id", ["topic_id"], False)]),
        "chat_session": ([text("id"), text("topic_id"), text("title"), created(), topic_fk(), sa.PrimaryKeyConstraint("id")],
                         [("ix_chat_session_topic_id", ["topic_id"], False)]),
        "chat_turn": ([integer("id"), text("session_id"), text("topic_id"), text("question"), text("answer"),
                       text("sources_json"), text("route"), sa.Column("route_confidence", sa.Float(), nullable=True),
                       text("timings_json"), text("trace_json"), created(),
                       sa.ForeignKeyConstraint(["session_id"], ["chat_session.id"]), topic_fk(),
                       sa.PrimaryKeyConstraint("id")],
                      [("ix_chat_turn_session_id", ["session_id"], False), ("ix_chat_turn_topic_id", ["topic_id"], False)]),
    }


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    for name, (items, indexes) in _tables().items():
        if name in existing:
            continue
        op.create_table(name, *items)
        for index_name, columns, unique in indexes:
            op.create_index(index_name, name, columns, unique=unique)


def downgrade() -> None:
    for name, (_items, indexes) in reversed(list(_tables().items())):
        for index_name, _columns, _unique in indexes:
            op.drop_index(index_name, table_name=name)
        op.drop_table(name)
