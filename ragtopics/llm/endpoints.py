"""Model endpoints per role set in the console, over the environment's.

Admin → LLM Configuration stores a role's OpenAI-compatible endpoint (URL, model, API key,
whether it takes tools and pictures) in the metadata database (:class:`RoleEndpointRow`).
:func:`apply_overrides` folds the stored endpoints into a runtime's settings, so every
caller of ``settings.endpoint(role)`` (the gateway, the router's and extraction's "is it
the bundled model?" checks) sees them. The console applies them when it saves; workers
apply them at the start of every job (:func:`refresh`), so a change reaches them with the
next job. API keys stay on the server: :func:`describe` says only whether one is set.

The embedding model is not set here: each Topic's index records the model and dimension it
was built with, so changing it is a process setting (``EMBEDDING_*``) and a re-embed.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from sqlmodel import select

from ragtopics.errors import ConfigurationError
from ragtopics.runtime import Runtime
from ragtopics.settings.env import ROLES, Settings
from ragtopics.storage.metadata import RoleEndpointRow, utcnow

log = logging.getLogger(__name__)

#: Settings fields of each role: the Language Model's are the LLM_* ones every other role inherits.
_FIELDS = ("base_url", "model", "api_key", "supports_tools", "supports_images")


def _prefix(role: str) -> str:
    return "llm" if role == "language_model" else role


def stored_overrides(rt: Runtime) -> dict[str, RoleEndpointRow]:
    """Every endpoint set in the console, by role."""
    with rt.metadata.session() as s:
        return {row.role: row for row in s.exec(select(RoleEndpointRow))}


def with_overrides(settings: Settings, rows: dict[str, RoleEndpointRow]) -> Settings:
    """A copy of ``settings`` whose role fields carry the stored endpoints (roles without one keep the environment's)."""
    update: dict[str, Any] = {}
    for role, row in rows.items():
        if role not in ROLES:
            continue
        for name in _FIELDS:
            update[f"{_prefix(role)}_{name}"] = getattr(row, name)
    return settings.model_copy(update=update) if update else settings


def apply_overrides(rt: Runtime) -> None:
    """Make ``rt`` (its settings and gateway) use the stored endpoints over the environment's settings.

    The environment's settings are the ones ``rt`` had before the last call, unless someone has
    replaced ``rt.settings`` since (then those are the new base).
    """
    produced = getattr(rt, "_overridden_settings", None)
    base = rt._environment_settings if produced is not None and rt.settings is produced else rt.settings
    settings = with_overrides(base, stored_overrides(rt))
    rt._environment_settings, rt._overridden_settings, rt.settings = base, settings, settings
    gateway = getattr(rt, "_gateway", None)
    if gateway is not None:
        gateway.settings = settings


def refresh(rt: Runtime) -> None:
    """Re-read the stored endpoints (workers call this as each job starts); a failure keeps the current ones."""
    try:
        apply_overrides(rt)
    except Exception as exc:
        log.warning("could not re-read the model endpoints set in the console: %s", exc)


def _check_url(url: str) -> str:
    url = (url or "").strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"Endpoint URL: must be http(s)://host[:port]/v1, got {url!r}")
    if parts.username or parts.password or parts.query:
        raise ConfigurationError("Endpoint URL: no user, password or query in the URL; put the API key in the API key field")
    return url


def _check_price(value: Any, field: str) -> float | None:
    """A price per 1M tokens: a number >= 0, or None/"" for none entered."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        price = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{field}: a number (price per 1M tokens), got {value!r}") from None
    if not price >= 0 or price == float("inf"):
        raise ConfigurationError(f"{field}: must be 0 or more, got {value!r}")
    return price


def save_endpoint(
    rt: Runtime,
    role: str,
    *,
    base_url: str,
    model: str,
    api_key: str | None,
    supports_tools: bool,
    supports_images: bool,
    by: str = "",
    price_in_per_mtok: float | str | None = None,
    price_out_per_mtok: float | str | None = None,
) -> None:
    """Store a role's endpoint and apply it to ``rt``.

    Args:
        api_key: the new key; None or "" keeps the stored one (the console never shows it back).
        price_in_per_mtok, price_out_per_mtok: what the endpoint charges per 1M input / output tokens, in
            the operator's currency; None or "" for no price (the cost estimate then shows no money for it).

    Raises:
        ConfigurationError: an unknown role, a malformed URL, an empty model name or a price that is not a
            number >= 0 (each names the field).
    """
    if role not in ROLES:
        raise ConfigurationError(f"Role: must be one of {', '.join(ROLES)}, got {role!r}")
    base_url, model = _check_url(base_url), (model or "").strip()
    if not model:
        raise ConfigurationError("Model: name the model the endpoint serves")
    price_in = _check_price(price_in_per_mtok, "Price per 1M input tokens")
    price_out = _check_price(price_out_per_mtok, "Price per 1M output tokens")
    with rt.metadata.session() as s:
        row = s.get(RoleEndpointRow, role) or RoleEndpointRow(role=role, base_url=base_url, model=model)
        kept = row.api_key if not api_key else api_key.strip()
        row.base_url, row.model, row.api_key = base_url, model, kept or "not-needed"
        row.supports_tools, row.supports_images, row.updated_by, row.updated_at = supports_tools, supports_images, by, utcnow()
        row.price_in_per_mtok, row.price_out_per_mtok = price_in, price_out
        s.add(row)
    apply_overrides(rt)


def clear_endpoint(rt: Runtime, role: str) -> bool:
    """Forget a role's console endpoint (the environment's applies again); returns whether one was stored."""
    with rt.metadata.session() as s:
        row = s.get(RoleEndpointRow, role)
        if row is not None:
            s.delete(row)
    apply_overrides(rt)
    return row is not None


def describe(rt: Runtime, role: str) -> dict[str, Any]:
    """What the console shows of a role's endpoint: URL, model, flags, whether a key is set and where it comes from,
    and its prices per 1M input/output tokens (None when none was entered)."""
    endpoint = rt.settings.endpoint(role)
    row = stored_overrides(rt).get(role)
    has_key = bool(endpoint.api_key) and endpoint.api_key != "not-needed"
    return {
        "base_url": endpoint.base_url or "",
        "model": endpoint.model,
        "api_key": "set" if has_key else "none",
        "supports_tools": endpoint.supports_tools,
        "supports_images": endpoint.supports_images,
        "source": "console" if row is not None else ("bundled model" if endpoint.is_bundled else "environment"),
        "price_in_per_mtok": row.price_in_per_mtok if row is not None else None,
        "price_out_per_mtok": row.price_out_per_mtok if row is not None else None,
    }
