"""Console users, their roles and API tokens, stored in the metadata database.

Roles are ordered: a **viewer** chats; an **operator** also creates and configures Topics,
uploads files, edits prompts, runs QA and corrects a GraphRAG Topic's graph; an **admin** also reaches Admin (model endpoints,
graph databases, users). **DEV_REPORTING** is a separate permission (admins always have it)
that opens the DEV Reports tab and its data.

Passwords are hashed with argon2id through ``argon2-cffi`` (its default parameters, RFC 9106's
second recommended option). API tokens are random (``secrets.token_urlsafe``, 32 bytes); only
their SHA-256 digest is stored, so a token is shown once, when it is made.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import update
from sqlmodel import col, select

from ragtopics.access import sessions
from ragtopics.errors import AccessDeniedError, ConfigurationError, NotFoundError
from ragtopics.runtime import Runtime
from ragtopics.storage.metadata import ApiTokenRow, ChatSessionRow, UserRow, utcnow

log = logging.getLogger(__name__)

#: Roles from least to most allowed.
ROLES = ("viewer", "operator", "admin")
#: The permission that opens DEV Reports.
DEV_REPORTING = "DEV_REPORTING"
#: Shortest password accepted.
MIN_PASSWORD_LENGTH = 8
#: Prefix of every API token, so a leaked one is recognisable.
TOKEN_PREFIX = "rt_"
_USERNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_hasher = PasswordHasher()


@dataclass(frozen=True, slots=True)
class User:
    """A console user as the access checks see it.

    Attributes:
        username: the login name.
        role: ``viewer``, ``operator`` or ``admin``.
        dev_reporting: whether the user holds DEV_REPORTING (always True for an admin).
    """

    username: str
    role: str
    dev_reporting: bool = False

    def has_role(self, role: str) -> bool:
        """Whether this user's role is ``role`` or above it."""
        return ROLES.index(self.role) >= ROLES.index(role)

    def may(self, need: str) -> bool:
        """Whether the user may do what ``need`` names: a role, or ``DEV_REPORTING``."""
        if need == DEV_REPORTING:
            return self.dev_reporting or self.role == "admin"
        return self.has_role(need)


#: Who the console serves when no admin exists yet: on loopback only, with every right.
LOCAL_USER = User("local", "admin", True)


def _user(row: UserRow) -> User:
    return User(row.username, row.role, bool(row.dev_reporting) or row.role == "admin")


def _check_username(username: str) -> str:
    username = (username or "").strip()
    if not _USERNAME.match(username):
        raise ConfigurationError("Username: use 1 to 64 letters, digits, '.', '_', '-' or '@'")
    return username


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise ConfigurationError(f"Role: must be one of {', '.join(ROLES)}, got {role!r}")
    return role


def _check_password(password: str) -> str:
    if len(password or "") < MIN_PASSWORD_LENGTH:
        raise ConfigurationError(f"Password: at least {MIN_PASSWORD_LENGTH} characters")
    return password


def create_user(rt: Runtime, username: str, password: str, role: str, *, dev_reporting: bool = False) -> User:
    """Add a user. The first admin (which switches login on) is given the chats saved without login.

    Raises:
        ConfigurationError: a malformed username, an unknown role, a password shorter than
            :data:`MIN_PASSWORD_LENGTH`, or a username already taken.
    """
    username, role = _check_username(username), _check_role(role)
    password_hash = _hasher.hash(_check_password(password))
    with rt.metadata.session() as s:
        if _row_by_name(s, username) is not None:  # "Olga" and "olga" would be two look-alike accounts
            raise ConfigurationError(f"Username: {username!r} is taken")
        first_admin = role == "admin" and _admin_count(s) == 0
        s.add(UserRow(username=username, password_hash=password_hash, role=role, dev_reporting=dev_reporting))
        if first_admin:
            _adopt_open_mode_chats(s, username)
    return User(username, role, dev_reporting or role == "admin")


def update_user(
    rt: Runtime, username: str, *, role: str | None = None, dev_reporting: bool | None = None, password: str | None = None
) -> User:
    """Change a user's role, DEV_REPORTING or password (None leaves it as it is).

    A user made the first admin (which switches login on) is given the chats saved without login.

    Raises:
        NotFoundError: no such user.
        ConfigurationError: a bad role or password, or the change would leave no admin.
    """
    with rt.metadata.session() as s:
        row = s.get(UserRow, username)
        if row is None:
            raise NotFoundError(f"no user {username!r}")
        if role is not None:
            _check_role(role)
            if row.role == "admin" and role != "admin" and _admin_count(s) == 1:
                raise ConfigurationError("Role: this is the only admin; make another admin first")
            if role == "admin" and _admin_count(s) == 0:
                _adopt_open_mode_chats(s, username)
            row.role = role
        if dev_reporting is not None:
            row.dev_reporting = dev_reporting
        if password is not None:
            row.password_hash = _hasher.hash(_check_password(password))
        s.add(row)
        changed = _user(row)
    if password is not None:
        sessions.end_user_sessions(rt, username)  # a stolen cookie does not outlive a password change
    return changed


def _adopt_open_mode_chats(s, admin: str) -> int:
    """Give the chats saved without login (owner "") to ``admin``, the first admin, in the open transaction ``s``.

    Login is required from the first admin on, and a chat is shown only to its owner: without an owner,
    the chats of open mode would be shown to nobody. Returns how many chats were given.
    """
    given = s.execute(update(ChatSessionRow).where(col(ChatSessionRow.owner) == "").values(owner=admin)).rowcount or 0
    log.info("login is now required: %d chat(s) saved without login now belong to the first admin %s", given, admin)
    return given


