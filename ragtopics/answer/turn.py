"""The query pipeline shared by both Topic kinds: question → (route) → retriever → prompt →
streamed answer (with connected Topics as tools) → citations, placed pictures and
attribution → save.

:func:`ask` is a generator of :class:`ChatUpdate`; the console, the CLI and MCP iterate
it. Closing it early (Stop) ends the model stream and saves nothing. A search way is a
:class:`~ragtopics.answer.context.Retriever`; everything after retrieval works on its
typed :class:`~ragtopics.answer.context.Context` and knows nothing of how it was found.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from pydantic import BaseModel

from ragtopics.answer.attachments import Attachment, text_attachment_message
from ragtopics.answer.attribution import check_sources
from ragtopics.answer.citations import code_files, format_sources, render_citations
from ragtopics.answer.connected import ToolResult, parse_question, tool_message, topic_tools
from ragtopics.answer.context import Context, Evidence, RetrievalQuery, Retriever, SearchProgress, Source, assign_codes
from ragtopics.answer.extractive import (
    Passage,
    Quote,
    choose_quotes,
    compose_answer,
    compose_themes,
    is_overview,
    lead_line,
    point_index,
    rank_sentences,
    theme_quotes,
)
from ragtopics.answer.history import check_session, history_messages, new_session_id, save_turn
from ragtopics.answer.repetition import STOPPED_NOTE, RepetitionGuard, trimmed
from ragtopics.answer.routing import Route, choose_route, routes_for
from ragtopics.errors import RagTopicsError
from ragtopics.ingest.pictures import OfferedPicture, format_pictures, place_pictures
from ragtopics.kinds import kind_of
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.prompts.templates import NEEDS_DOCUMENTS, PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.storage import chats
from ragtopics.topics.topics import Topic, get_topic
from ragtopics.tracing.otel import export_trace
from ragtopics.tracing.reports import record_trace
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 8000

#: Ends a streamed answer that the model stopped because it reached its token limit.
TRUNCATED_NOTE = " … *(cut off at the answer length limit of {max_tokens} tokens, LLM_MAX_TOKENS)*"

#: Words added per update when a written answer is shown word by word.
WORDS_PER_UPDATE = 3
#: Seconds between checks for progress messages while a graph search runs in its thread.
PROGRESS_POLL_S = 0.1

#: The evidence an extractive answer quotes: passages and community summaries (entity and relationship
#: descriptions are the graph's own words, quoted only when a way found nothing else).
QUOTABLE_KINDS = ("chunk", "community_report")
#: The line under an extractive answer while the Language Model role is the bundled model.
EXTRACTIVE_NOTE_BUNDLED = (
    "*Quoted from the sources: no language model is configured, and the bundled one is too small "
    "to write answers. For written answers, an admin sets a Language Model endpoint in Admin → "
    "LLM Configuration (or LLM_BASE_URL in .env).*"
)
#: The line under an extractive answer the Topic asked for (Answer Mode EXTRACTIVE) with a real model configured.
EXTRACTIVE_NOTE_CHOSEN = "*Quoted from the sources (this Topic's Answer Mode is EXTRACTIVE).*"
#: The lead line of an extractive answer quoting only community summaries (they have no file).
SUMMARIES_LEAD = "From the community summaries of the graph:"

#: Tokens allowed for the typed attribution check's reply (``{"used": true}`` plus the
#: whitespace and reasoning a model may put around it; 20 cut real replies off).
SOURCE_CHECK_MAX_TOKENS = 96
#: How the trace names the source check made without a model call (the bundled model behind the Language Model role).
NO_SOURCE_CHECK = "evidence: the bundled model cannot judge sources"


@dataclass(slots=True)
class ChatUpdate:
    """One step of a streamed answer.

    Attributes:
        text: the answer so far, citation codes already turned into file names.
        done: True for the final update.
        sources: the sources the answer used (final update only), used chunks first.
        route: the way the question was answered (DIRECT, ATTACHMENT, SEARCH; a GraphRAG
            Topic's PATH, LOCAL, GLOBAL, HYBRID).
        route_confidence: the router's confidence (None when no router decided).
        route_reason: why that way was taken ("" when none was given).
        route_method: ``embedding``, ``llm``, ``forced`` or "" (no routing).
        route_planned: the way the router chose when the search fell back to ``route`` (PATH without a
            chain answers by LOCAL; ``note`` says why), "" when the chosen way answered.
        session_id: the chat session.
        turn_id: the saved turn's id (final update, when saved).
        no_answer: the configured no-answer response was shown.
        phase: what the turn is doing now (``routing``, ``searching``, ``writing`` (a GraphRAG
            answer written whole before it is shown), ``answering``, ``done``).
        status: the search's own words for what it is doing ("reading 8 summaries"), "" when none.
        note: why the search found nothing, or why its way changed ("no community summaries yet: …"), "" when none.
        rerank: how the search's results were reranked, in words ("reranked by the Language Model"), "" when
            no rerank was asked for.
        timings_ms: per-step durations in milliseconds and ``total`` (final update only).
        retrieved: the files the search found, in rank order (final update only; empty when the
            turn did not search). ``sources`` are those the answer used; evaluation ranks these.
    """

    text: str
    done: bool = False
    sources: list[Source] = field(default_factory=list)
    route: str = "SEARCH"
    route_confidence: float | None = None
    route_reason: str = ""
    route_method: str = ""
    route_planned: str = ""
    session_id: str = ""
    turn_id: int | None = None
    no_answer: bool = False
    phase: str = "answering"
    status: str = ""
    note: str = ""
    rerank: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    retrieved: list[str] = field(default_factory=list)


def ranked_files(context: Context) -> list[str]:
    """The distinct files of a search's chunks, in rank order (community summaries have none)."""
    return list(dict.fromkeys(p.file_name for item in context.items if item.kind == "chunk" for p in item.provenance))


class _Used(BaseModel):
    used: bool


def ask(
    rt: Runtime,
    topic: Topic,
    question: str,
    *,
    session_id: str | None = None,
    attachment: Attachment | None = None,
    save: bool = True,
    allow_tools: bool = True,
    route: str | None = None,
    parent_trace: Trace | None = None,
) -> Generator[ChatUpdate, None, None]:
    """Answer a question from a Topic's documents, streaming.

    Args:
        rt: the runtime.
        topic: the Topic asked.
        question: the user's message.
        session_id: continue this chat; a new one is started when None (and ``save``).
        attachment: a file attached to the message (see :mod:`ragtopics.answer.attachments`).
        save: store the turn (False when a connected Topic is asked as a tool, or for QA comparisons).
        allow_tools: offer connected Topics as tools (False inside a tool call: one level only).
        route: force a way (one of the Topic kind's routes) instead of routing; for QA comparisons.
        parent_trace: record the steps under this trace's open step (a connected Topic's answer
            inside the asking Topic's tool call) instead of a trace of its own.

    Yields:
        :class:`ChatUpdate` items; the last has ``done=True``.

    Raises:
        RagTopicsError: for an empty or over-long question, an unknown session or a route
            the Topic's kind does not have.
        ConfigurationError: connected Topics with a model that has no tool support.
        ModelUnavailableError: when the embedding or language model is unreachable.
    """
    t0 = time.perf_counter()
    question = _checked_question(question)
    forced = _checked_route(topic, route)
    if forced == Route.ATTACHMENT and attachment is None:
        raise RagTopicsError("the ATTACHMENT way answers from an attached file; attach one (--attach FILE) or choose another way")
    if session_id is not None:
        check_session(rt, topic, session_id)
    elif save:
        # The session row is written with the first saved turn: a stopped first
        # question leaves no empty chat behind.
        session_id = new_session_id()
    trace = parent_trace or Trace("chat", question, topic.settings.role_models)
    turn = _Turn(rt, topic, question, session_id or "", attachment, trace, save, t0)
    with trace.step("prepare"):
        turn.prompts = resolve_prompts(rt, topic.id)
        turn.history = history_messages(rt, session_id, topic.settings.memory)
    trace.add(
        "question",
        question=question,
        session_id=session_id,
        topic=topic.name,
        attachment=attachment.file_name if attachment else None,
        forced_route=forced,
    )
    yield from turn.run(forced, allow_tools)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What :func:`search_only` found: the way taken and the evidence, without an answer.

    Attributes:
        route, route_confidence, route_reason, route_method: as in :class:`ChatUpdate`.
        context: the retriever's evidence (empty for DIRECT and ATTACHMENT, which do not search).
        timings_ms: per-step durations in milliseconds and ``total``.
    """

    route: str
    route_confidence: float | None
    route_reason: str
    route_method: str
    context: Context
    timings_ms: dict[str, float]


def search_only(rt: Runtime, topic: Topic, question: str, *, route: str | None = None) -> SearchResult:
    """Route (or take the forced way) and search as a chat turn would, without writing or saving an answer.

    Used by evaluation (``ragtopics eval --retrieval-only``): the same router, retrievers and settings
    as :func:`ask`, in milliseconds instead of a model's seconds.

    Raises:
        RagTopicsError: for an empty or over-long question, or a route the Topic's kind does not have.
        ModelUnavailableError: when the embedding model (or a Router Model) is unreachable.
    """
    t0 = time.perf_counter()
    question = _checked_question(question)
    forced = _checked_route(topic, route)
    trace = Trace("chat", question, topic.settings.role_models)
    turn = _Turn(rt, topic, question, "", None, trace, False, t0)
    turn.prompts = resolve_prompts(rt, topic.id)
    turn.take_way(forced)
    context = Context((), turn.route, "answered without searching")
    if turn.route not in (Route.DIRECT.value, Route.ATTACHMENT.value):
        steps = turn.search()
        try:
            while True:
                next(steps)
        except StopIteration as done:
            context = done.value
    timings = {**trace.timings_ms(), "total": round((time.perf_counter() - t0) * 1000, 3)}
    return SearchResult(turn.route, turn.confidence, turn.reason, turn.method, context, timings)


class _Turn:
    """State of one chat turn while :func:`ask` runs (kept out of the public API)."""

    def __init__(
        self,
        rt: Runtime,
        topic: Topic,
        question: str,
        session_id: str,
        attachment: Attachment | None,
        trace: Trace,
        save: bool,
        started: float,
    ):
        self.rt, self.topic, self.cfg, self.question = rt, topic, topic.settings, question
        self.kind = kind_of(topic)
        self.session_id, self.attachment, self.trace, self.save = session_id, attachment, trace, save
        self.started = started
        self.prompts: dict[str, PromptTemplate] = {}
        self.history: list[dict] = []
        self.route: str = self.kind.default_route
        self.confidence: float | None = None
        self.reason = ""
        self.method = ""
        self.entities: tuple[str, ...] = ()
        self.note = ""
        self.rerank = ""
        self.planned = ""
        self.retrieved: list[str] = []

    # -- the pipeline -------------------------------------------------------------------

    def run(self, forced: Route | None, allow_tools: bool) -> Iterator[ChatUpdate]:
        """Route (or take the forced way), answer without searching when that is the way, else search."""
        if forced is None and self.cfg.route_before_retrieval:
            yield self.update("", phase="routing")
        self.take_way(forced)
        if self.route in (Route.DIRECT.value, Route.ATTACHMENT.value):
            text = yield from self.answer_without_search(Route(self.route))
            if text is not None:
                yield self.finish(text, [])
                return
            fallback = self.kind.default_route
            self.trace.add("fallback_to_search", reason=f"the {self.route} answer needed the documents; {fallback} taken")
            self.reason = f"{self.route} answer needed the documents; {fallback} taken"
            self.planned, self.route = self.route, fallback
        yield from self.search_and_answer(allow_tools)

    def take_way(self, forced: Route | None) -> None:
        """The forced way, else the router's when the Topic routes before retrieval (else the kind's search way)."""
        if forced is not None:
            self.route, self.method, self.reason = forced.value, "forced", "route forced by the caller"
        elif self.cfg.route_before_retrieval:
            self.decide_route()

    def decide_route(self) -> None:
        cfg, kind = self.cfg, self.kind
        named = kind.named_entities(self.rt, self.topic, self.question, (), self.trace)  # a routing signal
        choice = choose_route(
            self.rt.gateway,
            kind=kind.name,
            method=cfg.router_method,
            template=self.prompts["router"],
            history=self.history,
            question=self.question,
            has_attachment=self.attachment is not None,
            threshold=kind.router_threshold(cfg),
            direct_threshold=kind.direct_threshold(cfg),
            allow_direct=kind.allows_direct(cfg),
            trace=self.trace,
            named=named,
        )
        self.route, self.confidence, self.reason, self.method = (
            choice.route.value,
            choice.confidence,
            choice.reason,
            choice.method,
        )
        self.entities = tuple(choice.entities)
        if kind.has_graph:  # the model's names as the graph holds them, else the names the question holds
            llm_named = choice.method == "llm" and choice.entities
            self.entities = (
                kind.named_entities(self.rt, self.topic, self.question, self.entities, self.trace) if llm_named else named
            )

    def retriever(self, progress: SearchProgress | None = None) -> Retriever:
        """The search way for the current route: SEARCH (RAG), or PATH, LOCAL, GLOBAL or HYBRID (GraphRAG)."""
        return self.kind.retriever(self.rt, self.topic, self.route, self.prompts, progress)

    def search_and_answer(self, allow_tools: bool) -> Iterator[ChatUpdate]:
        yield self.update("", phase="searching")
        context = yield from self.search()
        tools, tool_topics = topic_tools(self.rt, self.topic, self.prompts["tool_description"]) if allow_tools else ([], {})
        if not context.items and not tools:
            self.trace.add("no_answer", reason=context.note or "nothing found and no connected Topic")
            self.note = context.note  # why nothing was found ("no community summaries yet: …")
            yield self.finish(self.cfg.no_answer_response, [], no_answer=True)
            return
        coded = assign_codes(context.items)
        files = code_files(coded)
        offered = self.offer_pictures(context.items)
        tool_results: list[ToolResult] = []
        extractive = not tools and self.is_extractive(context.answer_role)
        if extractive:
            raw = yield from self.quote(coded, offered, files)
        elif tools:
            raw, tool_results = yield from self.answer_with_tools(self.answer_messages(coded, offered), tools, tool_topics, files)
        else:
            raw = yield from self.stream(self.answer_messages(coded, offered), files, role=context.answer_role)
        sources = self.attribute(raw, coded, model_check=not extractive)
        # Community summaries have no source file: an answer written from them alone stands without sources.
        from_summaries = raw.strip() and any(not item.provenance for item in context.items)
        # The attached file is in the prompt too: an answer drawn from it has no document to cite.
        from_attachment = raw.strip() and self.attachment is not None
        if not sources and not from_summaries and not from_attachment and not any(r.contributed for r in tool_results):
            self.trace.add("no_answer", reason="no evidence and no connected Topic contributed to the answer", raw_answer=raw)
            yield self.finish(self.cfg.no_answer_response, [], no_answer=True)
            return
        for r in tool_results:
            sources += [s.with_(code="", topic=s.topic or r.topic, reason=f"via {r.topic}") for s in r.sources]
        yield self.finish(self.show_pictures(render_citations(raw, files), offered), sources)

    def search(self) -> Generator[ChatUpdate, None, Context]:
        """Run the way's search and take the way it answered by (a graph way may fall back: PATH without
        a chain, HYBRID whose planning failed), with its note in the route reason."""
        context = yield from self.retrieve()
        self.retrieved = ranked_files(context)
        if context.rerank:  # said under the answer, and kept with the turn in its route reason
            self.rerank = context.rerank
            self.reason = f"{self.reason}; {context.rerank}" if self.reason else context.rerank
        if context.route != self.route:
            self.trace.add("route_fallback", planned=self.route, taken=context.route, note=context.note)
            self.reason = f"{self.reason}; {context.note}" if self.reason else context.note
            self.planned, self.route, self.note = self.route, context.route, context.note
        return context

    def retrieve(self) -> Generator[ChatUpdate, None, Context]:
        """The retriever's context. A GraphRAG search runs in a thread so that its progress ("reading 8
        summaries") shows before the first token and Stop (closing this generator) ends its model calls."""
        previous = next(
            (m["content"] for m in reversed(self.history) if m["role"] == "user" and isinstance(m["content"], str)), ""
        )
        query = RetrievalQuery(self.question, previous, self.entities)
        if not self.kind.searches_in_thread:
            return self.retriever().retrieve(query, self.trace)
        progress = SearchProgress()
        retriever = self.retriever(progress)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graph-search")
        future = pool.submit(retriever.retrieve, query, self.trace)
        try:
            while True:
                try:
                    message = progress.messages.get(timeout=PROGRESS_POLL_S)
                except queue.Empty:
                    if future.done():
                        break
                    continue
                yield self.update("", phase="searching", status=message)
            return future.result()
        finally:
            progress.stop()  # a no-op once the search is over; on Stop it starts no further model call
            pool.shutdown(wait=False)

    # -- prompt and answer --------------------------------------------------------------

    def system_message(self) -> dict:
        text = self.prompts["system"].render(topic_name=self.topic.name, custom_system_prompt=self.cfg.custom_system_prompt)
        return {"role": "system", "content": text.strip()}

    def user_content(self, rendered: str) -> str | list[dict]:
        """The user message: text, plus the picture as an image part when one is attached."""
        if self.attachment is not None and self.attachment.kind == "image":
            return [{"type": "text", "text": rendered}, {"type": "image_url", "image_url": {"url": self.attachment.data_url}}]
        return rendered

    def question_text(self) -> str:
        """The question with an attached text file's content in front of it."""
        if self.attachment is not None and self.attachment.kind == "text":
            return text_attachment_message(self.question, self.attachment)
        return f"Question: {self.question}"

    def answer_without_search(self, route: Route) -> Generator[ChatUpdate, None, str | None]:
        """Stream a DIRECT or ATTACHMENT answer; returns None when the model says it needs the documents."""
        if route == Route.ATTACHMENT and self.attachment is not None and self.attachment.kind == "text" and self.is_extractive():
            return (yield from self.quote_attachment(self.attachment))
        template = self.prompts["direct" if route == Route.DIRECT else "attachment"]
        rendered = template.render(question=self.question_text() if route == Route.ATTACHMENT else self.question)
        messages = [self.system_message(), *self.history, {"role": "user", "content": self.user_content(rendered)}]
        parts: list[str] = []
        with self.trace.step("answer", route=route.value) as ev:
            deltas = self.answer_deltas(messages, template.name)
            while True:
                try:
                    parts.append(next(deltas))
                except StopIteration as done:
                    raw = done.value.strip()
                    break
                text = "".join(parts).strip()
                if NEEDS_DOCUMENTS.startswith(text) or NEEDS_DOCUMENTS in text:
                    continue  # hold back what may be the "needs documents" signal
                yield self.update(text)
            ev.data["raw_answer"] = raw
        return None if NEEDS_DOCUMENTS in raw else raw

    def answer_messages(self, coded: dict[str, Evidence], offered: list[OfferedPicture]) -> list[dict]:
        with self.trace.step("prompt") as ev:
            sources = format_sources(coded, self.prompts["source_block"]) if coded else "(no documents matched)"
            if offered:
                sources += "\n\n" + format_pictures(offered, template=self.prompts["pictures"], line=self.prompts["picture_line"])
            user = self.prompts["answer"].render(
                sources=sources, citing_rules=self.prompts["citing_rules"].render(), question=self.question_text()
            )
            messages = [self.system_message(), *self.history, {"role": "user", "content": self.user_content(user)}]
            ev.data.update(messages=messages, history_messages=len(self.history))
        return messages

    def answer_deltas(self, messages: list[dict], prompt_name: str, **kw) -> Generator[str, None, str]:
        """The language model's streamed answer, piece by piece; returns the whole answer.

        One cut at the token limit ends with :data:`TRUNCATED_NOTE`. A degenerate loop (see
        :mod:`~ragtopics.answer.repetition`) ends the stream at once (the model call is closed): the
        returned answer is cut back to before the loop and ends with :data:`STOPPED_NOTE`, so the
        caller shows that instead of what streamed.
        """
        guard = RepetitionGuard()
        parts: list[str] = []
        role = kw.pop("role", "language_model")  # HYBRID's answer is written by the Follow-up Model
        stream = self.rt.gateway.stream_chat(role, messages, prompt_name=prompt_name, trace=self.trace, **kw)
        while True:
            try:
                delta = next(stream)
            except StopIteration as done:
                finish = done.value
                break
            parts.append(delta)
            yield delta
            if guard.tripped("".join(parts)):
                stream.close()  # stops the generation: the server is told by the closed connection
                text = "".join(parts)
                self.trace.add(
                    "repetition_stopped",
                    at_char=guard.loop_start,
                    streamed_chars=len(text),
                    repeated=text[guard.loop_start : guard.cycle_end][:200],
                )
                return f"{trimmed(text, guard)} {STOPPED_NOTE}".strip()
        text = "".join(parts)
        if finish == "length":  # say so rather than end mid-sentence without a word
            note = TRUNCATED_NOTE.format(max_tokens=kw.get("max_tokens") or self.rt.settings.llm_max_tokens)
            yield note
            text += note
        return text

    def stream(self, messages: list[dict], files: dict[str, list[str]], **kw) -> Generator[ChatUpdate, None, str]:
        """The answer as the model writes it. A GraphRAG Topic's PATH and LOCAL answers are written
        whole first and then shown word by word; GLOBAL and HYBRID (and a RAG Topic's) stream."""
        parts: list[str] = []
        whole_first = not self.kind.streams_answer(self.route)
        with self.trace.step("answer", route=self.route, streamed=not whole_first) as ev:
            deltas = self.answer_deltas(messages, "answer", **kw)
            while True:
                try:
                    delta = next(deltas)
                except StopIteration as done:
                    raw = done.value
                    break
                if not parts:
                    ev.data["first_token_ms"] = round((time.perf_counter() - self.started) * 1000, 3)
                    if whole_first:
                        yield self.update("", phase="writing", status="writing the answer")
                parts.append(delta)
                if not whole_first:
                    yield self.update(render_citations("".join(parts), files))
            ev.data["raw_answer"] = raw
        if whole_first:
            yield from self.show_words(raw, files)
        return raw

    def show_words(self, raw: str, files: dict[str, list[str]]) -> Iterator[ChatUpdate]:
        """A written answer shown word by word (:data:`WORDS_PER_UPDATE` a step), citations as file names."""
        words = raw.split(" ")
        for end in range(WORDS_PER_UPDATE, len(words) + WORDS_PER_UPDATE, WORDS_PER_UPDATE):
            yield self.update(render_citations(" ".join(words[:end]), files))

    # -- extractive answers -------------------------------------------------------------

    def is_extractive(self, role: str = "language_model") -> bool:
        """Whether answers are quoted rather than written: Answer Mode EXTRACTIVE, or AUTO while the role that
        would write the answer (the Language Model; HYBRID's Follow-up Model), with the Topic's override, is
        the bundled model."""
        mode = self.cfg.answer_mode
        if mode == "AUTO":
            return self.rt.gateway.endpoint(role, self.trace).is_local
        return mode == "EXTRACTIVE"

    def extractive_note(self) -> str:
        """The line under a quoted answer: why it is quoted, and how to get written answers."""
        bundled = self.rt.gateway.endpoint("language_model", self.trace).is_local
        return EXTRACTIVE_NOTE_BUNDLED if bundled else EXTRACTIVE_NOTE_CHOSEN

    def select_quotes(self, passages: list[Passage]) -> list:
        """The sentences to quote, ranked by the embedding model (see :mod:`~ragtopics.answer.extractive`)."""
        ranked = rank_sentences(
            self.question, passages, lambda texts: self.rt.gateway.embed(texts, trace=self.trace, purpose="extractive answer")
        )
        return choose_quotes(ranked)

    def quote(
        self, coded: dict[str, Evidence], offered: list[OfferedPicture], files: dict[str, list[str]]
    ) -> Generator[ChatUpdate, None, str]:
        """An extractive answer from the evidence, shown word by word; returns it with its citation codes.

        The pictures linked to the quoted evidence are placed under the quotes. Returns "" when no
        sentence of the evidence can be quoted (the no-answer response is then shown).
        """
        quotable = [code for code, item in coded.items() if item.kind in QUOTABLE_KINDS] or list(coded)
        passages = [Passage(code, coded[code].text, rank) for rank, code in enumerate(quotable)]
        if passages and all(coded[code].kind == "community_report" for code in quotable):
            return (yield from self.quote_themes(passages, files, coded))
        with self.trace.step("answer", route=self.route, method="extractive") as ev:
            quotes = self.select_quotes(passages)
            lead = lead_line([(q.code, coded[q.code].file_names) for q in quotes], fallback=SUMMARIES_LEAD)
            quoted = {pid for q in quotes for pid in coded[q.code].pictures}
            pictures = " ".join(f"[{p.code}]" for p in offered if p.picture_id in quoted)
            raw = compose_answer(quotes, lead=lead, note=self.extractive_note(), pictures=pictures)
            ev.data.update(
                quotes=[{"code": q.code, "sentence": q.text, "score": round(q.score, 4)} for q in quotes],
                raw_answer=raw,
                first_token_ms=round((time.perf_counter() - self.started) * 1000, 3),
            )
        yield from self.show_words(raw, files)
        return raw

    def quote_themes(
        self, passages: list[Passage], files: dict[str, list[str]], coded: dict[str, Evidence]
    ) -> Generator[ChatUpdate, None, str]:
        """An overview answer from community summaries alone: one titled line per community (see
        :func:`~ragtopics.answer.extractive.theme_quotes`), shown word by word; returns it ("" when none).

        A line whose quoted point has a document of its own cites that document alone: ``files`` (code → file
        names, as the final answer renders its citations) is updated in place (:func:`theme_files`)."""
        with self.trace.step("answer", route=self.route, method="extractive", form="themes") as ev:
            themes = theme_quotes(
                self.question,
                passages,
                lambda texts: self.rt.gateway.embed(texts, trace=self.trace, purpose="extractive answer"),
                overview=is_overview(self.question),
            )
            raw = compose_themes(themes, lead=SUMMARIES_LEAD, note=self.extractive_note())
            files.update(theme_files(themes, coded))
            ev.data.update(
                quotes=[{"code": q.code, "title": title, "sentence": q.text, "score": round(q.score, 4)} for title, q in themes],
                raw_answer=raw,
                first_token_ms=round((time.perf_counter() - self.started) * 1000, 3),
            )
        yield from self.show_words(raw, files)
        return raw

    def quote_attachment(self, attachment: Attachment) -> Generator[ChatUpdate, None, str | None]:
        """An ATTACHMENT answer quoted from the attached text file; None when nothing in it can be quoted."""
        with self.trace.step("answer", route=Route.ATTACHMENT.value, method="extractive") as ev:
            quotes = self.select_quotes([Passage("", attachment.text, 0)])
            raw = compose_answer(quotes, lead=f"From the attached file {attachment.file_name}:", note=self.extractive_note())
            ev.data.update(quotes=[{"sentence": q.text, "score": round(q.score, 4)} for q in quotes], raw_answer=raw)
        if not raw:
            return None
        yield from self.show_words(raw, {})
        return raw

    def answer_with_tools(
        self, messages: list[dict], tools: list[dict], tool_topics: dict[str, Topic], files: dict[str, list[str]]
    ) -> Generator[ChatUpdate, None, tuple[str, list[ToolResult]]]:
        text, calls = self.rt.gateway.complete_with_tools(
            "language_model", messages, tools, prompt_name="answer", trace=self.trace
        )
        if not calls:
            yield self.update(render_citations(text, files))
            return text, []
        messages = [
            *messages,
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls
                ],
            },
        ]
        results: list[ToolResult] = []
        for call in calls:
            other = tool_topics.get(call["name"])
            if other is None:
                result = ToolResult(call["name"], "", "", contributed=False)
            else:
                result = self.call_topic(other, parse_question(call["arguments"], self.question))
            results.append(result)
            messages.append(tool_message(call["id"], result))
        raw = yield from self.stream(messages, files, tools=tools)
        return raw, results

    def call_topic(self, other: Topic, question: str) -> ToolResult:
        """Ask a connected Topic; its steps nest under this turn's ``tool_call`` step, its sources keep their links."""
        with self.trace.step("tool_call", topic=other.name, question=question) as ev:
            *_, final = ask(
                self.rt, get_topic(self.rt, other.id), question, save=False, allow_tools=False, parent_trace=self.trace
            )
            ev.data.update(answer=final.text, sources=[s.to_public() for s in final.sources], no_answer=final.no_answer)
        return ToolResult(other.name, question, final.text, list(final.sources), contributed=not final.no_answer)

    # -- after the answer ---------------------------------------------------------------

    def attribute(self, raw: str, coded: dict[str, Evidence], *, model_check: bool = True) -> list[Source]:
        """The sources the answer used: per used file, the chunks it cited or quoted first, then the file's others.

        Files neither cited nor quoted are confirmed by a model call per file, except while the Language
        Model role is the bundled model: it would confirm any file, so they are decided on evidence
        (figures the answer shares with them, else the best retrieved file). ``model_check=False``
        (an extractive answer, which cites exactly what it quotes) never asks the model either."""
        candidates = [_Candidate(code, name, item.text) for code, item in coded.items() for name in item.file_names]
        # The bundled model says "used" to any file: no call.
        bundled = not model_check or self.rt.gateway.endpoint("language_model", self.trace).is_local
        with self.trace.step("source_check", method=NO_SOURCE_CHECK if bundled else "model") as ev:
            check = check_sources(raw, candidates, None if bundled else self.confirm_use)
            ev.data.update(reasons=check.reasons, chunk_reasons=check.chunk_reasons, answer_before=raw)
            if check.fallback:
                ev.data["fallback"] = check.fallback
        primary: list[Source] = []
        rest: list[Source] = []
        seen: set[tuple[str, str]] = set()
        # A chunk is listed once, with its own score: graph items (entities, relationships, chains) rest on
        # chunks that may also be evidence themselves, and used chunks come before "same file" ones.
        chunk_scores = {item.id: item.score for item in coded.values() if item.kind == "chunk"}
        used = sorted(check.used, key=lambda c: check.chunk_reasons.get(c.code, "") == "same file")
        for c in used:
            item = coded[c.code]
            for p in item.provenance:
                chunk_id = p.chunk_ids[0] if p.chunk_ids else item.id
                if p.file_name != c.file or (p.document_id, chunk_id) in seen:
                    continue
                seen.add((p.document_id, chunk_id))
                reason = check.chunk_reasons.get(c.code, "")
                source = Source(
                    p.file_name,
                    chunk_id,
                    round(chunk_scores.get(chunk_id, item.score), 4),
                    c.code,
                    p.document_id,
                    p.topic or self.topic.name,
                    kind=p.kind,
                    reason=reason,
                    pages=p.pages,
                    version=p.version,
                )
                (rest if reason == "same file" else primary).append(source)
        order = list(dict.fromkeys(s.file for s in primary + rest))
        return sorted(primary, key=lambda s: order.index(s.file)) + sorted(rest, key=lambda s: order.index(s.file))

    def confirm_use(self, answer: str, file: str, text: str) -> bool:
        content = self.prompts["source_check"].render(answer=answer, file_name=file, text=text[:4000])
        reply = self.rt.gateway.structured(
            "language_model",
            [{"role": "user", "content": content}],
            _Used,
            prompt_name="source_check",
            trace=self.trace,
            max_tokens=SOURCE_CHECK_MAX_TOKENS,
        )
        return reply.used

    def offer_pictures(self, items: tuple[Evidence, ...]) -> list[OfferedPicture]:
        """The stored pictures of the evidence, coded ``P1``... (none when Show pictures in answers is off)."""
        ids = list(dict.fromkeys(pid for item in items for pid in item.pictures))
        if not getattr(self.cfg, "show_pictures", True) or not ids:
            return []
        files = {pid: item.file_names[0] for item in reversed(items) for pid in item.pictures if item.file_names}
        rows = chats.pictures_by_id(self.rt.metadata, ids)
        found = [rows[pid] for pid in ids if pid in rows]
        return [
            OfferedPicture(f"P{n}", r.id, r.caption or r.description or files[r.id], files[r.id], r.blob_path)
            for n, r in enumerate(found, start=1)
        ]

    def show_pictures(self, answer: str, offered: list[OfferedPicture]) -> str:
        """The answer with the pictures the model placed shown as Markdown images, other picture codes removed."""
        links = {p.code: (p.label, self.rt.signer.sign(p.blob_path)) for p in offered}
        text, placed = place_pictures(answer, links)
        if offered or placed:
            self.trace.add("pictures", offered=[asdict(p) for p in offered], placed=placed)
        return text

    def update(self, text: str, *, phase: str = "answering", status: str = "") -> ChatUpdate:
        return ChatUpdate(
            text=text,
            route=self.route,
            route_confidence=self.confidence,
            route_reason=self.reason,
            route_method=self.method,
            session_id=self.session_id,
            phase=phase,
            status=status,
        )

    def finish(self, answer: str, sources: list[Source], *, no_answer: bool = False) -> ChatUpdate:
        sources = _linked(self.rt, sources)
        self.trace.add("finish", answer=answer, sources=[s.to_public() for s in sources], route=self.route)
        timings = {**self.trace.timings_ms(), "total": round((time.perf_counter() - self.started) * 1000, 3)}
        first = next((e.data["first_token_ms"] for e in self.trace.events if "first_token_ms" in e.data), None)
        if first is not None:
            timings["first_token"] = first
        turn_id = None
        if self.save:
            turn_id = save_turn(
                self.rt,
                self.topic,
                session_id=self.session_id,
                question=self.question,
                answer=answer,
                sources=sources,
                route=self.route,
                route_confidence=self.confidence,
                timings_ms=timings,
                route_reason=self.reason,
                route_method=self.method,
                route_planned=self.planned,
            )
            record_trace(self.rt, self.trace, kind="chat", owner=f"turn:{turn_id}", subject=self.question, topic_id=self.topic.id)
        else:  # not stored, still traced
            export_trace(self.rt.settings, self.trace, kind="chat", subject=self.question, topic_id=self.topic.id)
        return ChatUpdate(
            text=answer,
            done=True,
            sources=sources,
            route=self.route,
            route_confidence=self.confidence,
            route_reason=self.reason,
            route_method=self.method,
            route_planned=self.planned,
            session_id=self.session_id,
            turn_id=turn_id,
            no_answer=no_answer,
            phase="done",
            note=self.note,
            rerank=self.rerank,
            timings_ms=timings,
            retrieved=self.retrieved,
        )


