"""``/api/v1`` routes that manage demo links: make one for a Topic, list them, revoke one, read its chats.

Each needs the operator role, as the console's "Demo links" panel does, and calls the functions
the panel and ``ragtopics demo`` call (:mod:`ragtopics.demo.links`), so the checks and messages
are theirs. The demo pages themselves (``/demo/<token>``) are not here: they need no caller.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from ragtopics.access.users import User
from ragtopics.api import errors
from ragtopics.api.rest import needs
from ragtopics.demo import links
from ragtopics.demo.links import request_base_url
from ragtopics.runtime import Runtime


class CreateDemoLinkRequest(BaseModel):
    """A new demo link of a Topic."""

    hours: float = Field(links.DEFAULT_HOURS, description=f"How long the link lasts, in hours (at most {links.MAX_HOURS}).")
    allow_sources: bool = Field(False, description="Let visitors download the files an answer cites.")
    rate: int = Field(links.DEFAULT_VISITOR_RATE, description="Questions per minute one visitor may ask.")
    link_rate: int = Field(links.DEFAULT_LINK_RATE, description="Questions per minute all visitors of the link may ask together.")


def add_routes(app: FastAPI, rt: Runtime) -> None:
    """Add the demo link routes to the ``/api/v1`` app; each needs the operator role."""

    @app.post("/topics/{name}/demo-links", tags=["demo links"], status_code=201)
    def create(request: Request, name: str, body: CreateDemoLinkRequest, user: User = needs("operator")) -> dict:
        """Make a demo link for the Topic: the link with its `token` (shown this once), `path` (`/demo/<token>`),
        `urls` (behind PUBLIC_BASE_URL, the address of this request, the share link) and `notes` (where it works).
        Needs the operator role."""
        base = request_base_url(request.headers, request.url.scheme)
        return errors.answered(
            lambda: links.create_link(
                rt,
                name,
                hours=body.hours,
                allow_sources=body.allow_sources,
                visitor_rate=body.rate,
                link_rate=body.link_rate,
                created_by=user.username,
                base_urls=[base] if base else [],
            ).to_dict()
        )

    @app.get("/demo-links", tags=["demo links"])
    def listed(topic: str | None = None, user: User = needs("operator")) -> list[dict]:
        """Every demo link (of one Topic with `?topic=NAME`), newest first: `[{"id", "topic", "state", "expires_at",
        "allow_sources", "visitor_rate", "link_rate", "turns", ...}]`, never a token. Needs the operator role."""
        return errors.answered(lambda: [k.to_dict() for k in links.list_links(rt, topic)])

    @app.delete("/demo-links/{link_id}", tags=["demo links"])
    def revoke(link_id: str, delete_chats: bool = False, user: User = needs("operator")) -> dict:
        """Revoke a demo link now (`?delete_chats=true` also deletes what its visitors asked):
        `{"id", "revoked_at", "deleted_turns"}`. Needs the operator role."""
        return errors.answered(lambda: links.revoke_link(rt, link_id, delete_chats=delete_chats))

    @app.get("/demo-links/{link_id}/chats", tags=["demo links"])
    def chats(link_id: str, user: User = needs("operator")) -> list[dict]:
        """What visitors asked through a demo link, oldest first: `[{"id", "visitor", "question", "answer", "sources",
        "created_at"}]`. Needs the operator role."""
        return errors.answered(lambda: links.list_turns(rt, link_id))