def delete_user(rt: Runtime, username: str) -> None:
    """Remove a user and their API tokens (their sessions end at their next request).

    Raises:
        NotFoundError: no such user.
        ConfigurationError: the user is the only admin.
    """
    with rt.metadata.session() as s:
        row = s.get(UserRow, username)
        if row is None:
            raise NotFoundError(f"no user {username!r}")
        if row.role == "admin" and _admin_count(s) == 1:
            raise ConfigurationError("this is the only admin; make another admin first")
        for token in s.exec(select(ApiTokenRow).where(ApiTokenRow.username == username)):
            s.delete(token)
        s.delete(row)
    sessions.end_user_sessions(rt, username)  # a user made later under this name does not inherit them


def _row_by_name(s, username: str) -> UserRow | None:
    """The user whose name equals ``username`` ignoring case (Unicode case folding), or None."""
    exact = s.get(UserRow, username)
    if exact is not None:
        return exact
    key = username.casefold()
    return next((row for row in s.exec(select(UserRow)) if row.username.casefold() == key), None)


def _admin_count(s) -> int:
    return len(s.exec(select(UserRow.username).where(UserRow.role == "admin")).all())


def get_user(rt: Runtime, username: str) -> User | None:
    """The user called ``username``, or None."""
    with rt.metadata.session() as s:
        row = s.get(UserRow, username)
        return _user(row) if row is not None else None


def list_users(rt: Runtime) -> list[User]:
    """Every user, by name."""
    with rt.metadata.session() as s:
        return [_user(r) for r in s.exec(select(UserRow).order_by(UserRow.username))]


def has_admin(rt: Runtime) -> bool:
    """Whether any admin exists; without one the console serves only on loopback, without login."""
    with rt.metadata.session() as s:
        return _admin_count(s) > 0


def authenticate(rt: Runtime, username: str, password: str) -> User:
    """The user whose name and password these are.

    Raises:
        AccessDeniedError: "wrong username or password" (the same text for both, so names cannot be probed).
    """
    with rt.metadata.session() as s:
        row = _row_by_name(s, (username or "").strip())  # the name as typed, in any case
        stored = row.password_hash if row is not None else None
        rehash = False
        try:
            # Without a user, verify against a throwaway hash anyway so both paths take as long.
            _hasher.verify(stored or _DUMMY_HASH, password or "")
            rehash = stored is not None and _hasher.check_needs_rehash(stored)
        except (VerificationError, InvalidHashError):
            row = None
        if row is None or stored is None:
            raise AccessDeniedError("wrong username or password")
        if rehash:
            row.password_hash = _hasher.hash(password)
            s.add(row)
        return _user(row)


_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


def ensure_env_admin(rt: Runtime) -> User | None:
    """Create the first admin from ``ADMIN_USERNAME`` / ``ADMIN_PASSWORD`` when that user does not exist yet.

    An existing user of that name is left as it is (a password changed in the console stays).

    Returns:
        The user created, or None when the variables are unset or the user exists.

    Raises:
        ConfigurationError: only one of the two variables is set, or they are invalid.
    """
    name, password = rt.settings.admin_username, rt.settings.admin_password
    if not name and not password:
        return None
    if not name or not password:
        raise ConfigurationError("ADMIN_USERNAME and ADMIN_PASSWORD: set both to create the first admin")
    with rt.metadata.session() as s:
        if _row_by_name(s, name.strip()) is not None:
            return None
    return create_user(rt, name, password, "admin")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def make_token(rt: Runtime, username: str, label: str = "") -> str:
    """Make an API token for ``username``; the token is returned once and only its digest is kept.

    Raises:
        NotFoundError: no such user.
    """
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with rt.metadata.session() as s:
        if s.get(UserRow, username) is None:
            raise NotFoundError(f"no user {username!r}")
        s.add(ApiTokenRow(username=username, label=(label or "").strip()[:80], digest=_digest(token)))
    return token


def list_tokens(rt: Runtime, username: str | None = None) -> list[dict]:
    """API tokens as ``{"id", "username", "label", "created_at", "last_used_at"}`` (never the token itself)."""
    with rt.metadata.session() as s:
        query = select(ApiTokenRow).order_by(col(ApiTokenRow.id))
        if username is not None:
            query = query.where(ApiTokenRow.username == username)
        return [
            {"id": r.id, "username": r.username, "label": r.label, "created_at": r.created_at, "last_used_at": r.last_used_at}
            for r in s.exec(query)
        ]


def revoke_token(rt: Runtime, token_id: int) -> None:
    """Delete an API token by its id. Raises NotFoundError when there is none."""
    with rt.metadata.session() as s:
        row = s.get(ApiTokenRow, token_id)
        if row is None:
            raise NotFoundError(f"no API token {token_id}")
        s.delete(row)


def user_of_token(rt: Runtime, token: str) -> User | None:
    """The user an API token belongs to, or None for an unknown token; records when it was used."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    with rt.metadata.session() as s:
        row = s.exec(select(ApiTokenRow).where(ApiTokenRow.digest == _digest(token))).first()
        if row is None:
            return None
        owner = s.get(UserRow, row.username)
        if owner is None:
            return None
        row.last_used_at = utcnow()
        s.add(row)
        return _user(owner)


def require(user: User | None, need: str) -> User:
    """``user`` when it may do what ``need`` names (a role or DEV_REPORTING).

    Raises:
        AccessDeniedError: no user, or one without that role or permission.
    """
    if user is None:
        raise AccessDeniedError("log in first")
    if not user.may(need):
        raise AccessDeniedError(
            f"{user.username} ({user.role}) may not do this: it needs "
            f"{'the DEV_REPORTING permission' if need == DEV_REPORTING else f'the {need} role'}"
        )
    return user
