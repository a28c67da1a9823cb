"""Bounded copies of values for storing and showing: long strings and lists cut, with a mark saying what was cut."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any


def clip(value: Any, max_chars: int, max_items: int | None = None) -> Any:
    """A JSON-ready copy of ``value`` with strings cut to ``max_chars`` and lists to ``max_items`` (marked where cut);
    a dataclass instance becomes its dict.

    Args:
        value: strings, numbers, lists, tuples, dicts and dataclass instances, nested.
        max_chars: the longest string kept, in characters (a cut string ends with a mark saying how many were cut).
        max_items: the most items kept of a list or tuple (a mark item says how many were cut); None keeps all.

    Returns:
        The clipped copy; ``value`` itself is not changed.
    """
    if isinstance(value, str) and len(value) > max_chars:
        return value[:max_chars] + f"… [{len(value) - max_chars} more characters]"
    if isinstance(value, dict):
        return {k: clip(v, max_chars, max_items) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        kept = value if max_items is None else value[:max_items]
        more = [f"… [{len(value) - len(kept)} more items]"] if len(kept) < len(value) else []
        return [clip(v, max_chars, max_items) for v in kept] + more
    if is_dataclass(value) and not isinstance(value, type):
        return clip(asdict(value), max_chars, max_items)
    return value
