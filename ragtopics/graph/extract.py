"""Graph extraction: the entities and relationships of one chunk, by NLP or by the Graph Extraction model.

:func:`extract_chunk` is the single entry point of an upload's "find entities and
relationships" step. It skips a chunk that only looks like a table of contents or an
index (:func:`looks_like_toc_or_index`), then runs one of two methods that return the
same typed :class:`~ragtopics.graph.model.ChunkExtraction`:

* ``NLP`` (:mod:`ragtopics.graph.nlp`): a packaged spaCy model finds named entities,
  codes and noun phrases; relationships are sentence co-occurrences. No model call.
* ``LLM``: one typed call to the Graph Extraction role per chunk. A reply whose
  relationships name entities it did not list is asked again (at most
  :data:`MAX_REASKS` times, with the validation error in the prompt); after that the
  chunk is stored without entities and the outcome says why.

:func:`choose_method` resolves the Topic's ``graph_extraction_method`` (AUTO: NLP while
the role is served by the bundled model, as the router does for its role).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import itertools
import logging
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import ValidationError, model_validator

from ragtopics.errors import ConfigurationError, StructuredOutputError
from ragtopics.graph.model import ChunkExtraction, ExtractedEntity, normalize_name
from ragtopics.graph.nlp import RULES_VERSION, SPACY_MODEL, extract_nlp
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import GRAPH_EXTRACTION, PromptTemplate
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

METHODS = ("AUTO", "NLP", "LLM")
#: The model role and prompt name of the LLM method.
ROLE = "graph_extraction"
#: Times a reply that fails validation is asked again (so at most 1 + 2 requests per chunk).
MAX_REASKS = 2
#: Room for about 30 entities and 30 relationships with short descriptions.
EXTRACTION_MAX_TOKENS = 2048
#: Longest validation error kept for the re-ask and the outcome.
MAX_ERROR_CHARS = 600
#: Why a chunk was skipped on purpose (:attr:`ExtractionOutcome.skipped`).
SKIP_EMPTY = "empty"
SKIP_TOC = "table_of_contents_or_index"


@dataclass(frozen=True, slots=True)
class ExtractionOutcome:
    """What graph extraction made of one chunk.

    Attributes:
        extraction: the entities and relationships (empty when skipped or failed).
        method: ``"NLP"`` or ``"LLM"``.
        failed: the model's replies stayed unusable after the re-asks; the chunk is
            stored without entities and the failure recorded.
        error: the last validation error when ``failed``.
        skipped: ``""``, :data:`SKIP_EMPTY` or :data:`SKIP_TOC`: nothing was extracted on purpose.
        requests: model requests made (0 for NLP and skipped chunks).
    """

    extraction: ChunkExtraction
    method: str
    failed: bool = False
    error: str = ""
    skipped: str = ""
    requests: int = 0


def choose_method(settings: Any, gateway: ModelGateway) -> str:
    """``"NLP"`` or ``"LLM"`` for a Topic's ``graph_extraction_method``.

    AUTO is NLP while the Graph Extraction role is served by the bundled model
    (``gateway.settings.endpoint("graph_extraction").is_local``, the test the router
    uses for its role) and LLM once the role, or the Language Model it inherits, has
    a real endpoint.

    Args:
        settings: the Topic's settings (a GraphRAG Topic's, or anything with ``graph_extraction_method``).
        gateway: the model gateway, for the role's endpoint.

    Raises:
        ConfigurationError: for a method other than AUTO, NLP or LLM.
    """
    method = settings.graph_extraction_method
    name = str(method.value if isinstance(method, Enum) else method or "AUTO").upper()
    if name not in METHODS:
        raise ConfigurationError(f"unknown graph extraction method {method!r}; choose one of {', '.join(METHODS)}")
    if name == "AUTO":
        return "NLP" if gateway.settings.endpoint(ROLE).is_local else "LLM"
    return name


def extraction_version(method: str, rt: Any, prompt: PromptTemplate = GRAPH_EXTRACTION) -> str:
    """What an extraction result depends on besides the chunk text, as a short key for caching results.

    NLP: the rules' :data:`~ragtopics.graph.nlp.RULES_VERSION` and the installed spaCy and
    model versions. LLM: the Graph Extraction role's model name and endpoint, the prompt
    text and the re-ask bound. A change to any of them makes cached results stale.

    Args:
        method: ``"NLP"`` or ``"LLM"``.
        rt: the runtime (only its ``gateway`` is used, for the LLM method).
        prompt: the ``graph_extraction`` prompt the LLM method is given.

    Raises:
        ConfigurationError: for an unknown method.
    """
    name = (method or "").upper()
    if name == "NLP":
        parts = ["nlp", RULES_VERSION, _installed("spacy"), SPACY_MODEL, _installed(SPACY_MODEL)]
    elif name == "LLM":
        endpoint = rt.gateway.endpoint(ROLE)
        parts = ["llm", endpoint.model, endpoint.base_url or "", prompt.text, str(MAX_REASKS)]
    else:
        raise ConfigurationError(f"unknown graph extraction method {method!r}; choose NLP or LLM")
    return f"{name.lower()}-" + hashlib.sha1("\0".join(parts).encode()).hexdigest()[:12]


@functools.cache
def _installed(package: str) -> str:
    """The installed version of a package, read once per process (a look-up scans every installed package, about
    2 ms; the process keeps running the modules it imported even when another version is installed meanwhile)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def extract_chunk(
    text: str, method: str, gateway: ModelGateway | None, *, trace: Trace | None = None, prompt: PromptTemplate = GRAPH_EXTRACTION
) -> ExtractionOutcome:
    """Find the entities and relationships of one chunk.

    Args:
        text: the chunk text.
        method: ``"NLP"`` or ``"LLM"`` (see :func:`choose_method`).
        gateway: the model gateway; only the LLM method uses it.
        trace: the upload's trace; gets the model calls and one ``graph_extraction`` event.
        prompt: the Topic's ``graph_extraction`` prompt (its override, or the default).

    Returns:
        The :class:`ExtractionOutcome`. A bad model reply never raises: it ends as
        ``failed=True`` with the error, and an empty extraction.

    Raises:
        ConfigurationError: for an unknown method, the LLM method without a gateway, or
            the NLP method without its model installed.
        ModelUnavailableError: when the Graph Extraction model cannot be reached.
    """
    name = (method or "").upper()
    if name not in ("NLP", "LLM"):
        raise ConfigurationError(f"unknown graph extraction method {method!r}; choose NLP or LLM")
    if not text.strip():
        outcome = ExtractionOutcome(ChunkExtraction(), name, skipped=SKIP_EMPTY)
    elif looks_like_toc_or_index(text):
        outcome = ExtractionOutcome(ChunkExtraction(), name, skipped=SKIP_TOC)
    elif name == "NLP":
        outcome = ExtractionOutcome(extract_nlp(text), name)
    elif gateway is None:
        raise ConfigurationError("the LLM graph extraction method needs the model gateway")
    else:
        outcome = _extract_llm(text, gateway, prompt, trace)
    if trace is not None:
        trace.add(
            "graph_extraction",
            method=name,
            entities=len(outcome.extraction.entities),
            relationships=len(outcome.extraction.relationships),
            skipped=outcome.skipped,
            failed=outcome.failed,
            error=outcome.error,
            requests=outcome.requests,
        )
    return outcome


