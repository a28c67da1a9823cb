"""Phase B orchestrator: question → (route) → search → filter → (rerank) → prompt → streamed answer
(with connected Topics as tools) → citations, placed pictures and source check → save.

:func:`ask` is a generator of :class:`ChatUpdate`; the console and the CLI iterate
it. Closing it early (Stop) ends the model stream and saves nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field, replace

from pydantic import BaseModel
from sqlmodel import select

from ragtopics.answer.attachments import Attachment, attachment_message_parts
from ragtopics.answer.citations import code_for, format_sources, render_citations
from ragtopics.topics.connected import ToolResult, parse_question, tool_message, topic_tools
from ragtopics.documents.uploads import source_link
from ragtopics.errors import NotFoundError, RagTopicsError
from ragtopics.ingest.pictures import OfferedPicture, format_pictures, place_pictures
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.prompts.templates import NEEDS_DOCUMENTS, PromptTemplate
from ragtopics.rag.rerank import rerank
from ragtopics.rag.retrieval import retrieve
from ragtopics.answer.routing import Route, choose_route
from ragtopics.runtime import Runtime
from ragtopics.answer.attribution import Source as CheckedChunk
from ragtopics.answer.attribution import check_sources
from ragtopics.topics.topics import Topic, get_topic
from ragtopics.tracing.trace import Trace
from ragtopics.storage.chunk_index import ChunkHit
from ragtopics.storage.metadata import ChatSessionRow, ChatTurnRow, PictureRow

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 8000


@dataclass(frozen=True, slots=True)
class Source:
    """A source shown under an answer.

    Attributes:
        file: the document's file name.
        chunk_id: the chunk the answer drew on.
        score: the retrieval score (cosine similarity under DENSE, normalised RRF under HYBRID).
        code: the citation code it had in the prompt (``S1``...); "" for a connected Topic's source.
        document_id: the document's id ("" for a connected Topic's source).
        topic: the Topic it comes from.
        link: a signed download link for the original file, valid for about 10 minutes.
    """

    file: str
    chunk_id: str
    score: float
    code: str
    document_id: str
    topic: str = ""
    link: str = ""


@dataclass(slots=True)
class ChatUpdate:
    """One step of a streamed answer.

    Attributes:
        text: the answer so far, citation codes already turned into file names.
        done: True for the final update.
        sources: the sources the answer used (final update only).
        route: DIRECT, ATTACHMENT or SEARCH.
        route_confidence: the router's confidence (None when the router was not asked).
        session_id: the chat session.
        turn_id: the saved turn's id (final update, when saved).
        no_answer: the configured no-answer response was shown.
    """

    text: str
    done: bool = False
    sources: list[Source] = field(default_factory=list)
    route: str = "SEARCH"
    route_confidence: float | None = None
    session_id: str = ""
    turn_id: int | None = None
    no_answer: bool = False


class _Used(BaseModel):
    used: bool


def new_session_id() -> str:
    """A fresh chat session id (``chat-<hex>``)."""
    return "chat-" + uuid.uuid4().hex[:16]


def history_messages(rt: Runtime, session_id: str | None, memory: int) -> list[dict]:
    """The last ``memory`` messages (user and assistant) of a session, oldest first."""
    if memory <= 0 or not session_id:
        return []
    with rt.metadata.session() as s:
        turns = s.exec(select(ChatTurnRow).where(ChatTurnRow.session_id == session_id)
                       .order_by(ChatTurnRow.id.desc()).limit((memory + 1) // 2)).all()  # fmt: skip
    messages: list[dict] = []
    for turn in reversed(turns):
        messages += [{"role": "user", "content": turn.question}, {"role": "assistant", "content": turn.answer}]
    return messages[-memory:]


def ask(rt: Runtime, topic: Topic, question: str, *, session_id: str | None = None, attachment: Attachment | None = None,
        save: bool = True, allow_tools: bool = True) -> Iterator[ChatUpdate]:  # fmt: skip
    """Answer a question from a Topic's documents, streaming.

    Args:
        rt: the runtime.
        topic: the Topic asked.
        question: the user's message.
        session_id: continue this chat; a new one is started when None (and ``save``).
        attachment: a file attached to the message (see :mod:`ragtopics.answer.attachments`).
        save: store the turn (False when a connected Topic is asked as a tool).
        allow_tools: offer connected Topics as tools (False inside a tool call: one level only).

    Yields:
        :class:`ChatUpdate` items; the last has ``done=True``.

    Raises:
        RagTopicsError: for an empty or over-long question, or an unknown session.
        ConfigurationError: connected Topics with a model that has no tool support.
        ModelUnavailableError: when the embedding or language model is unreachable.
    """
    question = _checked_question(question)
    cfg = topic.settings
    prompts = resolve_prompts(rt, topic.id)
    if session_id is not None:
        _check_session(rt, topic, session_id)
    elif save:
        # The session row is written with the first saved turn: a stopped first
        # question leaves no empty chat behind.
        session_id = new_session_id()
    trace = Trace("chat", question)
    trace.add("question", question=question, session_id=session_id, topic=topic.name,
              attachment=attachment.file_name if attachment else None)  # fmt: skip
    turn = _Turn(rt, topic, question, session_id or "", attachment, trace, prompts, save)
    turn.history = history_messages(rt, session_id, cfg.memory)
    if cfg.route_before_retrieval:
        choice = choose_route(rt.gateway, prompts["router"], turn.history, question, has_attachment=attachment is not None,
                              threshold=cfg.router_confidence_threshold, trace=trace)  # fmt: skip
        turn.route, turn.confidence = choice.route.value, choice.confidence
        if choice.route != Route.SEARCH:
            text = yield from turn.answer_without_search(choice.route)
            if text is not None:
                yield turn.finish(text, [])
                return
            trace.add("fallback_to_search", reason=f"the {choice.route.value} answer needed the documents")
            turn.route = Route.SEARCH.value
    yield from turn.search_and_answer(allow_tools)


#: Ends a streamed answer that the model stopped because it reached its token limit.
TRUNCATED_NOTE = " … *(cut off at the answer length limit of {max_tokens} tokens, LLM_MAX_TOKENS)*"


class _Turn:
    """State of one chat turn while :func:`ask` runs (kept out of the public API)."""

    def __init__(self, rt: Runtime, topic: Topic, question: str, session_id: str, attachment: Attachment | None,
                 trace: Trace, prompts: dict[str, PromptTemplate], save: bool):  # fmt: skip
        self.rt, self.topic, self.cfg, self.question = rt, topic, topic.settings, question
        self.session_id, self.attachment, self.trace, self.prompts, self.save = session_id, attachment, trace, prompts, save
        self.history: list[dict] = []
        self.route: str = Route.SEARCH.value
        self.confidence: float | None = None

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
            return attachment_message_parts(self.question, self.attachment)
        return f"Question: {self.question}"

    def answer_without_search(self, route: Route) -> Generator[ChatUpdate, None, str | None]:
        """Stream a DIRECT or ATTACHMENT answer; returns None when the model says it needs the documents."""
        template = self.prompts["direct" if route == Route.DIRECT else "attachment"]
        rendered = template.render(question=self.question_text() if route == Route.ATTACHMENT else self.question)
        messages = [self.system_message(), *self.history, {"role": "user", "content": self.user_content(rendered)}]
        parts: list[str] = []
        with self.trace.step("answer", route=route.value) as ev:
            for delta in self.answer_deltas(messages, template.name):
                parts.append(delta)
                text = "".join(parts).strip()
                if NEEDS_DOCUMENTS.startswith(text) or NEEDS_DOCUMENTS in text:
                    continue  # hold back what may be the "needs documents" signal
                yield self.update(text)
            raw = "".join(parts).strip()
            ev.data["raw_answer"] = raw
        return None if NEEDS_DOCUMENTS in raw else raw

    def search_and_answer(self, allow_tools: bool) -> Iterator[ChatUpdate]:
        hits = self.search()
        tools, tool_topics = topic_tools(self.rt, self.topic, self.prompts["tool_description"]) if allow_tools else ([], {})
        if not hits and not tools:
            self.trace.add("no_answer", reason="no chunk passed Min. Similarity Score and no connected Topic")
            yield self.finish(self.cfg.no_answer_response, [], no_answer=True)
            return
        code_to_file = {code_for(i): h.file_name for i, h in enumerate(hits)}
        offered = self.offer_pictures(hits)
        messages = self.answer_messages(hits, offered)
        tool_results: list[ToolResult] = []
        if tools:
            raw, tool_results = yield from self.answer_with_tools(messages, tools, tool_topics, code_to_file)
        else:
            raw = yield from self.stream(messages, code_to_file)
        used = self.check_sources(raw, hits)
        if not used and not any(r.contributed for r in tool_results):
            self.trace.add("no_answer", reason="no chunk and no connected Topic contributed to the answer", raw_answer=raw)
            yield self.finish(self.cfg.no_answer_response, [], no_answer=True)
            return
        sources = [Source(h.file_name, h.chunk_id, round(h.score, 4), code, h.document_id, self.topic.name) for code, h in used]
        for r in tool_results:
            sources += [Source(s["file"], s["chunk_id"], s["score"], "", "", r.topic) for s in r.sources]
        yield self.finish(self.show_pictures(render_citations(raw, code_to_file), offered), sources)

    def search(self) -> list[ChunkHit]:
        cfg = self.cfg
        rerank_llm = cfg.reranking_strategy == "LLM"
        candidates = cfg.top_k_results * (3 if rerank_llm else 1)
        queries = [self.question]
        previous = next((m["content"] for m in reversed(self.history) if m["role"] == "user" and isinstance(m["content"], str)), "")
        if previous:
            # A follow-up ("and how long must I wait?") may name nothing searchable; only when the
            # question alone finds no chunk is it searched again together with the previous question.
            queries.append(f"{previous}\n{self.question}")
        for query in queries:
            with self.trace.step("retrieve", query=query, strategy=cfg.retrieval_strategy, top_k=cfg.top_k_results,
                                 min_score=cfg.min_similarity_score, candidates=candidates) as ev:  # fmt: skip
                vector = self.rt.gateway.embed([query], trace=self.trace, purpose="question")[0]
                found = retrieve(self.rt.chunk_index(self.topic.id), query, vector, strategy=cfg.retrieval_strategy,
                                 top_k=cfg.top_k_results, min_score=cfg.min_similarity_score, candidates=candidates,
                                 rrf_k=cfg.rrf_k)  # fmt: skip
                ev.data.update(dense=[_hit_summary(h) for h in found.dense], keyword=[_hit_summary(h) for h in found.keyword],
                               fused_ranks=found.fused_ranks, kept=[_hit_summary(h) for h in found.hits])  # fmt: skip
            if found.hits:
                break
        hits = found.hits
        if rerank_llm and hits:
            hits = rerank(self.rt.gateway, self.prompts["rerank"], self.question, hits, top_k=cfg.top_k_results, trace=self.trace)
        return hits[: cfg.top_k_results]

    def offer_pictures(self, hits: list[ChunkHit]) -> list[OfferedPicture]:
        """The stored pictures of the kept chunks, coded ``P1``... (none when Show pictures in answers is off)."""
        ids = list(dict.fromkeys(pid for h in hits for pid in h.pictures.split()))
        if not self.cfg.show_pictures or not ids:
            return []
        files = {pid: h.file_name for h in reversed(hits) for pid in h.pictures.split()}
        with self.rt.metadata.session() as s:
            rows = {r.id: r for r in s.exec(select(PictureRow).where(PictureRow.id.in_(ids))).all()}
        found = [rows[pid] for pid in ids if pid in rows]
        return [OfferedPicture(f"P{n}", r.id, r.caption or r.description or files[r.id], files[r.id], r.blob_path)
                for n, r in enumerate(found, start=1)]  # fmt: skip

    def show_pictures(self, answer: str, offered: list[OfferedPicture]) -> str:
        """The answer with the pictures the model placed shown as Markdown images, other picture codes removed."""
        links = {p.code: (p.label, self.rt.signer.sign(p.blob_path)) for p in offered}
        text, placed = place_pictures(answer, links)
        if offered or placed:
            self.trace.add("pictures", offered=[asdict(p) for p in offered], placed=placed)
        return text

    def answer_messages(self, hits: list[ChunkHit], offered: list[OfferedPicture] | None = None) -> list[dict]:
        with self.trace.step("prompt") as ev:
            sources = format_sources(hits, self.prompts["source_block"]) if hits else "(no documents matched)"
            if offered:
                sources += "\n\n" + format_pictures(offered, template=self.prompts["pictures"], line=self.prompts["picture_line"])
            user = self.prompts["answer"].render(sources=sources, citing_rules=self.prompts["citing_rules"].render(),
                                                 question=self.question_text())  # fmt: skip
            messages = [self.system_message(), *self.history, {"role": "user", "content": self.user_content(user)}]
            ev.data.update(messages=messages, history_messages=len(self.history))
        return messages

    def answer_deltas(self, messages: list[dict], prompt_name: str, **kw) -> Iterator[str]:
        """The language model's streamed answer; one cut at the token limit ends with :data:`TRUNCATED_NOTE`."""
        finish = yield from self.rt.gateway.stream_chat("language_model", messages, prompt_name=prompt_name, trace=self.trace, **kw)
        if finish == "length":  # say so rather than end mid-sentence without a word
            yield TRUNCATED_NOTE.format(max_tokens=kw.get("max_tokens") or self.rt.settings.llm_max_tokens)

    def stream(self, messages: list[dict], code_to_file: dict[str, str], **kw) -> Generator[ChatUpdate, None, str]:
        parts: list[str] = []
        with self.trace.step("answer", route=self.route) as ev:
            for delta in self.answer_deltas(messages, "answer", **kw):
                parts.append(delta)
                yield self.update(render_citations("".join(parts), code_to_file))
            ev.data["raw_answer"] = "".join(parts)
        return "".join(parts)

    def answer_with_tools(self, messages: list[dict], tools: list[dict], tool_topics: dict[str, Topic],
                          code_to_file: dict[str, str]) -> Generator[ChatUpdate, None, tuple[str, list[ToolResult]]]:  # fmt: skip
        text, calls = self.rt.gateway.complete_with_tools("language_model", messages, tools, prompt_name="answer", trace=self.trace)
        if not calls:
            yield self.update(render_citations(text, code_to_file))
            return text, []
        messages = [*messages, {"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]}]  # fmt: skip
        results: list[ToolResult] = []
        for call in calls:
            other = tool_topics.get(call["name"])
            if other is None:
                result = ToolResult(call["name"], "", "", contributed=False)
            else:
                result = self.call_topic(other, parse_question(call["arguments"], self.question))
            results.append(result)
            messages.append(tool_message(call["id"], result))
        raw = yield from self.stream(messages, code_to_file, tools=tools)
        return raw, results

    def call_topic(self, other: Topic, question: str) -> ToolResult:
        with self.trace.step("tool_call", topic=other.name, question=question) as ev:
            *_, final = ask(self.rt, get_topic(self.rt, other.id), question, save=False, allow_tools=False)
            sources = [{"file": s.file, "chunk_id": s.chunk_id, "score": s.score} for s in final.sources]
            ev.data.update(answer=final.text, sources=sources, no_answer=final.no_answer)
        return ToolResult(other.name, question, final.text, sources, contributed=not final.no_answer)

    def check_sources(self, raw: str, hits: list[ChunkHit]) -> list[tuple[str, ChunkHit]]:
        """Keep the chunks whose documents the answer cited, quoted or a model check confirmed."""
        by_code = {code_for(i): h for i, h in enumerate(hits)}
        candidates = [CheckedChunk(code, h.file_name, h.text) for code, h in by_code.items()]
        with self.trace.step("source_check") as ev:
            check = check_sources(raw, candidates, self.confirm_use)
            ev.data.update(reasons=check.reasons, answer_before=raw)
        return [(c.code, by_code[c.code]) for c in check.used]

    def confirm_use(self, answer: str, file: str, text: str) -> bool:
        content = self.prompts["source_check"].render(answer=answer, file_name=file, text=text[:4000])
        reply = self.rt.gateway.structured("language_model", [{"role": "user", "content": content}], _Used,
                                           prompt_name="source_check", trace=self.trace, max_tokens=20)  # fmt: skip
        return reply.used

    def update(self, text: str) -> ChatUpdate:
        return ChatUpdate(text=text, route=self.route, route_confidence=self.confidence, session_id=self.session_id)

    def finish(self, answer: str, sources: list[Source], *, no_answer: bool = False) -> ChatUpdate:
        sources = [_with_link(self.rt, s) for s in sources]
        self.trace.add("finish", answer=answer, sources=[asdict(s) for s in sources], route=self.route)
        turn_id = self.save_turn(answer, sources) if self.save else None
        return ChatUpdate(text=answer, done=True, sources=sources, route=self.route, route_confidence=self.confidence,
                          session_id=self.session_id, turn_id=turn_id, no_answer=no_answer)  # fmt: skip

    def save_turn(self, answer: str, sources: list[Source]) -> int:
        stored = [{k: v for k, v in asdict(s).items() if k != "link"} for s in sources]
        with self.rt.metadata.session() as s:
            if s.get(ChatSessionRow, self.session_id) is None:
                s.add(ChatSessionRow(id=self.session_id, topic_id=self.topic.id, title=self.question[:80]))
                s.flush()
            row = ChatTurnRow(session_id=self.session_id, topic_id=self.topic.id, question=self.question, answer=answer,
                              sources_json=json.dumps(stored), route=self.route, route_confidence=self.confidence,
                              timings_json=json.dumps(self.trace.timings_ms()), trace_json=json.dumps(self.trace.to_list()))  # fmt: skip
            s.add(row)
            s.flush()
            return row.id


def _with_link(rt: Runtime, source: Source) -> Source:
    """The source with a signed download link to its document's original file."""
    link = source_link(rt, source.document_id) if source.document_id else ""
    return replace(source, link=link) if link else source


def _checked_question(question: str) -> str:
    question = (question or "").strip()
    if not question:
        raise RagTopicsError("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise RagTopicsError(f"the question is {len(question)} characters long; the limit is {MAX_QUESTION_CHARS}")
    return question


def _check_session(rt: Runtime, topic: Topic, session_id: str) -> None:
    with rt.metadata.session() as s:
        row = s.get(ChatSessionRow, session_id)
    if row is None or row.topic_id != topic.id:
        raise NotFoundError(f"no chat session {session_id} in Topic {topic.name!r}")


def list_sessions(rt: Runtime, topic: Topic) -> list[ChatSessionRow]:
    """The chat sessions of a Topic, newest first."""
    with rt.metadata.session() as s:
        return list(s.exec(select(ChatSessionRow).where(ChatSessionRow.topic_id == topic.id).order_by(ChatSessionRow.created_at.desc())).all())


def session_turns(rt: Runtime, session_id: str) -> list[ChatTurnRow]:
    """The saved turns of a session, oldest first."""
    with rt.metadata.session() as s:
        return list(s.exec(select(ChatTurnRow).where(ChatTurnRow.session_id == session_id).order_by(ChatTurnRow.id)).all())


def _hit_summary(h: ChunkHit) -> dict:
    return {"chunk_id": h.chunk_id, "file": h.file_name, "score": round(h.score, 4), "text": h.text[:300]}
