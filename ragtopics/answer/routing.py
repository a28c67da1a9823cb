"""Route before retrieval: pick the way a question is answered.

Two routers share one entry point, :func:`choose_route`:

* the **embedding router** (:class:`EmbeddingRouter`) compares the question with
  exemplar utterances of every way (:mod:`ragtopics.answer.router_exemplars`) using
  the bundled embedding model, adds a few documented signals (an attached file,
  a reference to the conversation, "how is A related to B", two requests in one
  question) and turns the margin between the best and second-best way into a
  confidence. It takes milliseconds and is used while the Router role is served by
  the bundled 135M language model, which cannot route;
* the **LLM router** makes one typed model call (:class:`RouteDecision`) when a real
  Router Model is configured.

The ways depend on the Topic kind (:func:`routes_for`): a RAG Topic has DIRECT,
ATTACHMENT and SEARCH (PATH, LOCAL, GLOBAL and HYBRID all mean SEARCH); a GraphRAG
Topic has DIRECT, ATTACHMENT, PATH, LOCAL, GLOBAL and HYBRID. Whatever decides, the
spec's fallbacks then apply (:func:`apply_fallbacks`): below the threshold, an
ATTACHMENT without a file, a DIRECT that is switched off or under the DIRECT
Confidence Threshold, and an unusable reply all take the kind's default way
(:func:`default_route`: SEARCH or HYBRID).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

import numpy as np
from pydantic import AliasChoices, BaseModel, Field

from ragtopics.answer.router_exemplars import (
    EXEMPLARS,
    extract_entities,
    has_path_cue,
    refers_to_attachment,
    refers_to_conversation,
    split_requests,
)
from ragtopics.errors import ConfigurationError, ModelUnavailableError
from ragtopics.kinds import kind_named
from ragtopics.llm.embedding import Embedder
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)


class Route(str, Enum):
    """A way of answering a question."""

    DIRECT = "DIRECT"
    ATTACHMENT = "ATTACHMENT"
    SEARCH = "SEARCH"
    PATH = "PATH"
    LOCAL = "LOCAL"
    GLOBAL = "GLOBAL"
    HYBRID = "HYBRID"


#: The search ways of a GraphRAG Topic; a RAG Topic has SEARCH in their place.
GRAPH_SEARCH_ROUTES: tuple[Route, ...] = (Route.PATH, Route.LOCAL, Route.GLOBAL, Route.HYBRID)
#: The ways that search (a kind has one or more of them); DIRECT and ATTACHMENT do not.
SEARCH_ROUTES: tuple[Route, ...] = (Route.SEARCH, *GRAPH_SEARCH_ROUTES)
#: What each way is for, as the LLM router's prompt lists it (from the two specifications).
ROUTE_DESCRIPTIONS: dict[Route, str] = {
    Route.DIRECT: "thanks, greetings, small talk, or a request to reshape the previous answer (shorter, as a table)",
    Route.ATTACHMENT: "a question that the attached file alone answers",
    Route.SEARCH: "everything else, and whenever you are unsure",
    Route.PATH: "how two named things are related or connected (name both in entities)",
    Route.LOCAL: "facts about named things: people, parts, products, events",
    Route.GLOBAL: "an overview of all the documents: main themes, topics, trends",
    Route.HYBRID: "an overview together with details about named things, and whenever you are unsure",
}
METHODS = ("AUTO", "EMBEDDING", "LLM")


def routes_for(kind: str) -> tuple[Route, ...]:
    """The ways a Topic of ``kind`` can take, in display order (the kind's :attr:`~ragtopics.kinds.TopicKind.routes`).

    Raises:
        ConfigurationError: for an unknown kind.
    """
    return tuple(Route(name) for name in kind_named(kind).routes)


def default_route(kind: str) -> Route:
    """The safe way of a Topic kind, taken whenever the router is unsure: SEARCH (RAG) or HYBRID (GraphRAG).

    Raises:
        ConfigurationError: for an unknown kind.
    """
    return Route(kind_named(kind).default_route)


def collapse(route: Route, kind: str) -> Route:
    """``route`` as a way of a ``kind`` Topic: a search way the kind lacks becomes the kind's default way
    (a graph search way on a RAG Topic is SEARCH, SEARCH on a GraphRAG Topic is HYBRID); DIRECT and
    ATTACHMENT stay."""
    if route in SEARCH_ROUTES and route not in routes_for(kind):
        return default_route(kind)
    return route


class RouteDecision(BaseModel):
    """The router model's typed reply: ``{route (or way), confidence, reason, entities}``."""

    route: Route = Field(validation_alias=AliasChoices("route", "way"))
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = ""
    entities: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """The route taken and why.

    Attributes:
        route: the way that will be tried first (one of the Topic kind's ways).
        confidence: the router's confidence in 0..1 (None when the router could not be asked or parsed).
        reason: the router's reason, or why the default way was taken instead.
        method: ``"embedding"`` or ``"llm"``.
        entities: named things the router saw in the question (PATH needs two), maybe empty.
        scores: way name → score of the embedding router (cosine units, after signals); empty for the LLM.
    """

    route: Route
    confidence: float | None
    reason: str
    method: str = "llm"
    entities: tuple[str, ...] = ()
    scores: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------- embedding router

#: Exemplars averaged per way: the mean cosine of the question to its TOP_K nearest exemplars.
TOP_K = 3
#: Logistic calibration of the margin (best minus second-best way score, cosine units):
#: ``confidence = 1 / (1 + exp(-(A + B * margin)))``. Fitted by ``python -m bench.router --calibrate``
#: (logistic regression of "the best way is right" on the margin) over our own DEV_QUESTIONS,
#: never over the evaluation set.
CALIBRATION_A = 0.50
CALIBRATION_B = 17.33
#: Signal weights, in cosine units (a typical best-vs-second margin is 0.05-0.3). Chosen on DEV_QUESTIONS.
ATTACHMENT_REFERENCE_BONUS = 0.15  # an attached file and a question that points at it
CONVERSATION_REFERENCE_BONUS = 0.15  # earlier answers and a question that points at them
PATH_CUE_BONUS = 0.15  # relation words and two named things
PATH_WITHOUT_CUE_PENALTY = 0.10  # the spec: PATH needs two named entities and a connection question
OVERVIEW_AND_DETAIL_BONUS = 0.12  # two requests, one of them an overview (GLOBAL) and one not
NAMED_ENTITY_BONUS = 0.08  # the question names an entity the Topic's graph holds: facts about it (LOCAL)
OVERVIEW_AND_DETAIL_LEAD = 0.05  # two requests, an overview and a detail: HYBRID leads the best other way by this
#: Below this best exemplar similarity the question resembles no way's exemplars: the confidence is capped
#: at :data:`UNSURE_CONFIDENCE`, so the Topic's safe way is taken (and the reason says so).
MIN_BEST_SIMILARITY = 0.25
UNSURE_CONFIDENCE = 0.5


class EmbeddingRouter:
    """Route by similarity to exemplar utterances with the gateway's embedding model.

    Exemplar embeddings are computed once per embedder and kept (a weak reference per
    embedder object), so a route costs one embedding of the question and its requests.

    Args:
        exemplars: way name → utterances; default :data:`EXEMPLARS` (the GraphRAG ways).
    """

    _cache: ClassVar[weakref.WeakKeyDictionary[Embedder, dict[str, np.ndarray]]] = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, exemplars: dict[str, tuple[str, ...]] | None = None):
        self.exemplars = exemplars or EXEMPLARS

    def exemplar_vectors(self, gateway: ModelGateway) -> dict[str, np.ndarray]:
        """Way name → ``(n_exemplars, dims)`` unit vectors, embedded on first use per embedder.

        Raises:
            ModelUnavailableError: when the embedding model cannot be loaded or reached.
        """
        embedder = gateway.embedder
        with self._lock:
            cached = self._cache.get(embedder)
            if cached is not None and cached.keys() == self.exemplars.keys():
                return cached
            names = list(self.exemplars)
            texts = [t for n in names for t in self.exemplars[n]]
            vectors = gateway.embed(texts, purpose="router_exemplars")
            out, start = {}, 0
            for n in names:
                out[n] = vectors[start : start + len(self.exemplars[n])]
                start += len(self.exemplars[n])
            self._cache[embedder] = out
            log.info("embedded %d router exemplars with %s", len(texts), embedder.model)
            return out

    def score(
        self,
        gateway: ModelGateway,
        question: str,
        *,
        has_attachment: bool,
        history: list[dict],
        trace: Trace | None = None,
        named: tuple[str, ...] = (),
    ) -> tuple[dict[str, float], list[str]]:
        """Score every GraphRAG way for ``question``.

        Score of a way = mean cosine of the question to its :data:`TOP_K` nearest exemplars,
        then the signals: ATTACHMENT is impossible without a file (-1) and gains
        :data:`ATTACHMENT_REFERENCE_BONUS` when the question points at the file; DIRECT gains
        :data:`CONVERSATION_REFERENCE_BONUS` when there is an earlier answer that the question
        points at; PATH gains :data:`PATH_CUE_BONUS` with relation words and two named things
        and loses :data:`PATH_WITHOUT_CUE_PENALTY` without them; HYBRID gains
        :data:`OVERVIEW_AND_DETAIL_BONUS` when the question holds two requests, one routed
        GLOBAL and one to another search way; LOCAL gains :data:`NAMED_ENTITY_BONUS` when ``named``
        (entities of the Topic's graph the question names) is not empty.

        Returns:
            ``({way: score}, [signal, ...])``; scores in cosine units (about -1..1.3).

        Raises:
            ModelUnavailableError: when the embedding model cannot be loaded or reached.
        """
        vectors = self.exemplar_vectors(gateway)
        parts = split_requests(question)
        parts = parts if len(parts) > 1 else []
        embedded = gateway.embed([question, *parts], trace=trace, purpose="router")
        scores = {way: _top_mean(m @ embedded[0]) for way, m in vectors.items()}
        signals: list[str] = []
        if Route.ATTACHMENT.value in scores:
            if not has_attachment:
                scores[Route.ATTACHMENT.value] = -1.0
            elif refers_to_attachment(question):
                scores[Route.ATTACHMENT.value] += ATTACHMENT_REFERENCE_BONUS
                signals.append("question refers to the attached file")
        has_answer = any(m.get("role") == "assistant" for m in history)
        if has_answer and Route.DIRECT.value in scores and refers_to_conversation(question):
            scores[Route.DIRECT.value] += CONVERSATION_REFERENCE_BONUS
            signals.append("question refers to the conversation")
        if Route.PATH.value in scores:
            if has_path_cue(question):
                scores[Route.PATH.value] += PATH_CUE_BONUS
                signals.append("relation words and two named things")
            else:
                scores[Route.PATH.value] -= PATH_WITHOUT_CUE_PENALTY
        if named and Route.LOCAL.value in scores:
            scores[Route.LOCAL.value] += NAMED_ENTITY_BONUS
            signals.append(f"names {', '.join(named[:3])} of the graph")
        if parts and Route.HYBRID.value in scores and _is_overview_and_detail(vectors, embedded[1:]):
            # the definition of HYBRID (an overview together with details): it leads whatever else is near
            others = max(v for k, v in scores.items() if k != Route.HYBRID.value)
            scores[Route.HYBRID.value] = max(
                scores[Route.HYBRID.value] + OVERVIEW_AND_DETAIL_BONUS, others + OVERVIEW_AND_DETAIL_LEAD
            )
            signals.append(f"{len(parts)} requests: an overview and a detail")
        return {k: round(float(v), 4) for k, v in scores.items()}, signals

    def route(
        self,
        gateway: ModelGateway,
        question: str,
        *,
        kind: str,
        has_attachment: bool,
        named: tuple[str, ...] = (),
        history: list[dict],
        trace: Trace | None = None,
    ) -> tuple[RouteDecision, dict[str, float]]:
        """The best way for a Topic of ``kind``, with a calibrated confidence.

        The GraphRAG scores are collapsed to the kind's ways (SEARCH = the best of PATH,
        LOCAL, GLOBAL and HYBRID for a RAG Topic); ``margin`` = best minus second-best
        score, and ``confidence = 1 / (1 + exp(-(CALIBRATION_A + CALIBRATION_B * margin)))``,
        about the chance that the best way is right (fitted on our DEV_QUESTIONS).

        Returns:
            A :class:`RouteDecision` (its reason names the two best scores and the signals),
            and the kind's way scores.

        Raises:
            ModelUnavailableError: when the embedding model cannot be loaded or reached.
        """
        raw, signals = self.score(gateway, question, has_attachment=has_attachment, history=history, trace=trace, named=named)
        scores = collapse_scores(raw, kind)
        ranked = sorted(scores, key=lambda way: scores[way], reverse=True)
        margin = scores[ranked[0]] - scores[ranked[1]]
        confidence = calibrated_confidence(margin)
        reason = f"nearest exemplars {ranked[0]} {scores[ranked[0]]:.2f}, then {ranked[1]} {scores[ranked[1]]:.2f}"
        if scores[ranked[0]] < MIN_BEST_SIMILARITY and confidence > UNSURE_CONFIDENCE:
            confidence = UNSURE_CONFIDENCE
            signals.append(f"like no exemplar (best below {MIN_BEST_SIMILARITY}): unsure")
        if signals:
            reason += "; " + "; ".join(signals)
        decision = RouteDecision(
            route=Route(ranked[0]), confidence=confidence, reason=reason, entities=list(named) or list(extract_entities(question))
        )
        return decision, scores