class CheckedChunkExtraction(ChunkExtraction):
    """A :class:`ChunkExtraction` from a model reply, validated: every relationship names listed entities.

    Names are matched by :func:`~ragtopics.graph.model.normalize_name`; a relationship
    that names an entity by one of its aliases is rewritten to the entity's name.
    Entities without a name are dropped, types are upper-cased, and a relationship of
    an entity with itself is dropped.
    """

    @model_validator(mode="after")
    def _relationships_name_listed_entities(self) -> CheckedChunkExtraction:
        names: dict[str, str] = {}
        entities: list[ExtractedEntity] = []
        for entity in self.entities:
            key = normalize_name(entity.name)
            if not key or key in names:
                continue
            names[key] = entity.name.strip()
            type_ = entity.type.strip().upper() or "CONCEPT"
            entities.append(entity.model_copy(update={"name": entity.name.strip(), "type": type_}))
        for entity in entities:
            for alias in entity.aliases:
                names.setdefault(normalize_name(alias), entity.name)
        unknown = sorted({end for r in self.relationships for end in (r.source, r.target) if normalize_name(end) not in names})
        if unknown:
            raise ValueError(
                f"relationships name entities that are not in the entities list: {', '.join(map(repr, unknown))}; "
                f"listed: {', '.join(repr(e.name) for e in entities) or 'none'}"
            )
        relationships = [
            r.model_copy(update={"source": names[normalize_name(r.source)], "target": names[normalize_name(r.target)]})
            for r in self.relationships
        ]
        self.entities = entities
        self.relationships = [r for r in relationships if normalize_name(r.source) != normalize_name(r.target)]
        return self


