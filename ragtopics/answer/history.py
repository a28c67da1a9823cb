"""Chat history: sessions, the messages the model sees again, saving a turn and showing it later.

A saved answer keeps the sources it used, each with the version (content hash) of the
file it came from. Shown again later, a source whose file was replaced since says so
and links to the current version; one whose file was deleted says it was removed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ragtopics.access.context import acting_username
from ragtopics.answer.context import Source
from ragtopics.errors import NotFoundError
from ragtopics.runtime import Runtime
from ragtopics.storage import chats
from ragtopics.storage.metadata import ChatSessionRow, ChatTurnRow
from ragtopics.storage.traces import load_trace
from ragtopics.topics.topics import Topic

#: Source status when shown again: the file is unchanged, was replaced, or was deleted since.
CURRENT, CHANGED, REMOVED = "current", "changed", "removed"


@dataclass(slots=True)
class SavedTurn:
    """A saved question and answer as the console shows it again.

    Attributes:
        id: the turn's id.
        question, answer: as saved.
        sources: its sources with fresh links and a status (current, changed, removed).
        route, route_confidence, route_reason: how the question was handled.
        timings_ms: per-step durations in milliseconds.
        route_method: how the router decided (``embedding``, ``llm``, ``forced`` or "").
        route_planned: the router's way when the search fell back to ``route`` ("" otherwise).
    """

    id: int
    question: str
    answer: str
    sources: list[Source] = field(default_factory=list)
    route: str = "SEARCH"
    route_confidence: float | None = None
    route_reason: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    route_method: str = ""
    route_planned: str = ""


def new_session_id() -> str:
    """A fresh chat session id (``chat-<hex>``)."""
    return "chat-" + uuid.uuid4().hex[:16]


def check_session(rt: Runtime, topic: Topic, session_id: str) -> None:
    """Raise unless ``session_id`` is a saved chat of ``topic``.

    Raises:
        NotFoundError: naming the session and the Topic.
    """
    row = chats.get_session(rt.metadata, session_id)
    if row is None or row.topic_id != topic.id or not may_open(row):
        raise NotFoundError(f"no chat session {session_id} in Topic {topic.name!r}")


def own_session(rt: Runtime, session_id: str) -> ChatSessionRow | None:
    """The saved chat ``session_id`` if the current console user may see it, else None."""
    row = chats.get_session(rt.metadata, session_id)
    return row if row is not None and may_open(row) else None


def may_open(session: ChatSessionRow) -> bool:
    """Whether the user of the current console event may see ``session``: its owner (or anyone, outside logins)."""
    user = acting_username.get()
    return user is None or session.owner == user


#: Stands in the history for an earlier answer that cited a file deleted since.
WITHHELD_ANSWER = "(This earlier answer cited a file that has since been deleted; its content is not repeated.)"


def history_messages(rt: Runtime, session_id: str | None, memory: int) -> list[dict]:
    """The last ``memory`` messages (user and assistant, OpenAI message dicts) of a session, oldest first.

    An earlier answer that cited an uploaded file deleted since is replaced by
    :data:`WITHHELD_ANSWER`, so nothing of a deleted document reaches a follow-up.
    """
    if memory <= 0 or not session_id:
        return []
    turns = chats.session_turns(rt.metadata, session_id, last=(memory + 1) // 2)
    cited = {r.id: [Source.from_row(s) for s in r.sources or []] for r in turns}
    wanted = list({s.document_id for ss in cited.values() for s in ss if s.document_id and s.kind == "upload"})
    present = chats.documents_by_id(rt.metadata, wanted)
    messages: list[dict] = []
    for turn in turns:
        deleted = any(s.kind == "upload" and s.document_id and s.document_id not in present for s in cited[turn.id])
        answer = WITHHELD_ANSWER if deleted else turn.answer
        messages += [{"role": "user", "content": turn.question}, {"role": "assistant", "content": answer}]
    return messages[-memory:]


def list_sessions(rt: Runtime, topic: Topic) -> list[ChatSessionRow]:
    """The chat sessions of a Topic, newest first: the current console user's own, or all outside logins."""
    return chats.list_sessions(rt.metadata, topic.id, owner=acting_username.get())


def session_turns(rt: Runtime, session_id: str) -> list[ChatTurnRow]:
    """The saved turns of a session (rows), oldest first."""
    return chats.session_turns(rt.metadata, session_id)


def turn_trace(rt: Runtime, turn_id: int) -> list[dict]:
    """The stored trace of a saved turn (events with ``id``/``parent``), ``[]`` when none is kept."""
    return load_trace(rt.metadata, f"turn:{turn_id}")


def saved_turns(rt: Runtime, session_id: str) -> list[SavedTurn]:
    """The turns of a session with their sources re-linked and marked current, changed or removed."""
    rows = chats.session_turns(rt.metadata, session_id)
    stored = {r.id: [Source.from_row(s) for s in r.sources or []] for r in rows}
    docs = chats.documents_by_id(rt.metadata, list({s.document_id for ss in stored.values() for s in ss if s.document_id}))
    out = []
    for r in rows:
        if r.id is None:  # read from the database, so never: a row gets its id when it is stored
            raise ValueError(f"a stored turn of session {session_id} has no id")
        route_step = {} if r.route_reason else next((e for e in turn_trace(rt, r.id) if e.get("step") == "route"), {})
        out.append(
            SavedTurn(
                r.id,
                r.question,
                r.answer,
                [_relinked(rt, s, docs) for s in stored[r.id]],
                r.route,
                r.route_confidence,
                r.route_reason or route_step.get("data", {}).get("reason", ""),
                dict(r.timings or {}),
                r.route_method,
                r.route_planned,
            )
        )
    return out


def _relinked(rt: Runtime, source: Source, docs: dict) -> Source:
    """A saved source with a fresh link to its file and its status now."""
    if not source.document_id or source.kind != "upload":
        return source
    doc = docs.get(source.document_id)
    if doc is None or not doc.blob_path:
        return source.with_(status=REMOVED, link="")
    status = CHANGED if source.version and doc.content_sha256 and source.version != doc.content_sha256 else CURRENT
    return source.with_(status=status).with_link(rt.signer.sign(doc.blob_path))  # a PDF opens at the source's page


def save_turn(
    rt: Runtime,
    topic: Topic,
    *,
    session_id: str,
    question: str,
    answer: str,
    sources: list[Source],
    route: str,
    route_confidence: float | None,
    timings_ms: dict[str, float],
    route_reason: str = "",
    route_method: str = "",
    route_planned: str = "",
) -> int:
    """Save a turn (and its session with the first turn) with its way, the router's confidence, reason and
    method, and the router's way when the search fell back; returns the turn's id."""
    return chats.add_turn(
        rt.metadata,
        session_id=session_id,
        topic_id=topic.id,
        title=question,
        question=question,
        answer=answer,
        sources=[s.to_row() for s in sources],
        route=route,
        route_confidence=route_confidence,
        timings_ms=timings_ms,
        route_reason=route_reason,
        route_method=route_method,
        route_planned=route_planned,
        owner=acting_username.get() or "",
    )