def collapse_scores(scores: dict[str, float], kind: str) -> dict[str, float]:
    """GraphRAG way scores as scores of the ``kind`` Topic's ways (a RAG Topic's SEARCH
    is the best of the four graph search ways); ways the kind lacks are dropped.

    Raises:
        ConfigurationError: for an unknown kind.
    """
    out: dict[str, float] = {}
    for way in routes_for(kind):
        if way == Route.SEARCH:
            out[way.value] = max(scores[w.value] for w in GRAPH_SEARCH_ROUTES if w.value in scores)
        elif way.value in scores:
            out[way.value] = scores[way.value]
    return out


def calibrated_confidence(margin: float) -> float:
    """``1 / (1 + exp(-(CALIBRATION_A + CALIBRATION_B * margin)))`` for a score margin in cosine units, in 0..1."""
    return round(float(1.0 / (1.0 + np.exp(-(CALIBRATION_A + CALIBRATION_B * margin)))), 4)


def _top_mean(similarities: np.ndarray) -> float:
    k = min(TOP_K, similarities.shape[0])
    return float(np.sort(similarities)[-k:].mean())


def _is_overview_and_detail(vectors: dict[str, np.ndarray], parts: np.ndarray) -> bool:
    """True when one request is nearest GLOBAL and another is nearest a different search way."""
    ways = [w.value for w in GRAPH_SEARCH_ROUTES if w.value in vectors]
    best = [max(ways, key=lambda w: _top_mean(vectors[w] @ p)) for p in parts]
    return Route.GLOBAL.value in best and any(b != Route.GLOBAL.value for b in best)


