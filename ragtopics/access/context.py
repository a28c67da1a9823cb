"""Who the current console event or HTTP request runs for, for code far from the web layer (links, chats, routes).

The console's event guard (:mod:`ragtopics.ui.web`) sets :data:`acting_username` around each
event it lets through; it is None in the CLI, the worker and open mode (no users), where
nothing is per user. Its access middleware leaves the caller of each HTTP request under
:data:`SCOPE_USER`, which :func:`caller_of` reads.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragtopics.access.users import User

#: The logged-in user the current console event runs for, or None.
acting_username: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragtopics_acting_username", default=None)

#: The scope key under which the access middleware leaves the caller for the routes behind it.
SCOPE_USER = "ragtopics.user"


def caller_of(request: Any) -> User | None:
    """The user the access middleware found for a FastAPI/Starlette ``request`` (None: no caller)."""
    return request.scope.get(SCOPE_USER)
