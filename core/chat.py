"""Phase B orchestrator: question → retrieve → filter → prompt → streamed answer → sources → save.

:func:`ask` is a generator of :class:`ChatUpdate`; the console and the CLI iterate
it. Closing it early (Stop) ends the model stream and saves nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from sqlmodel import select

from core import prompts
from core.citations import code_for, format_sources, render_citations
from core.errors import NotFoundError, RagTopicsError
from core.retrieval import filter_hits, retrieve_dense
from core.runtime import Runtime
from core.topics import Topic
from core.tracing import Trace
from storage.chunk_index import ChunkHit
from storage.metadata import ChatSessionRow, ChatTurnRow

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 8000


@dataclass(frozen=True, slots=True)
class Source:
    """A source shown under an answer.

    Attributes:
        file: the document's file name.
        chunk_id: the chunk the answer drew on.
        score: the retrieval score (cosine similarity under DENSE).
        code: the citation code it had in the prompt (``S1``...).
        document_id: the document's id.
    """

    file: str
    chunk_id: str
    score: float
    code: str
    document_id: str


@dataclass(slots=True)
class ChatUpdate:
    """One step of a streamed answer.

    Attributes:
        text: the answer so far, citation codes already turned into file names.
        done: True for the final update.
        sources: the sources (filled on the final update).
        route: how the question was answered (``SEARCH``).
        session_id: the chat session.
        turn_id: the saved turn's id (final update only).
        no_answer: the configured no-answer response was shown.
    """

    text: str
    done: bool = False
    sources: list[Source] = field(default_factory=list)
    route: str = "SEARCH"
    session_id: str = ""
    turn_id: int | None = None
    no_answer: bool = False


def start_session(rt: Runtime, topic: Topic, title: str = "") -> str:
    """Create a chat session and return its id (``chat-<hex>``)."""
    session_id = "chat-" + uuid.uuid4().hex[:16]
    with rt.metadata.session() as s:
        s.add(ChatSessionRow(id=session_id, topic_id=topic.id, title=title[:80]))
    return session_id


def history_messages(rt: Runtime, session_id: str, memory: int) -> list[dict]:
    """The last ``memory`` messages (user and assistant) of a session, oldest first."""
    if memory <= 0:
        return []
    with rt.metadata.session() as s:
        turns = s.exec(select(ChatTurnRow).where(ChatTurnRow.session_id == session_id)
                       .order_by(ChatTurnRow.id.desc()).limit((memory + 1) // 2)).all()  # fmt: skip
    messages: list[dict] = []
    for turn in reversed(turns):
        messages += [{"role": "user", "content": turn.question}, {"role": "assistant", "content": turn.answer}]
    return messages[-memory:]


def ask(rt: Runtime, topic: Topic, question: str, *, session_id: str | None = None) -> Iterator[ChatUpdate]:
    """Answer a question from a Topic's documents, streaming.

    Yields:
        :class:`ChatUpdate` items; the last has ``done=True`` and the saved turn's id.

    Raises:
        RagTopicsError: for an empty or over-long question.
        ModelUnavailableError: when the embedding or language model is unreachable.
    """
    question = (question or "").strip()
    if not question:
        raise RagTopicsError("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise RagTopicsError(f"the question is {len(question)} characters long; the limit is {MAX_QUESTION_CHARS}")
    cfg = topic.settings
    if session_id is None:
        session_id = start_session(rt, topic, question)
    else:
        _check_session(rt, topic, session_id)
    trace = Trace("chat", question)
    trace.add("question", question=question, session_id=session_id, topic=topic.name)
    hits = _retrieve(rt, topic, question, trace)
    if not hits:
        answer = cfg.no_answer_response
        trace.add("no_answer", reason="no chunk passed Min. Similarity Score", response=answer)
        turn_id = _save(rt, topic, session_id, question, answer, [], trace)
        yield ChatUpdate(text=answer, done=True, session_id=session_id, turn_id=turn_id, no_answer=True)
        return
    code_to_file = {code_for(i): h.file_name for i, h in enumerate(hits)}
    messages = _messages(rt, topic, question, hits, session_id, trace)
    parts: list[str] = []
    with trace.step("answer") as ev:
        for delta in rt.gateway.stream_chat("language_model", messages, prompt_name="answer", trace=trace):
            parts.append(delta)
            yield ChatUpdate(text=render_citations("".join(parts), code_to_file), session_id=session_id)
        raw = "".join(parts)
        ev.data["raw_answer"] = raw
    answer = render_citations(raw, code_to_file)
    sources = [Source(h.file_name, h.chunk_id, round(h.score, 4), code_for(i), h.document_id) for i, h in enumerate(hits)]
    trace.add("finish", answer=answer, sources=[asdict(s) for s in sources])
    turn_id = _save(rt, topic, session_id, question, answer, sources, trace)
    yield ChatUpdate(text=answer, done=True, sources=sources, session_id=session_id, turn_id=turn_id)


def _retrieve(rt: Runtime, topic: Topic, question: str, trace: Trace) -> list[ChunkHit]:
    cfg = topic.settings
    with trace.step("retrieve", strategy="DENSE", top_k=cfg.top_k_results, min_score=cfg.min_similarity_score) as ev:
        vector = rt.gateway.embed([question], trace=trace, purpose="question")[0]
        found = retrieve_dense(rt.chunk_index(topic.id), vector, k=cfg.top_k_results)
        ev.data["found"] = [_hit_summary(h) for h in found]
    with trace.step("filter") as ev:
        kept = filter_hits(found, min_score=cfg.min_similarity_score, top_k=cfg.top_k_results)
        ev.data["kept"] = [h.chunk_id for h in kept]
    return kept


def _messages(rt: Runtime, topic: Topic, question: str, hits: list[ChunkHit], session_id: str, trace: Trace) -> list[dict]:
    cfg = topic.settings
    with trace.step("prompt") as ev:
        system = prompts.SYSTEM.render(topic_name=topic.name, custom_system_prompt=cfg.custom_system_prompt)
        user = prompts.ANSWER.render(sources=format_sources(hits), citing_rules=prompts.CITING_RULES, question=question)
        history = history_messages(rt, session_id, cfg.memory)
        messages = [{"role": "system", "content": system.strip()}, *history, {"role": "user", "content": user}]
        ev.data.update(messages=messages, history_messages=len(history))
    return messages


def _save(rt: Runtime, topic: Topic, session_id: str, question: str, answer: str, sources: list[Source], trace: Trace) -> int:
    with rt.metadata.session() as s:
        row = ChatTurnRow(session_id=session_id, topic_id=topic.id, question=question, answer=answer,
                          sources_json=json.dumps([asdict(x) for x in sources]), route="SEARCH",
                          timings_json=json.dumps(trace.timings_ms()), trace_json=json.dumps(trace.to_list()))  # fmt: skip
        s.add(row)
        s.flush()
        return row.id


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