def _extract_llm(text: str, gateway: ModelGateway, prompt: PromptTemplate, trace: Trace | None) -> ExtractionOutcome:
    """One Graph Extraction call, asked again with the validation error up to :data:`MAX_REASKS` times.

    The gateway's structured call does not retry a reply that does not validate (it
    retries transport failures only), so the re-ask is here. The error goes into the
    one user message rather than a second one: some chat templates refuse two user
    turns in a row.
    """
    request = prompt.render(text=text)
    error = ""
    for attempt in range(1, MAX_REASKS + 2):
        content = (
            request
            if not error
            else (
                f"{request}\n\nYour previous reply could not be used: {error}\n"
                "Reply again with the complete JSON. Every relationship's source and target must be the exact name "
                "of an entity in your entities list."
            )
        )
        try:
            reply = gateway.structured(
                ROLE,
                [{"role": "user", "content": content}],
                CheckedChunkExtraction,
                prompt_name=prompt.name,
                trace=trace,
                max_tokens=EXTRACTION_MAX_TOKENS,
            )
        except StructuredOutputError as exc:
            error = _reason(exc)
            log.info("graph extraction reply %s of %s unusable: %s", attempt, MAX_REASKS + 1, error)
            continue
        extraction = ChunkExtraction(entities=reply.entities, relationships=reply.relationships)
        return ExtractionOutcome(extraction, "LLM", requests=attempt)
    log.warning("graph extraction failed after %s replies: %s", MAX_REASKS + 1, error)
    return ExtractionOutcome(ChunkExtraction(), "LLM", failed=True, error=error, requests=MAX_REASKS + 1)


