"""Signed, expiring download links for source files.

A link is ``/files/<token>``; the token is ``<payload>.<signature>``, both urlsafe
base64 without padding. The payload is the JSON ``{"path": ..., "exp": ...}`` (a
path relative to the blob store, an expiry in Unix seconds), with ``"user"`` when the link
is made for a console user (only that user may open it), and the signature is
HMAC-SHA256 over the payload text. The spec says a source link works for about
10 minutes, hence the default ``ttl_s``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ragtopics.errors import ConfigurationError, RagTopicsError

log = logging.getLogger(__name__)

#: URL prefix of a download link; the token follows it.
LINK_PREFIX = "/files/"
#: Length of the signing secret in bytes (the HMAC-SHA256 block-size guidance is >= 32).
SECRET_BYTES = 32
#: "A source link works for about 10 minutes."
DEFAULT_TTL_S = 600


class LinkError(RagTopicsError):
    """A download token is expired, forged (invalid signature) or malformed."""


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LinkSigner:
    """Sign and verify expiring links to files in the blob store.

    Args:
        secret: the HMAC key, shared by every process that serves links (non-empty).
        ttl_s: how long a link stays valid, in seconds (> 0).
        current_user: returns the user a link is for when :meth:`sign` names none (the runtime passes the
            console's acting user, :data:`ragtopics.access.context.acting_username`); None: no user.

    Raises:
        ValueError: when ``secret`` is empty or ``ttl_s`` is not positive.
    """

    def __init__(self, secret: bytes, ttl_s: int = DEFAULT_TTL_S, *, current_user: Callable[[], str | None] | None = None):
        if not secret:
            raise ValueError("link secret must not be empty")
        if ttl_s <= 0:
            raise ValueError(f"link ttl_s must be positive, got {ttl_s}")
        self._secret = bytes(secret)
        self.ttl_s = ttl_s
        self._current_user = current_user

    def _signature(self, payload_text: str) -> str:
        digest = hmac.new(self._secret, payload_text.encode("ascii"), hashlib.sha256).digest()
        return _b64encode(digest)

    def sign(self, relative_path: str, *, now: float | None = None, user: str | None = None) -> str:
        """Return the URL path of a link to ``relative_path``, valid for ``ttl_s`` seconds.

        Args:
            relative_path: the file's path relative to the blob store (non-empty).
            now: the current Unix time in seconds; ``time.time()`` when None.
            user: the console user the link is for; None takes the signer's ``current_user`` (the user of
                the console event being served), if any.

        Returns:
            ``/files/<token>``; the token is URL-safe and needs no quoting.

        Raises:
            ValueError: when ``relative_path`` is empty.
        """
        if not relative_path:
            raise ValueError("cannot sign a link to an empty path")
        issued = time.time() if now is None else now
        claims = {"path": relative_path, "exp": int(issued) + self.ttl_s}
        owner = user if user is not None else (self._current_user() if self._current_user else None)
        if owner:
            claims["user"] = owner
        payload = json.dumps(claims, separators=(",", ":"))
        payload_text = _b64encode(payload.encode("utf-8"))
        return f"{LINK_PREFIX}{payload_text}.{self._signature(payload_text)}"

    def verify(self, token: str, *, now: float | None = None) -> str:
        """Return the relative path a token grants, after checking its signature and expiry (see :meth:`grant`)."""
        return self.grant(token, now=now)[0]

    def grant(self, token: str, *, now: float | None = None) -> tuple[str, str | None]:
        """Return ``(relative path, user)`` a token grants, after checking its signature and expiry.

        Args:
            token: the part of the link after ``/files/``.
            now: the current Unix time in seconds; ``time.time()`` when None.

        Returns:
            The relative path given to :meth:`sign` (the caller still resolves it through the
            blob store, which refuses paths outside the store) and the user the link was made
            for, or None for a link made outside the console (the CLI).

        Raises:
            LinkError: "malformed" (not ``<payload>.<signature>``, bad base64 or JSON),
                "invalid signature" (forged, altered or signed with another secret),
                or "expired" (past its expiry time).
        """
        payload_text, sep, signature = token.partition(".")
        if not sep or not payload_text or not signature or not token.isascii():
            raise LinkError("download link is malformed")
        # Compare the encoded text, not decoded bytes: base64 padding bits would let
        # two different strings decode to one signature.
        if not hmac.compare_digest(signature.encode("ascii"), self._signature(payload_text).encode("ascii")):
            raise LinkError("download link has an invalid signature")
        path, expires, user = _parse_payload(payload_text)
        current = time.time() if now is None else now
        if current >= expires:
            raise LinkError("download link has expired; open the source again to get a new link")
        return path, user


def _parse_payload(payload_text: str) -> tuple[str, int, str | None]:
    """Decode a signed payload into ``(path, exp, user)``; raises LinkError("malformed")."""
    try:
        payload = json.loads(_b64decode(payload_text))
    except (binascii.Error, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise LinkError("download link is malformed") from exc
    path = payload.get("path") if isinstance(payload, dict) else None
    expires = payload.get("exp") if isinstance(payload, dict) else None
    user = payload.get("user") if isinstance(payload, dict) else None
    if not isinstance(path, str) or not path or not isinstance(expires, int) or isinstance(expires, bool):
        raise LinkError("download link is malformed")
    if user is not None and not isinstance(user, str):
        raise LinkError("download link is malformed")
    return path, expires, user


def load_or_create_secret(path: Path) -> bytes:
    """Read the link secret from ``path``, or create it (32 random bytes, mode 0o600).

    Links then survive restarts, and every process that reads the same file signs
    and verifies with the same key. Creation is atomic: a secret is written to a
    temporary file and hard-linked into place, so two processes starting together
    end up with the one that landed first.

    Args:
        path: the secret file; its parent folder is created when missing.

    Returns:
        The 32-byte secret.

    Raises:
        ConfigurationError: when the file exists but does not hold 32 bytes.
    """
    path = Path(path)
    if not path.exists():
        _create_secret(path)
    secret = path.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise ConfigurationError(
            f"link secret {path} holds {len(secret)} bytes, expected {SECRET_BYTES}; delete it to regenerate"
        )
    if path.stat().st_mode & 0o077:
        log.warning("link secret %s is readable by other users; chmod 600 it", path)
    return secret


def _create_secret(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".secret-")  # mkstemp creates with mode 0o600
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(os.urandom(SECRET_BYTES))
        try:
            os.link(tmp_name, path)
            log.info("created link secret %s", path)
        except FileExistsError:
            log.info("link secret %s was created by another process", path)
    finally:
        os.unlink(tmp_name)
