"""Server-side login sessions in Redis.

The browser holds only a random session id (``secrets.token_urlsafe``, 32 bytes) in an
HttpOnly cookie; Redis holds ``rt:session:<sha256 of the id>`` → username, with a TTL that
each request renews (a session ends after ``SESSION_TTL_S`` seconds without activity). The
user's role is read afresh on every request, so a role change or a deleted user takes effect
at once.

A Gradio ``session_hash`` (and an event id) is bound to the user who first used it
(``rt:client-session:<sha256 of the id>`` → owner, see :func:`claim_client_session`).
"""

from __future__ import annotations

import hashlib
import secrets

from ragtopics.runtime import Runtime

#: Name of the cookie that carries the session id.
SESSION_COOKIE = "ragtopics_session"


def _key(session_id: str) -> str:
    return "rt:session:" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def _user_key(username: str) -> str:
    return f"rt:user-sessions:{username}"


def start_session(rt: Runtime, username: str) -> str:
    """Open a session for ``username``; returns the id to put in the cookie.

    The session's key joins the user's set of session keys, which has no expiry of its own: a session
    renewed by activity for any length of time is still in it when :func:`end_user_sessions` runs.
    Keys of sessions that have lapsed since are dropped from the set here, so it holds no more than
    the user's live sessions and the ones that lapsed since their last login.
    """
    session_id = secrets.token_urlsafe(32)
    user_key = _user_key(username)
    known = [k.decode() if isinstance(k, bytes) else k for k in rt.redis.smembers(user_key)]
    with rt.redis.pipeline() as pipe:
        for key in known:
            pipe.exists(key)
        lapsed = [key for key, alive in zip(known, pipe.execute()) if not alive]
        pipe.set(_key(session_id), username, ex=rt.settings.session_ttl_s)
        pipe.sadd(user_key, _key(session_id))  # so a password change or a delete can end them all
        if lapsed:
            pipe.srem(user_key, *lapsed)
        pipe.persist(user_key)  # a set made with an expiry (older versions) keeps no expiry from now on
        pipe.execute()
    return session_id


def end_user_sessions(rt: Runtime, username: str) -> int:
    """End every session of ``username`` (after a password change, a role change or a delete); returns how many."""
    with rt.redis.pipeline() as pipe:  # read and emptied at once: a session started meanwhile stays in the set
        pipe.smembers(_user_key(username))
        pipe.delete(_user_key(username))
        members, _ = pipe.execute()
    keys = [k.decode() if isinstance(k, bytes) else k for k in members]
    return int(rt.redis.delete(*keys)) if keys else 0


def session_user(rt: Runtime, session_id: str | None) -> str | None:
    """The username of a live session (renewing it), or None for a missing, ended or unknown id.

    A live session's key is put back in its user's set of sessions (a no-op when it is there), so a
    session that outlived the set under an older version, whose set expired, still ends with
    :func:`end_user_sessions`.
    """
    if not session_id or len(session_id) > 128:
        return None
    key = _key(session_id)
    with rt.redis.pipeline() as pipe:
        pipe.get(key)
        pipe.expire(key, rt.settings.session_ttl_s)
        username, _ = pipe.execute()
    if not username:
        return None
    name = username.decode("utf-8")
    rt.redis.sadd(_user_key(name), key)
    return name


def end_session(rt: Runtime, session_id: str | None) -> None:
    """Log out: forget the session (nothing happens for an unknown id)."""
    if session_id and len(session_id) <= 128:
        rt.redis.delete(_key(session_id))


def _client_key(client_id: str) -> str:
    return "rt:client-session:" + hashlib.sha256(client_id.encode("utf-8")).hexdigest()


def claim_client_session(rt: Runtime, client_id: str, owner: str, *, bind: bool = True) -> bool:
    """Whether a browser tab's or program's id (Gradio's ``session_hash``, or an event id) belongs to ``owner``.

    The first caller to use an id owns it (``bind``); every later request carrying it must come from
    the same owner, so someone who learns another user's id cannot read that user's event results.
    The binding lasts ``SESSION_TTL_S`` after the id's last use.

    Args:
        client_id: the id as the request carries it (non-empty).
        owner: who the caller is (a username, or a marker for the open-mode user).
        bind: whether an id nobody owns yet becomes ``owner``'s; False only checks (for an event id,
            which the console binds when it hands the id out).

    Returns:
        True when the id is (now) ``owner``'s; False when it is someone else's, or unbound and ``bind`` is False.
    """
    key, ttl_s = _client_key(client_id), rt.settings.session_ttl_s
    with rt.redis.pipeline() as pipe:
        if bind:
            pipe.set(key, owner, nx=True, ex=ttl_s)
        pipe.get(key)
        found = pipe.execute()[-1]
    if found is None or found.decode("utf-8") != owner:
        return False
    rt.redis.expire(key, ttl_s)
    return True
