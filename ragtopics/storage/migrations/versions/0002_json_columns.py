"""JSON columns hold SQL JSON instead of hand-made text; the always-empty ``trace_json`` columns go.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

``topic.settings_json``, ``topic_settings_version.settings_json``, ``document.indexed_with_json``,
``chat_turn.sources_json`` and ``chat_turn.timings_json`` become ``settings``, ``settings``,
``indexed_with``, ``sources`` and ``timings`` (JSON, not null), their text parsed and carried
over (empty text as the empty default, as the readers treated it). ``document.trace_json`` and
``chat_turn.trace_json`` are dropped: traces live in the ``trace`` table.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: table → [(old text column, new JSON column, value for empty text)]
RENAMED: dict[str, list[tuple[str, str, Any]]] = {
    "topic": [("settings_json", "settings", {})],
    "topic_settings_version": [("settings_json", "settings", {})],
    "document": [("indexed_with_json", "indexed_with", {})],
    "chat_turn": [("sources_json", "sources", []), ("timings_json", "timings", {})],
}
#: table → columns dropped for good (every release wrote ``"[]"`` into them).
DROPPED = {"document": ["trace_json"], "chat_turn": ["trace_json"]}


def upgrade() -> None:
    for table, columns in RENAMED.items():
        for _old, new, _empty in columns:
            op.add_column(table, sa.Column(new, sa.JSON(), nullable=True))
        _copy(table, [(old, sa.String(), new, sa.JSON(), lambda text, empty=empty: _parsed(text, empty))
                      for old, new, empty in columns])
        with op.batch_alter_table(table) as batch:
            for old, new, _empty in columns:
                batch.alter_column(new, existing_type=sa.JSON(), nullable=False)
                batch.drop_column(old)
            for dropped in DROPPED.get(table, []):
                batch.drop_column(dropped)


def downgrade() -> None:
    for table, columns in RENAMED.items():
        for old, _new, _empty in columns:
            op.add_column(table, sa.Column(old, sa.String(), nullable=True))
        for dropped in DROPPED.get(table, []):
            op.add_column(table, sa.Column(dropped, sa.String(), nullable=True, server_default="[]"))
        _copy(table, [(new, sa.JSON(), old, sa.String(), json.dumps) for old, new, _empty in columns])
        with op.batch_alter_table(table) as batch:
            for old, new, _empty in columns:
                batch.alter_column(old, existing_type=sa.String(), nullable=False)
                batch.drop_column(new)
            for dropped in DROPPED.get(table, []):
                batch.alter_column(dropped, existing_type=sa.String(), nullable=False, server_default=None)


def _copy(table: str, moves: list[tuple[str, sa.types.TypeEngine, str, sa.types.TypeEngine, Any]]) -> None:
    """Fill each target column from its source column through a conversion, row by row.

    Args:
        table: the table.
        moves: ``(source column, its type, target column, its type, convert(source value) -> target value)``.
    """
    bind = op.get_bind()
    t = sa.table(table, sa.column("id"), *(sa.column(src, src_type) for src, src_type, *_ in moves),
                 *(sa.column(dst, dst_type) for _s, _st, dst, dst_type, _c in moves))
    rows = bind.execute(sa.select(t.c.id, *(t.c[src] for src, *_ in moves))).all()
    if not rows:
        return
    params = []
    for row in rows:
        try:  # bound names differ from the column names: SQLAlchemy reserves those for the SET clause
            params.append({"row_id": row[0], **{f"new_{dst}": convert(row[i + 1])
                                                for i, (_s, _st, dst, _dt, convert) in enumerate(moves)}})
        except ValueError as exc:
            raise ValueError(f"{table} row {row[0]!r}: {exc}") from None
    update = t.update().where(t.c.id == sa.bindparam("row_id")).values(
        {dst: sa.bindparam(f"new_{dst}", type_=dst_type) for _s, _st, dst, dst_type, _c in moves})
    bind.execute(update, params)


def _parsed(text: str | None, empty: Any) -> Any:
    """The JSON value stored as ``text``; ``empty`` for empty text.

    Raises:
        ValueError: when the text is not JSON (the migration then stops and changes nothing).
    """
    if not text:
        return empty
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the stored value is not JSON ({exc}): {text[:80]!r}") from None