@dataclass(frozen=True, slots=True)
class _Candidate:
    """An evidence item as the attribution check sees it (one per file it rests on)."""

    code: str
    file: str
    text: str


def theme_files(themes: list[tuple[str, Quote]], coded: dict[str, Evidence]) -> dict[str, list[str]]:
    """The file each theme line cites: the document of the point it quotes, when its summary's provenance is given
    point by point (:func:`~ragtopics.graph.global_search.point_provenance`); other codes are left out.

    Args:
        themes: ``(title, quote)`` per line (:func:`~ragtopics.answer.extractive.theme_quotes`).
        coded: citation code → the community report evidence.

    Returns:
        Code → ``[file name]`` for the lines whose point has a document.
    """
    out: dict[str, list[str]] = {}
    for _, quote in themes:
        item = coded.get(quote.code)
        if item is None or not item.provenance:
            continue
        n = point_index(item.text, quote.text)
        points = sum(1 for line in item.text.splitlines() if line.startswith("- "))
        if n is not None and len(item.provenance) == points:
            out[quote.code] = [item.provenance[n].file_name]
    return out


def _linked(rt: Runtime, sources: list[Source]) -> list[Source]:
    """The sources with signed download links to the very file version their chunks were read from.

    A chunk records its file's version (content hash), so the link serves that version
    even when a newer upload was swapped in after the search; when that version is no
    longer stored, the source has no link and says ``changed``. Chunks stored before
    versions were kept link to the searchable version. A PDF's link opens the source's
    first page (``#page=N``, see :func:`~ragtopics.answer.context.page_link`). A connected
    Topic's sources already carry their links; graph-ingestion records have none.
    """
    docs = chats.documents_by_id(rt.metadata, [s.document_id for s in sources if s.document_id and not s.link])
    out = []
    for s in sources:
        doc = docs.get(s.document_id)
        if doc is None or not doc.blob_path or s.kind != "upload":
            out.append(s)
            continue
        if not s.version or s.version == doc.content_sha256:
            s = s.with_(version=doc.content_sha256).with_link(rt.signer.sign(doc.blob_path))
        else:
            path = rt.blobs.relative_path(doc.topic_id, doc.id, s.version, doc.file_name)
            s = s.with_link(rt.signer.sign(path)) if rt.blobs.exists(path) else s.with_(link="", status="changed")
        out.append(s)
    return out


def _checked_route(topic: Topic, route: str | None) -> Route | None:
    if route is None:
        return None
    allowed = routes_for(topic.kind)
    name = route.strip().upper()
    if name not in {r.value for r in allowed}:
        raise RagTopicsError(
            f"route {route!r} is not a way of a {topic.kind} Topic; choose one of {', '.join(r.value for r in allowed)}"
        )
    return Route(name)


def _checked_question(question: str) -> str:
    question = (question or "").strip()
    if not question:
        raise RagTopicsError("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise RagTopicsError(f"the question is {len(question)} characters long; the limit is {MAX_QUESTION_CHARS}")
    return question
