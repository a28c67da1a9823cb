"""Demo links: a link that lets whoever holds it chat with one Topic, without an account, for a while.

An operator makes a link for a Topic (:func:`create_link`); its token is a
``secrets.token_urlsafe(32)`` string shown once, and only its SHA-256 digest is stored. The link
opens ``/demo/<token>`` (:mod:`ragtopics.ui.demo_page`), a page whose only capability is asking
that Topic. A link expires (24 hours by default, 30 days at most), can be revoked at once
(:func:`revoke_link`), and limits questions per minute per visitor and per link
(:func:`take_question`). What visitors ask is kept in its own table (:class:`DemoTurnRow`),
apart from users' chats, listed for the operator (:func:`list_turns`) and deleted on request.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import overload
from urllib.parse import urlsplit

from sqlmodel import col, delete, func, select

from ragtopics.errors import ConfigurationError, NotFoundError, RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.storage.metadata import DemoLinkRow, DemoTurnRow, utcnow
from ragtopics.topics.delete import TopicDeletion, add_topic_delete_step
from ragtopics.topics.topics import Topic, get_topic

#: URL path of the demo pages; the token follows it.
DEMO_PREFIX = "/demo/"
#: Hours a link lasts when none are given.
DEFAULT_HOURS = 24
#: The longest a link may last: 30 days.
MAX_HOURS = 30 * 24
#: Questions per minute one visitor may ask through a link, when not given.
DEFAULT_VISITOR_RATE = 5
#: Questions per minute all visitors of one link together may ask, when not given.
DEFAULT_LINK_RATE = 30
#: The largest per-minute rate accepted (either kind).
MAX_RATE = 600
#: Seconds of one rate window.
RATE_WINDOW_S = 60
#: The owner that source links of a demo answer are signed for: ``demo:<link id>`` (no username has a colon).
SOURCE_OWNER_PREFIX = "demo:"
#: Redis key of the console's current share link (written at start, so that the CLI can name it too).
SHARE_URL_KEY = "rt:console:share-url"
#: Seconds the share link is remembered (Gradio's share links last 72 hours).
SHARE_URL_TTL_S = 72 * 3600
_RATE_PREFIX = "rt:demo-rate:"


class DemoLinkGone(RagTopicsError):
    """A demo token that opens nothing: unknown (404), revoked or expired (410), or its Topic deleted (404).

    Attributes:
        status: the HTTP status the demo page answers with.
        title: a short heading for the page.
    """

    def __init__(self, status: int, title: str, message: str):
        super().__init__(message)
        self.status = status
        self.title = title


class RateLimited(RagTopicsError):
    """Too many questions in the current minute, from this visitor or through this link.

    Attributes:
        retry_after_s: seconds until the window that refused the question ends (at least 1).
    """

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class DemoLink:
    """A demo link as operators see it (never its token).

    Attributes:
        id: the link's short id (``ragtopics demo revoke ID``).
        topic_id, topic_name: the Topic it opens (the name as it was when the link was made).
        created_by: the console user who made it ("" from the CLI).
        created_at, expires_at: UTC, timezone-aware.
        revoked_at: when it was revoked, or None.
        allow_sources: whether visitors may download the cited source files.
        visitor_rate, link_rate: questions per minute per visitor, and per link.
        turns: how many questions its visitors asked that are kept (filled by :func:`list_links`).
    """

    id: str
    topic_id: str
    topic_name: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    allow_sources: bool
    visitor_rate: int
    link_rate: int
    turns: int = 0

    def state(self, now: datetime | None = None) -> str:
        """``active``, ``revoked`` or ``expired``."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if (now or utcnow()) >= self.expires_at else "active"

    def to_dict(self) -> dict:
        """The link as JSON-ready data (times as ISO 8601 UTC)."""
        revoked = self.revoked_at.isoformat() if self.revoked_at else None
        return {
            "id": self.id,
            "topic": self.topic_name,
            "topic_id": self.topic_id,
            "state": self.state(),
            "created_by": self.created_by,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "revoked_at": revoked,
            "allow_sources": self.allow_sources,
            "visitor_rate": self.visitor_rate,
            "link_rate": self.link_rate,
            "turns": self.turns,
        }


@dataclass(frozen=True, slots=True)
class NewLink:
    """A link just made: the link, its token (shown this once) and where it can be opened.

    Attributes:
        link: the stored link.
        token: the secret part of the URL.
        path: ``/demo/<token>``.
        urls: full URLs that open it (behind the public base URL, the request's host, the share link).
        notes: plain sentences on where the link works (or does not).
    """

    link: DemoLink
    token: str
    path: str
    urls: list[str]
    notes: list[str]

    def to_dict(self) -> dict:
        """JSON-ready: the link's fields with ``token``, ``path``, ``urls`` and ``notes``."""
        return {**self.link.to_dict(), "token": self.token, "path": self.path, "urls": self.urls, "notes": self.notes}


