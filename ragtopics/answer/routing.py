"""Route before retrieval: one typed model call decides DIRECT, ATTACHMENT or SEARCH."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from pydantic import BaseModel, Field

from ragtopics.errors import ModelUnavailableError
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)


class Route(str, Enum):
    """How a question is answered."""

    DIRECT = "DIRECT"
    ATTACHMENT = "ATTACHMENT"
    SEARCH = "SEARCH"


class RouteDecision(BaseModel):
    """The router model's typed reply."""

    route: Route
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """The route taken and why.

    Attributes:
        route: the route that will be tried first.
        confidence: the router's confidence (None when it could not be asked or parsed).
        reason: the router's reason, or why SEARCH was forced.
    """

    route: Route
    confidence: float | None
    reason: str


def choose_route(gateway: ModelGateway, template: PromptTemplate, history: list[dict], question: str, *,
                 has_attachment: bool, threshold: float, trace: Trace) -> RouteChoice:  # fmt: skip
    """Ask the router and apply the spec's fallbacks.

    SEARCH is taken for a SEARCH decision, a decision below ``threshold``, an
    ATTACHMENT decision without an attachment, and an unparsable or failed reply.
    """
    messages = [*history, {"role": "user", "content": template.render(question=question, has_attachment="yes" if has_attachment else "no")}]
    with trace.step("route", threshold=threshold) as ev:
        try:
            decision = gateway.structured("router", messages, RouteDecision, prompt_name="router", trace=trace, max_tokens=200)
        except ModelUnavailableError as exc:
            ev.data.update(route="SEARCH", fallback=f"router reply unusable: {exc}")
            return RouteChoice(Route.SEARCH, None, f"router reply unusable, searched: {exc}")
        ev.data.update(decision=decision.model_dump(mode="json"))
        if decision.route == Route.ATTACHMENT and not has_attachment:
            choice = RouteChoice(Route.SEARCH, decision.confidence, "ATTACHMENT chosen without an attached file; searched")
        elif decision.route != Route.SEARCH and decision.confidence < threshold:
            choice = RouteChoice(Route.SEARCH, decision.confidence,
                                 f"{decision.route.value} at confidence {decision.confidence:.2f} < {threshold:.2f}; searched")  # fmt: skip
        else:
            choice = RouteChoice(decision.route, decision.confidence, decision.reason)
        ev.data.update(route=choice.route.value, reason=choice.reason)
        return choice
