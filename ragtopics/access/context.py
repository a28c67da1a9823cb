"""Who the current console event runs for, for code far from the web layer (links, chats).

The console's event guard (:mod:`ragtopics.ui.web`) sets :data:`acting_username` around each
event it lets through; it is None in the CLI, the worker and open mode (no users), where
nothing is per user.
"""

from __future__ import annotations

import contextvars

#: The logged-in user the current console event runs for, or None.
acting_username: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragtopics_acting_username", default=None)