@overload
def _aware(value: datetime) -> datetime: ...
@overload
def _aware(value: datetime | None) -> datetime | None: ...
def _aware(value: datetime | None) -> datetime | None:
    """A datetime read back from SQLite (naive, UTC) made timezone-aware."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _link(row: DemoLinkRow, turns: int = 0) -> DemoLink:
    return DemoLink(
        row.id,
        row.topic_id,
        row.topic_name,
        row.created_by,
        _aware(row.created_at),
        _aware(row.expires_at),
        _aware(row.revoked_at),
        row.allow_sources,
        row.visitor_rate,
        row.link_rate,
        turns,
    )


def digest(token: str) -> str:
    """Hex SHA-256 of a demo token, as stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _checked_hours(hours: float | None) -> float:
    if hours is None:
        return DEFAULT_HOURS
    if not isinstance(hours, (int, float)) or isinstance(hours, bool) or hours != hours:
        raise ConfigurationError(f"hours: a number of hours is needed, got {hours!r}")
    if hours <= 0:
        raise ConfigurationError(f"hours: a demo link must last some time (more than 0 hours), got {hours:g}")
    if hours > MAX_HOURS:
        raise ConfigurationError(
            f"hours: a demo link lasts at most 30 days ({MAX_HOURS} hours), got {hours:g}; make a new link when it expires"
        )
    return float(hours)


