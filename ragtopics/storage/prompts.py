"""SQL queries for edited prompts (shared and per Topic)."""

from __future__ import annotations

from sqlmodel import col, select

from ragtopics.storage.metadata import MetadataStore, PromptOverrideRow, utcnow


def prompt_overrides(store: MetadataStore, scopes: list[str]) -> dict[tuple[str, str], str]:
    """Edited prompt texts of the given scopes: ``(scope, name) → text``."""
    with store.session() as s:
        rows = s.exec(select(PromptOverrideRow).where(col(PromptOverrideRow.scope).in_(scopes))).all()
    return {(r.scope, r.name): r.text for r in rows}


def write_override(store: MetadataStore, scope: str, name: str, text: str | None) -> None:
    """Store the edited text of prompt ``name`` for ``scope``; None deletes the edit."""
    with store.session() as s:
        row = s.exec(select(PromptOverrideRow).where(PromptOverrideRow.scope == scope, PromptOverrideRow.name == name)).first()
        if text is None:
            if row is not None:
                s.delete(row)
            return
        row = row or PromptOverrideRow(scope=scope, name=name, text=text)
        row.text, row.updated_at = text, utcnow()
        s.add(row)