_EMBEDDING_ROUTER = EmbeddingRouter()


def warm_router(gateway: ModelGateway) -> None:
    """Load the embedding model and embed the exemplars now (about 0.7 s on CPU), so that the
    first routed question does not pay for it; a worker or the console may call this at start.

    Raises:
        ModelUnavailableError: when the embedding model cannot be loaded or reached.
    """
    _EMBEDDING_ROUTER.exemplar_vectors(gateway)


# ----------------------------------------------------------------------------- entry point


def choose_route(
    gateway: ModelGateway,
    *,
    kind: str,
    method: str = "AUTO",
    template: PromptTemplate,
    history: list[dict],
    question: str,
    has_attachment: bool,
    threshold: float,
    direct_threshold: float | None = None,
    allow_direct: bool = True,
    trace: Trace,
    named: tuple[str, ...] = (),
) -> RouteChoice:
    """Route a question and apply the spec's fallbacks; records a ``route`` trace step.

    Args:
        gateway: the model gateway (embedding model, Router role).
        kind: the Topic kind, ``"rag"`` or ``"graphrag"``.
        method: ``"AUTO"`` (EMBEDDING while the Router role is the bundled model, else LLM),
            ``"EMBEDDING"`` or ``"LLM"``.
        template: the ``router`` prompt (variables ``$question``, ``$has_attachment``, ``$ways``).
        history: earlier chat messages (``[{role, content}]``), oldest first.
        question: the user's message.
        has_attachment: whether a file is attached to the message.
        threshold: Router Confidence Threshold (RAG, 0.9) or Confidence Threshold (GraphRAG, 0.6).
        direct_threshold: DIRECT Confidence Threshold (GraphRAG, 0.9); None: only ``threshold``.
        allow_direct: Answer without searching (DIRECT); off makes DIRECT take the default way.
        trace: the turn's trace.
        named: entities of the Topic's graph the question names (a GraphRAG Topic); the embedding
            router takes them as a signal for LOCAL and as the decision's entities.

    Returns:
        The :class:`RouteChoice`; an unusable router (model unreachable, unparsable reply,
        a way the kind lacks) gives the kind's default way with the reason.

    Raises:
        ConfigurationError: for an unknown kind or method.
    """
    fallback = default_route(kind)
    resolved = resolve_method(gateway, method)
    with trace.step("route", method=resolved, kind=kind, threshold=threshold, direct_threshold=direct_threshold) as ev:
        t0 = time.perf_counter()
        scores: dict[str, float] = {}
        try:
            if resolved == "embedding":
                decision, scores = _EMBEDDING_ROUTER.route(
                    gateway, question, kind=kind, has_attachment=has_attachment, history=history, trace=trace, named=named
                )
            else:
                decision = _ask_model(gateway, template, history, question, kind=kind, has_attachment=has_attachment, trace=trace)
        except ModelUnavailableError as exc:
            ev.data.update(route=fallback.value, fallback=f"router reply unusable: {exc}")
            return RouteChoice(fallback, None, f"router reply unusable, {fallback.value} taken: {exc}", resolved)
        finally:
            ev.data["router_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        ev.data.update(decision=decision.model_dump(mode="json"))
        choice = apply_fallbacks(
            decision,
            kind=kind,
            has_attachment=has_attachment,
            threshold=threshold,
            direct_threshold=direct_threshold,
            allow_direct=allow_direct,
            method=resolved,
        )
        if choice.route != collapse(decision.route, kind):
            ev.data["fallback"] = choice.reason
        ev.data.update(route=choice.route.value, confidence=choice.confidence, reason=choice.reason, scores=scores)
        return RouteChoice(choice.route, choice.confidence, choice.reason, resolved, choice.entities, scores)


def resolve_method(gateway: ModelGateway, method: str) -> str:
    """``"embedding"`` or ``"llm"`` for a Router Method; AUTO is EMBEDDING while the Router role
    is served by the bundled model (``settings.endpoint("router").is_local``).

    Raises:
        ConfigurationError: for a method other than AUTO, EMBEDDING or LLM.
    """
    name = (method or "AUTO").upper()
    if name not in METHODS:
        raise ConfigurationError(f"unknown router method {method!r}; choose one of {', '.join(METHODS)}")
    if name == "AUTO":
        return "embedding" if gateway.settings.endpoint("router").is_local else "llm"
    return name.lower()


def apply_fallbacks(
    decision: RouteDecision,
    *,
    kind: str,
    has_attachment: bool,
    threshold: float,
    direct_threshold: float | None = None,
    allow_direct: bool = True,
    method: str = "llm",
) -> RouteChoice:
    """The spec's rules on a router decision.

    The kind's default way (SEARCH / HYBRID) is taken for: a way the kind lacks (after
    :func:`collapse`), ATTACHMENT without an attached file, DIRECT when it is switched off,
    DIRECT below ``direct_threshold``, and any non-default way below ``threshold``.

    Returns:
        The :class:`RouteChoice` (without scores).
    """
    fallback = default_route(kind)
    route, confidence = collapse(decision.route, kind), decision.confidence
    entities = tuple(decision.entities)
    why = ""
    if route not in routes_for(kind):
        why = f"{decision.route.value} is not a way of a {kind} Topic"
    elif route == Route.ATTACHMENT and not has_attachment:
        why = "ATTACHMENT chosen without an attached file"
    elif route == Route.DIRECT and not allow_direct:
        why = "DIRECT is switched off (Answer without searching)"
    elif route == Route.DIRECT and direct_threshold is not None and confidence < direct_threshold:
        why = f"DIRECT at confidence {confidence:.2f} < {direct_threshold:.2f}"
    elif route != fallback and confidence < threshold:
        why = f"{route.value} at confidence {confidence:.2f} < {threshold:.2f}"
    if why:
        taken = "searched" if fallback == Route.SEARCH else f"{fallback.value} taken"
        return RouteChoice(fallback, confidence, f"{why}; {taken}", method, entities)
    return RouteChoice(route, confidence, decision.reason, method, entities)


def _ask_model(
    gateway: ModelGateway,
    template: PromptTemplate,
    history: list[dict],
    question: str,
    *,
    kind: str,
    has_attachment: bool,
    trace: Trace,
) -> RouteDecision:
    """One typed call to the Router role with the kind's ways in the prompt.

    Raises:
        ModelUnavailableError: unreachable model or unparsable reply (StructuredOutputError).
    """
    values = {"question": question, "has_attachment": "yes" if has_attachment else "no"}
    if "ways" in template.variables():
        values["ways"] = "\n".join(f"{r.value}: {ROUTE_DESCRIPTIONS[r]}." for r in routes_for(kind))
    messages = [*history, {"role": "user", "content": template.render(**values)}]
    return gateway.structured("router", messages, RouteDecision, prompt_name="router", trace=trace, max_tokens=200)