def _checked_rate(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RATE:
        raise ConfigurationError(f"{name}: questions per minute from 1 to {MAX_RATE}, got {value!r}")
    return value


def create_link(
    rt: Runtime,
    topic_name: str,
    *,
    hours: float | None = None,
    allow_sources: bool = False,
    visitor_rate: int | None = None,
    link_rate: int | None = None,
    created_by: str = "",
    base_urls: list[str] | None = None,
) -> NewLink:
    """Make a demo link for one Topic.

    Args:
        rt: the runtime.
        topic_name: the Topic's name or id.
        hours: how long the link lasts (default 24; more than 0, at most 720 = 30 days).
        allow_sources: let visitors download the files an answer cites.
        visitor_rate: questions per minute one visitor may ask (default 5; 1 to 600).
        link_rate: questions per minute all visitors of the link may ask together (default 30; 1 to 600).
        created_by: the console user making it ("" from the CLI).
        base_urls: where the console is reached (``https://host/``) as the caller sees it, besides
            ``PUBLIC_BASE_URL`` and the share link (see :func:`link_urls`).

    Returns:
        The :class:`NewLink`, with its token: shown this once, it cannot be read back.

    Raises:
        NotFoundError: no such Topic.
        ConfigurationError: hours or a rate out of range (the message says the limits).
    """
    topic = get_topic(rt, topic_name)
    length = _checked_hours(hours)
    visitor = _checked_rate("rate", visitor_rate, DEFAULT_VISITOR_RATE)
    whole = _checked_rate("link rate", link_rate, DEFAULT_LINK_RATE)
    token = secrets.token_urlsafe(32)
    now = utcnow()
    row = DemoLinkRow(
        id=secrets.token_hex(4),
        topic_id=topic.id,
        topic_name=topic.name,
        digest=digest(token),
        created_by=created_by,
        created_at=now,
        expires_at=now + timedelta(hours=length),
        allow_sources=allow_sources,
        visitor_rate=visitor,
        link_rate=whole,
    )
    with rt.metadata.session() as s:
        s.add(row)
    urls, notes = link_urls(rt, token, base_urls or [])
    return NewLink(_link(row), token, DEMO_PREFIX + token, urls, notes)


def link_urls(rt: Runtime, token: str, base_urls: list[str]) -> tuple[list[str], list[str]]:
    """Full URLs of a demo token, and sentences on where they work.

    The URLs are, in order and without repeats: behind ``PUBLIC_BASE_URL`` (the operator's own
    domain behind a reverse proxy), behind each of ``base_urls`` (the address the caller used,
    forwarded headers honoured), and behind the console's share link when it has one. When none
    of these reaches other machines, a note says so plainly.
    """
    path = DEMO_PREFIX + token
    public = rt.settings.public_base_url
    share = _share_url(rt)
    bases = [b for b in [public, *base_urls, share] if b]
    urls = list(dict.fromkeys(b.rstrip("/") + path for b in bases))
    notes = []
    reachable = bool(public or share) or any(not _is_local(b) for b in base_urls)
    if not urls:
        notes.append(
            f"The link's path is {path}; add it to the address the console is reached at "
            "(set PUBLIC_BASE_URL to print whole links)."
        )
    if not reachable:
        notes.append(
            "Only this machine can open this link as printed: no PUBLIC_BASE_URL is set and the console has "
            "no share link. To show it to others, set PUBLIC_BASE_URL to the address your reverse proxy serves "
            "the console at, or start the console with GRADIO_SHARE=true where the internet can be reached."
        )
    if share:
        notes.append("The share link (through Gradio's share service) lasts at most 72 hours, and only while the console runs.")
    return urls, notes


def _is_local(base: str) -> bool:
    host = urlsplit(base).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or host.startswith("127.")


def _share_url(rt: Runtime) -> str | None:
    try:
        value = rt.redis.get(SHARE_URL_KEY)
    except Exception:
        return None
    return value.decode() if isinstance(value, bytes) else value


def remember_share_url(rt: Runtime, url: str | None) -> None:
    """Record the console's share link (None forgets it), so that demo links made elsewhere (the CLI) name it."""
    if url:
        rt.redis.set(SHARE_URL_KEY, url, ex=SHARE_URL_TTL_S)
    else:
        rt.redis.delete(SHARE_URL_KEY)


def list_links(rt: Runtime, topic_name: str | None = None) -> list[DemoLink]:
    """Every demo link (of one Topic when ``topic_name`` is given), newest first, with its kept question count.

    Raises:
        NotFoundError: ``topic_name`` names no Topic.
    """
    topic_id = get_topic(rt, topic_name).id if topic_name else None
    with rt.metadata.session() as s:
        query = select(DemoLinkRow).order_by(col(DemoLinkRow.created_at).desc())
        if topic_id:
            query = query.where(DemoLinkRow.topic_id == topic_id)
        rows = s.exec(query).all()
        counts = dict(s.exec(select(DemoTurnRow.link_id, func.count()).group_by(DemoTurnRow.link_id)).all())
    return [_link(r, counts.get(r.id, 0)) for r in rows]


def get_link(rt: Runtime, link_id: str) -> DemoLink:
    """One demo link by id.

    Raises:
        NotFoundError: no such link.
    """
    with rt.metadata.session() as s:
        row = s.get(DemoLinkRow, link_id)
    return _link(_found(row, link_id))


def _found(row: DemoLinkRow | None, link_id: str) -> DemoLinkRow:
    """``row``, or NotFoundError naming ``link_id`` when there is none."""
    if row is None:
        raise NotFoundError(f"no demo link {link_id!r} (`ragtopics demo list` shows them)")
    return row


def revoke_link(rt: Runtime, link_id: str, *, delete_chats: bool = False) -> dict:
    """Revoke a demo link now: its page answers "revoked" from the next request on.

    Args:
        rt: the runtime.
        link_id: the link's id.
        delete_chats: also delete what its visitors asked.

    Returns:
        ``{"id", "revoked_at", "deleted_turns"}``.

    Raises:
        NotFoundError: no such link.
    """
    with rt.metadata.session() as s:
        row = _found(s.get(DemoLinkRow, link_id), link_id)
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            s.add(row)
        revoked_at = _aware(row.revoked_at)
        deleted = 0
        if delete_chats:
            deleted = s.exec(delete(DemoTurnRow).where(col(DemoTurnRow.link_id) == link_id)).rowcount or 0
    return {"id": link_id, "revoked_at": revoked_at.isoformat(), "deleted_turns": deleted}


def open_link(rt: Runtime, token: str) -> tuple[DemoLink, Topic]:
    """The live link a token opens, and its Topic.

    Raises:
        DemoLinkGone: the token is unknown (404), the link was revoked or has expired (410), or its
            Topic was deleted (404); the message says which, for the person who opened it.
    """
    with rt.metadata.session() as s:
        row = s.exec(select(DemoLinkRow).where(DemoLinkRow.digest == digest(token or ""))).first()
    if row is None:
        raise DemoLinkGone(
            404,
            "This demo link does not exist",
            "Check that the whole link was copied, or ask the person who shared it for a new one.",
        )
    link = _link(row)
    try:
        topic = get_topic(rt, link.topic_id)
    except NotFoundError:
        raise DemoLinkGone(
            404, "This demo is no longer available", f"The Topic {link.topic_name} that it showed has been deleted."
        ) from None
    if link.revoked_at is not None:
        raise DemoLinkGone(
            410, "This demo link was revoked", "The person who shared it has switched it off. Ask them for a new link."
        )
    if utcnow() >= link.expires_at:
        raise DemoLinkGone(
            410,
            "This demo link has expired",
            f"It worked until {link.expires_at:%Y-%m-%d %H:%M} UTC. Ask the person who shared it for a new link.",
        )
    return link, topic


def visitor_label(visitor: str) -> str:
    """The short digest a visitor's id (cookie id or address) is kept as."""
    return hashlib.sha256(visitor.encode("utf-8")).hexdigest()[:12]


def _count(rt: Runtime, key: str) -> tuple[int, int]:
    """Count one question in ``key``'s window (which starts with its first question): (count, seconds left)."""
    with rt.redis.pipeline(transaction=True) as pipe:
        pipe.set(key, 0, ex=RATE_WINDOW_S, nx=True)
        pipe.incr(key)
        pipe.ttl(key)
        _, count, ttl = pipe.execute()
    return int(count), max(1, int(ttl))


def take_question(rt: Runtime, link: DemoLink, visitor: str) -> None:
    """Count one question of ``visitor`` through ``link``, or refuse it when a per-minute limit is reached.

    The visitor's own limit is checked first: a visitor over it does not use up the link's
    allowance. Each count is an atomic Redis increment, so concurrent visitors cannot slip past.

    Raises:
        RateLimited: the visitor asked ``visitor_rate`` questions this minute already, or all
            visitors together asked ``link_rate``.
    """
    count, ttl = _count(rt, f"{_RATE_PREFIX}{link.id}:v:{visitor_label(visitor)}")
    if count > link.visitor_rate:
        raise RateLimited(
            f"You asked {link.visitor_rate} questions this minute, as many as this demo allows; try again in {ttl} s.", ttl
        )
    count, ttl = _count(rt, f"{_RATE_PREFIX}{link.id}:all")
    if count > link.link_rate:
        raise RateLimited(
            f"This demo is busy: its visitors asked {link.link_rate} questions this minute; try again in {ttl} s.", ttl
        )


def record_turn(rt: Runtime, link: DemoLink, visitor: str, question: str, answer: str, files: list[str]) -> int:
    """Keep a visitor's question and answer with the link (apart from users' chats); returns the row id."""
    row = DemoTurnRow(link_id=link.id, visitor=visitor_label(visitor), question=question, answer=answer, sources=files)
    with rt.metadata.session() as s:
        s.add(row)
        s.flush()
        if row.id is None:
            raise RuntimeError(f"the database gave the demo turn of link {link.id} no id")
        return row.id


def list_turns(rt: Runtime, link_id: str) -> list[dict]:
    """What visitors asked through a link, oldest first: ``[{"id", "visitor", "question", "answer", "sources",
    "created_at"}]`` (``visitor`` a short digest that groups one visitor's questions).

    Raises:
        NotFoundError: no such link.
    """
    get_link(rt, link_id)
    with rt.metadata.session() as s:
        rows = s.exec(select(DemoTurnRow).where(DemoTurnRow.link_id == link_id).order_by(col(DemoTurnRow.id))).all()
    return [
        {
            "id": r.id,
            "visitor": r.visitor,
            "question": r.question,
            "answer": r.answer,
            "sources": list(r.sources),
            "created_at": _aware(r.created_at).isoformat(),
        }
        for r in rows
    ]


def source_owner(link: DemoLink) -> str:
    """Whom a demo answer's source links are signed for: only the link's own file route accepts them."""
    return SOURCE_OWNER_PREFIX + link.id


def _end_topic_links(d: TopicDeletion) -> None:
    """A Topic delete revokes its demo links and deletes what their visitors asked (the links' rows stay, so that
    their pages say the Topic is gone)."""
    with d.rt.metadata.session() as s:
        rows = s.exec(select(DemoLinkRow).where(DemoLinkRow.topic_id == d.topic.id)).all()
        ids = [r.id for r in rows]
        for row in rows:
            if row.revoked_at is None:
                row.revoked_at = utcnow()
                s.add(row)
        if ids:
            d.count("demo_turns", s.exec(delete(DemoTurnRow).where(col(DemoTurnRow.link_id).in_(ids))).rowcount or 0)
    if ids:
        d.count("demo_links_revoked", len(ids))


add_topic_delete_step("end_demo_links", _end_topic_links, before="remove_rows")


def request_base_url(headers: Mapping[str, str], scheme: str = "http") -> str | None:
    """The address a request was sent to, as its sender saw it: ``X-Forwarded-Proto``/``-Host`` (a reverse
    proxy) first, then ``Host``; None without a host."""
    forwarded_host = (headers.get("x-forwarded-host") or "").split(",")[0].strip()
    host = forwarded_host or headers.get("host", "")
    if not host:
        return None
    proto = (headers.get("x-forwarded-proto") or "").split(",")[0].strip() or scheme
    return f"{proto}://{host}/"
