"""Counts in words for the console and the command line (no Gradio here: the CLI imports it)."""

from __future__ import annotations


def plural(count: int, noun: str, many: str = "") -> str:
    """``1 chunk``, ``2 chunks``, ``0 chunks``; ``many`` for a noun not made plural by an ``s`` (``entities``)."""
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"


#: What a delete counts, in words: ``{kind: (one, many)}`` (a Topic delete counts rows by table name).
_REMOVED_WORDS = {
    "chunks": ("chunk", "chunks"),
    "files": ("file", "files"),
    "jobs": ("job", "jobs"),
    "traces": ("trace", "traces"),
    "rows": ("row", "rows"),
    "redis_keys": ("Redis key", "Redis keys"),
    "search_indexes": ("search index", "search indexes"),
    "entities": ("entity", "entities"),
    "entities_kept": ("entity kept", "entities kept"),
    "relationships_kept": ("relationship kept", "relationships kept"),
    "descriptions_changed": ("entity description rebuilt", "entity descriptions rebuilt"),
    "graph_entities": ("graph entity", "graph entities"),
    "relationships": ("relationship", "relationships"),
    "document": ("document", "documents"),
    "picture": ("picture", "pictures"),
    "chat_session": ("chat", "chats"),
    "chat_turn": ("chat turn", "chat turns"),
    "trace": ("trace", "traces"),
    "prompt_override": ("prompt", "prompts"),
    "topic_settings_version": ("settings version", "settings versions"),
    "dev_report": ("DEV report", "DEV reports"),
    "topic": ("Topic row", "Topic rows"),
    "demo_turns": ("demo question", "demo questions"),
    "demo_links_revoked": ("demo link revoked", "demo links revoked"),
}


def removed_text(removed: dict[str, int]) -> str:
    """What a delete removed, in words: ``{"chunks": 12, "document": 1}`` → ``12 chunks, 1 document``
    (kinds with nothing removed left out; ``nothing was stored`` when none)."""
    parts = []
    for kind, n in removed.items():
        if n:
            one, many = _REMOVED_WORDS.get(kind, (kind.replace("_", " "), kind.replace("_", " ")))
            parts.append(plural(n, one, many))
    return ", ".join(parts) or "nothing was stored"