def _reason(exc: StructuredOutputError) -> str:
    """What was wrong with a reply, on one line: the validation errors, without pydantic's input dump and URLs.

    The gateway's message is cut at 300 characters and wraps instructor's report; the
    pydantic ``ValidationError`` it was raised from says it plainly.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ValidationError):
            return _errors_of(seen)
        for attempt in getattr(seen, "failed_attempts", None) or []:
            if isinstance(getattr(attempt, "exception", None), ValidationError):
                return _errors_of(attempt.exception)
        seen = seen.__cause__
    return " ".join(str(exc).split())[:MAX_ERROR_CHARS]


def _errors_of(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"])
        parts.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "; ".join(parts)[:MAX_ERROR_CHARS]


# --- table of contents and index -------------------------------------------------------------------------------

#: A heading that announces a table of contents, a list of figures or tables, or an index.
_CONTENTS_HEADING = re.compile(
    r"(?i)(?:table of contents|contents|list of (?:figures|tables|illustrations)|index|subject index|"
    r"inhalt|inhaltsverzeichnis|stichwortverzeichnis|sommaire|table des matières|índice)"
)
#: Roman page numbers of front matter (i to xxxix), lower case only: "did" and "mix" are words.
_ROMAN = r"x{0,3}(?:ix|iv|v?i{1,3}|v)|x{1,3}"
#: "Title ........ 12", "Title . . . 12", "Title …… 12", "Title ____ 12".
_LEADER_LINE = re.compile(
    rf"(?P<title>.*?[^\W\d_].*?)\s*(?:\.{{3,}}|(?:\. ){{2,}}\.?|…+|_{{3,}}|·{{2,}})\s*(?P<page>\d{{1,4}}|{_ROMAN})"
)
#: "2.1 Title 12", "Chapter 3 Title 12", "Figure 3.1 Title 12": no other number in the title.
_PAGE_LINE = re.compile(
    r"(?P<title>(?:(?:\d{1,2}(?:\.\d{1,3})*\.?|[A-Z]\.|(?:Chapter|Part|Section|Appendix|Annex|Figure|Fig\.|Table|"
    r"Kapitel|Teil|Anhang|Abbildung|Tabelle)\s+[\dA-Z]{1,3}(?:[.-]\d{1,3})*[.:]?)\s+)?"
    rf"[^\d|]*?[^\W\d_][^\d|]*?)\s+(?P<page>\d{{1,4}}|{_ROMAN})"
)
#: "pumps, 12, 45-47", "Pumps 12; 30": an index term and its pages.
_PAGES = r"\d{1,4}(?:\s*[-–]\s*\d{1,4})?"
_INDEX_LINE = re.compile(rf"(?P<term>[^\d,;|]*?[^\W\d_][^\d,;|]*?)[,:]?\s+(?P<pages>{_PAGES}(?:\s*[,;]\s*{_PAGES})*)")
#: Lines of a table of contents or index are short.
_MAX_LINE_CHARS = 120
_MIN_LINES = 4
_MIN_SHARE = 0.6


def looks_like_toc_or_index(text: str) -> bool:
    """Whether a chunk is a table of contents, a list of figures or an index, and so names nothing worth a graph node.

    True when most lines are entries: titles followed by dot leaders and a page number,
    titles followed by ascending page numbers, or alphabetical terms followed by page
    lists ("pumps, 12, 45"); or when a "Contents" / "Index" heading is followed by such
    lines. Prose, and tables whose numbers stand in the middle of their rows, are not.
    """
    lines = [_plain(line) for line in text.splitlines()]
    lines = [line for line in lines if line and not _is_separator(line)]
    has_heading = any(_CONTENTS_HEADING.fullmatch(line.strip(" #*:")) for line in lines[:2])
    body = [line for line in lines if not _CONTENTS_HEADING.fullmatch(line.strip(" #*:"))]
    if len(body) < 3:
        return False
    leaders = [m for m in (_match(_LEADER_LINE, line) for line in body) if m]
    pages = [m for m in (_match(_LEADER_LINE, line) or _match(_PAGE_LINE, line) for line in body) if m]
    terms = [m.group("term") for m in (_match(_INDEX_LINE, line) for line in body) if m]
    n = len(body)
    if has_heading and max(len(pages), len(terms)) >= max(2, 0.5 * n):
        return True
    if len(pages) >= _MIN_LINES and len(pages) >= _MIN_SHARE * n and (len(leaders) >= 3 or _is_ascending(pages)):
        return True
    return len(terms) >= _MIN_LINES and len(terms) >= _MIN_SHARE * n and _is_alphabetical(terms)


def _plain(line: str) -> str:
    """A line without Markdown table pipes and emphasis: ``| 1 Intro | 3 |`` → ``1 Intro 3``."""
    line = line.strip()
    if line.startswith("|") and line.endswith("|"):
        line = " ".join(cell.strip() for cell in line.strip("|").split("|") if cell.strip())
    return line.replace("**", "").strip()


def _is_separator(line: str) -> bool:
    """A Markdown table rule, a rule line, or an index's letter divider ("A", "— B —")."""
    return bool(re.fullmatch(r"[-:|=\s*_]+", line)) or bool(re.fullmatch(r"\W*[A-ZÄÖÜ]\W*", line))


def _match(pattern: re.Pattern, line: str) -> re.Match | None:
    return pattern.fullmatch(line) if len(line) <= _MAX_LINE_CHARS else None


def _page(match: re.Match) -> int:
    page = match.group("page")
    return int(page) if page.isdigit() else 0  # roman front matter comes first


def _is_ascending(matches: list[re.Match]) -> bool:
    """Whether the page numbers mostly go up, as in a table of contents (not in a table of quantities)."""
    numbers = [_page(m) for m in matches]
    steps = list(itertools.pairwise(numbers))
    return sum(a <= b for a, b in steps) >= 0.8 * len(steps) and numbers[-1] > numbers[0]


def _is_alphabetical(terms: list[str]) -> bool:
    keys = [re.sub(r"[^\w]", "", t.casefold()) for t in terms]
    steps = list(itertools.pairwise(keys))
    return sum(a <= b for a, b in steps) >= 0.7 * len(steps)
