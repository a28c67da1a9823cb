"""The contract between a search way and the answer stage.

Every way of searching (a RAG Topic's SEARCH; a GraphRAG Topic's PATH, LOCAL, GLOBAL
and HYBRID) is a :class:`Retriever` that returns one :class:`Context`: evidence items
with a score and their provenance. The answer stage (:mod:`ragtopics.answer.turn`)
gives each item a citation code, builds the prompt, streams the answer, checks which
evidence the answer used and turns provenance into :class:`Source` badges and links.
Nothing after retrieval knows which way found the evidence.

The shape follows fast-graphrag's ``TContext`` (entities, relationships and chunks with
scores feeding one reference formatter), reduced to one list of typed items.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ragtopics.tracing.trace import Trace

if TYPE_CHECKING:
    from ragtopics.storage.chunk_index import ChunkHit

#: What an evidence item is.
EvidenceKind = Literal["chunk", "entity", "relationship", "community_report", "path"]

#: Where a source came from: an uploaded file (downloadable) or a graph-ingestion record (no file).
SourceKind = Literal["upload", "graph_ingestion"]


@dataclass(frozen=True, slots=True)
class Provenance:
    """The document behind an evidence item.

    Attributes:
        document_id: the document's id ("" for a record that was never a file).
        file_name: the name shown on the source badge.
        chunk_ids: the chunks of that document the item rests on, best first.
        kind: ``"upload"`` (an uploaded file with a download link) or ``"graph_ingestion"``
            (shown as ``name (graph ingestion)``, no download).
        topic: the Topic the document belongs to ("" for the Topic asked).
        version: the content hash of the file version the chunks were read from ("" when unknown).
        pages: 1-based pages (slides, sheets) of that document the chunks come from, ascending
            (empty when the document has no pages or they are unknown).
    """

    document_id: str
    file_name: str
    chunk_ids: tuple[str, ...] = ()
    kind: SourceKind = "upload"
    topic: str = ""
    version: str = ""
    pages: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Evidence:
    """One item the answer may draw on.

    Attributes:
        kind: chunk, entity, relationship, community_report or path.
        id: a stable id with a kind prefix (``chunk-…``, ``ent-…``, ``rel-…``, ``comm-…``).
        text: what the prompt shows for it.
        score: cosine similarity to the question in [-1, 1] for items found by vector search;
            a way whose items carry no similarity says so in its docstring.
        provenance: the documents it rests on; at least one for anything that can be cited.
        context: a context line shown before the text ("" when none).
        pictures: ids of stored pictures linked to it.
    """

    kind: EvidenceKind
    id: str
    text: str
    score: float
    provenance: tuple[Provenance, ...]
    context: str = ""
    pictures: tuple[str, ...] = ()

    @property
    def file_names(self) -> list[str]:
        """The distinct file names of its provenance, in order."""
        return list(dict.fromkeys(p.file_name for p in self.provenance))

    @property
    def prompt_text(self) -> str:
        """The text with its context line in front, as the prompt shows it."""
        return f"{self.context}\n{self.text}" if self.context else self.text


@dataclass(frozen=True, slots=True)
class Context:
    """What a retriever found for one question.

    Attributes:
        items: evidence, best first; empty when nothing passed the way's filters.
        route: the way that produced it (``SEARCH``, ``PATH``, ...).
        note: why the context is empty or how the way fell back ("" when nothing to say).
        rerank: how the items were reranked, in words ("reranked by the Language Model"), "" when
            no rerank was asked for.
        answer_role: the model role that writes the answer from it (HYBRID's synthesis: ``follow_up``).
    """

    items: tuple[Evidence, ...]
    route: str
    note: str = ""
    rerank: str = ""
    answer_role: str = "language_model"


@dataclass(frozen=True, slots=True)
class RetrievalQuery:
    """The question as a retriever sees it.

    Attributes:
        question: the user's message.
        previous_question: the chat's previous user message ("" in a new chat); a way may
            search it together with ``question`` when the question alone finds nothing.
        entities: named entities the router saw in the question (may be empty).
    """

    question: str
    previous_question: str = ""
    entities: tuple[str, ...] = ()


class Retriever(Protocol):
    """A way of searching a Topic.

    Attributes:
        route: the route name the way answers to.
    """

    route: str

    def retrieve(self, query: RetrievalQuery, trace: Trace) -> Context:
        """Find evidence for ``query``, recording its steps in ``trace``.

        Raises:
            ModelUnavailableError: when a model the way needs cannot be reached.
            StoreUnavailableError: when the index cannot be searched.
        """
        ...


class SearchProgress:
    """What a long search says while it runs, and how the turn tells it to stop.

    A graph way that makes model calls (GLOBAL's map step, HYBRID's follow-ups) runs in a
    thread of its own; it reports steps with :meth:`say` ("reading 8 summaries") and checks
    :attr:`stopped` before each call. The turn shows the steps before the first token and
    calls :meth:`stop` when the user presses Stop, so no further call is started (a call
    already sent may still finish on the model server).
    """

    def __init__(self) -> None:
        self.messages: queue.Queue[str] = queue.Queue()
        self._stop = threading.Event()

    def say(self, message: str) -> None:
        """Report a step, in words, to whoever shows the turn."""
        self.messages.put(message)

    def stop(self) -> None:
        """Ask the search to start no further model call."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()


@dataclass(frozen=True, slots=True)
class Source:
    """A source shown under an answer: one chunk (or record) of one document.

    The one public shape of a source; :meth:`to_public` is what the CLI's JSON, MCP and
    connected Topics show, :meth:`to_row` what a saved turn keeps.

    Attributes:
        file: the document's file name.
        chunk_id: the chunk the answer drew on.
        score: cosine similarity between the question and the chunk, in [-1, 1].
        code: its citation code in the prompt (``S1``...); "" for a connected Topic's source.
        document_id: the document's id ("" for a graph-ingestion record).
        topic: the Topic it comes from.
        link: a signed download link to the file, valid for about 10 minutes ("" when none).
        kind: ``"upload"`` or ``"graph_ingestion"``.
        reason: why it is shown: ``cited``, ``quoted``, ``confirmed by model check``,
            ``kept on evidence`` (the check could not decide), ``same file`` (another chunk
            of a file the answer used) or ``via <topic>`` for a connected Topic's source.
        version: content hash of the file version the chunk came from ("" when unknown).
        status: ``current``, ``changed`` (the file was replaced since) or ``removed``
            (deleted since); set when a saved turn is shown again.
        pages: 1-based pages (slides, sheets) of the file the chunk comes from, ascending
            (empty when the file has no pages or they are unknown); a PDF's link opens the first.
    """

    file: str
    chunk_id: str
    score: float
    code: str
    document_id: str
    topic: str = ""
    link: str = ""
    kind: SourceKind = "upload"
    reason: str = ""
    version: str = ""
    status: str = "current"
    pages: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """The name on the badge: the file name, with ``(graph ingestion)`` for a record."""
        return f"{self.file} (graph ingestion)" if self.kind == "graph_ingestion" else self.file

    @property
    def location(self) -> str:
        """Where in the file: ``p. 3``, ``pp. 3–4``, ``slide 2`` (see :func:`pages_label`); "" when unknown."""
        return pages_label(self.file, self.pages)

    @property
    def cited_as(self) -> str:
        """The label with its location: ``report.pdf, p. 3`` (just the label when the pages are unknown)."""
        return f"{self.label}, {self.location}" if self.location else self.label

    def to_public(self) -> dict[str, Any]:
        """The JSON shape given to the CLI, MCP and connected Topics (``pages`` a list, ``location`` as shown)."""
        return {
            "file": self.file,
            "chunk_id": self.chunk_id,
            "score": self.score,
            "topic": self.topic,
            "kind": self.kind,
            "reason": self.reason,
            "link": self.link,
            "status": self.status,
            "pages": list(self.pages),
            "location": self.location,
        }

    def to_row(self) -> dict[str, Any]:
        """The JSON shape kept with a saved turn (no link: links expire)."""
        return {
            "file": self.file,
            "chunk_id": self.chunk_id,
            "score": self.score,
            "code": self.code,
            "document_id": self.document_id,
            "topic": self.topic,
            "kind": self.kind,
            "reason": self.reason,
            "version": self.version,
            "pages": list(self.pages),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Source:
        """Rebuild a source from :meth:`to_row` output (older rows lack the newer keys, e.g. ``pages``)."""
        known = {
            k: row[k]
            for k in ("file", "chunk_id", "score", "code", "document_id", "topic", "kind", "reason", "version")
            if k in row
        }
        pages = tuple(int(p) for p in row.get("pages") or () if isinstance(p, int) and p > 0)
        return cls(**{"code": "", "document_id": "", **known}, pages=pages)

    def with_link(self, link: str) -> Source:
        """A copy whose link is ``link`` opened at the source's page (see :func:`page_link`)."""
        return replace(self, link=page_link(link, self.file, self.pages))

    def with_(self, **changes: Any) -> Source:
        """A copy with some fields changed."""
        return replace(self, **changes)


#: What a page is called, by file type: a PowerPoint slide, an Excel sheet, else a page.
_PAGE_NAMES = {"pptx": ("slide", "slides"), "xlsx": ("sheet", "sheets")}


def pages_label(file_name: str, pages: Sequence[int]) -> str:
    """How a source's pages are shown: ``p. 3``, ``pp. 3–4``, ``pp. 2, 5–7``; ``slide 2`` (PPTX), ``sheets 1–2`` (XLSX).

    Args:
        file_name: the file's name; its extension picks the word for a page.
        pages: 1-based page numbers (any order, repeats allowed).

    Returns:
        The label, runs of consecutive pages joined by an en dash; "" when ``pages`` is empty.
    """
    numbers = sorted(set(pages))
    if not numbers:
        return ""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    text = ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)
    one, many = _PAGE_NAMES.get(file_name.rpartition(".")[2].lower(), ("p.", "pp."))
    return f"{one if len(numbers) == 1 else many} {text}"


def page_link(link: str, file_name: str, pages: Sequence[int]) -> str:
    """A download link that opens a PDF at the first of ``pages``: ``link#page=3``.

    ``#page=N`` is the PDF open parameter browsers' PDF viewers follow (RFC 8118); the
    fragment is never sent to the server, so the signed link itself is unchanged. Other
    files, an empty link and unknown pages give ``link`` as it is.
    """
    if not link or not pages or not file_name.lower().endswith(".pdf") or "#" in link:
        return link
    return f"{link}#page={min(pages)}"


def assign_codes(items: Sequence[Evidence]) -> dict[str, Evidence]:
    """Citation codes for the evidence in the prompt: ``S1``, ``S2``, ... in order.

    Returns:
        code → evidence, in prompt order.
    """
    return {f"S{i}": item for i, item in enumerate(items, start=1)}


@dataclass(slots=True)
class UsedEvidence:
    """An evidence item the answer used, with its code and why it counts as used."""

    code: str
    evidence: Evidence
    reason: str
    extra: dict[str, Any] = field(default_factory=dict)


def chunk_evidence(hit: ChunkHit, *, topic: str = "") -> Evidence:
    """A retrieved chunk as evidence: its text, cosine score, pictures and document (with the chunk's pages)."""
    return Evidence(
        kind="chunk",
        id=hit.chunk_id,
        text=hit.text,
        score=hit.score,
        provenance=(
            Provenance(hit.document_id, hit.file_name, (hit.chunk_id,), topic=topic, version=hit.version, pages=hit.pages),
        ),
        context=hit.context,
        pictures=tuple(hit.pictures.split()),
    )
