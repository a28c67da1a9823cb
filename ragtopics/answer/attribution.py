"""Decide which retrieved documents an answer really used.

The spec: "A check keeps only the documents the answer really used (cited, quoted,
or confirmed by a model check)", and the model check runs only "when the answer
does not clearly cite its sources". Decisions are per file: a file is used when
any of its chunks is, and then all its chunks are kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ragtopics.answer.citations import cited_codes, render_citations

log = logging.getLogger(__name__)

#: Consecutive words an answer must share verbatim with a chunk to count as quoting it.
#: Eight words is long enough that stock phrases ("one of the most important parts of")
#: rarely match by chance, and short enough to catch a quoted sentence fragment.
QUOTE_MIN_WORDS = 8

REASON_CITED = "cited"
REASON_QUOTED = "quoted"
REASON_CONFIRMED = "confirmed by model check"
REASON_NOT_USED = "not used"
REASON_CHECK_FAILED = "model check failed"
REASON_NO_CHECK = "no model check"
REASON_EVIDENCE = "kept on evidence"
REASON_SAME_FILE = "same file"

#: A token that carries a figure or code: it holds a digit ("140", "E-1200", "v3.2").
_FIGURE = re.compile(r"\b[\w.-]*\d[\w.-]*\b")

_WORD = re.compile(r"\w+")

#: ``confirm(answer, file, text) -> bool``: asks a model whether the answer used that file's text.
Confirm = Callable[[str, str, str], bool]


class SourceLike(Protocol):
    """Anything with a citation code, a file name and chunk text."""

    @property
    def code(self) -> str: ...

    @property
    def file(self) -> str: ...

    @property
    def text(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Source:
    """A retrieved chunk as the prompt showed it.

    Attributes:
        code: its citation code in the prompt, ``S1``, ``S2``, ...
        file: the file name of its document.
        text: the chunk text.
    """

    code: str
    file: str
    text: str


S = TypeVar("S", bound=SourceLike)


@dataclass(frozen=True, slots=True)
class SourceCheck(Generic[S]):
    """The outcome of :func:`check_sources`.

    Attributes:
        used: candidates of the used files, in input order (all chunks of a used file).
        dropped: the other candidates, in input order.
        reasons: file name → "cited", "quoted", "confirmed by model check", "kept on evidence: <why>",
            "not used" or "model check failed: <why>".
        chunk_reasons: code → why that chunk is shown: the file's reason for the chunk(s) that
            carry it (the cited code, the quoted chunk), "same file" for the other chunks of a used file.
        fallback: "" normally; when a model check could not decide, what the decision fell back to.
    """

    used: list[S] = field(default_factory=list)
    dropped: list[S] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    chunk_reasons: dict[str, str] = field(default_factory=dict)
    fallback: str = ""


def check_sources(answer: str, candidates: Sequence[S], confirm: Confirm | None = None) -> SourceCheck[S]:
    """Keep the candidates whose files the answer cited, quoted or (failing both) a model confirms.

    Args:
        answer: the raw answer, citation codes (``[S1]``, ``[S1, S3]``, ``[S1][S2]``) still in it.
        candidates: the chunks the prompt showed, each with ``code``, ``file`` and ``text``.
        confirm: ``confirm(answer, file, text) -> bool``, asked once per remaining file
            (its chunks' text joined by blank lines), and only when the answer cites no
            code of a candidate. None means no model check (the bundled model cannot judge
            sources): those files are decided on evidence, as after a failed check.

    Returns:
        A :class:`SourceCheck`; ``reasons`` has one entry per distinct file.
        An exception from ``confirm`` does not propagate: the unclear files are then
        decided on evidence (see :func:`_decide_on_evidence`) and ``fallback`` says so.
    """
    files = list(dict.fromkeys(c.file for c in candidates))
    # Only codes that name a candidate count as a clear citation; an invented code does not.
    codes = set(cited_codes(answer)) & {c.code for c in candidates}
    answer_runs = _answer_runs(answer, QUOTE_MIN_WORDS)
    reasons: dict[str, str] = {}
    chunk_reasons: dict[str, str] = {}
    for file in files:
        chunks = [c for c in candidates if c.file == file]
        if any(c.code in codes for c in chunks):
            reasons[file] = REASON_CITED
            chunk_reasons |= {c.code: REASON_CITED for c in chunks if c.code in codes}
        else:
            quoted = [c for c in chunks if not answer_runs.isdisjoint(_word_runs(c.text, QUOTE_MIN_WORDS))]
            if quoted:
                reasons[file] = REASON_QUOTED
                chunk_reasons |= {c.code: REASON_QUOTED for c in quoted}
    remaining = [f for f in files if f not in reasons]
    fallback = ""
    if codes:
        reasons.update(dict.fromkeys(remaining, REASON_NOT_USED))
    else:
        checked = _ask_model(answer, candidates, remaining, confirm)
        if any(why.startswith(REASON_CHECK_FAILED) or why == REASON_NO_CHECK for why in checked.values()):
            checked, fallback = _decide_on_evidence(answer, candidates, remaining, checked, has_evidence=bool(reasons))
            chunk_reasons |= dict.fromkeys(_figure_chunks(answer, candidates, checked), REASON_EVIDENCE)
        reasons.update(checked)
    kept = {f for f, why in reasons.items() if _is_kept(why)}
    for c in candidates:
        if c.file in kept and c.code not in chunk_reasons:
            chunk_reasons[c.code] = reasons[c.file] if reasons[c.file] == REASON_CONFIRMED else REASON_SAME_FILE
    for file in kept:  # a file kept on the file's evidence alone shows its best chunk as the one used
        codes_of_file = [c.code for c in candidates if c.file == file]
        if all(chunk_reasons[code] == REASON_SAME_FILE for code in codes_of_file):
            chunk_reasons[codes_of_file[0]] = reasons[file].split(":")[0]
    log.debug("source check kept %s of %s files", len(kept), len(files))
    return SourceCheck(
        used=[c for c in candidates if c.file in kept],
        dropped=[c for c in candidates if c.file not in kept],
        reasons=reasons,
        chunk_reasons={c.code: chunk_reasons[c.code] for c in candidates if c.code in chunk_reasons},
        fallback=fallback,
    )


def _is_kept(why: str) -> bool:
    return why in (REASON_CITED, REASON_QUOTED, REASON_CONFIRMED) or why.startswith(REASON_EVIDENCE)


def _decide_on_evidence(
    answer: str, candidates: Sequence[S], files: list[str], checked: dict[str, str], *, has_evidence: bool
) -> tuple[dict[str, str], str]:
    """Decide the unclear files when a model check failed or none could be made, from what the answer shows.

    A failed check cannot tell a used file from an unused one, and the checks that did
    answer are not comparable with it, so all unclear files are decided the same way:
    a file whose chunks share a figure or code with the answer (a token holding a digit,
    such as "140" or "E-1200") is kept; failing that, when nothing was cited or quoted,
    the best retrieved file is kept. So a check that fails never drops the document the
    answer took its figures from while keeping one it did not.

    Returns:
        file → reason, and a sentence for the trace saying what the decision fell back to.
    """
    figures = {f.lower() for f in _FIGURE.findall(render_citations(answer, {}))}
    decided: dict[str, str] = {}
    for file in files:
        text = " ".join(c.text for c in candidates if c.file == file).lower()
        shared = sorted(f for f in figures if re.search(rf"(?<![\w.-]){re.escape(f)}(?![\w-])", text))
        if shared:
            decided[file] = f"{REASON_EVIDENCE}: shares {', '.join(shared[:5])} with the answer"
        else:
            decided[file] = f"{REASON_NOT_USED} ({checked[file]})" if checked[file] != REASON_NOT_USED else REASON_NOT_USED
    if not has_evidence and not any(why.startswith(REASON_EVIDENCE) for why in decided.values()) and files:
        best = next(c.file for c in candidates if c.file in files)
        decided[best] = f"{REASON_EVIDENCE}: best retrieved"
    failed = [f for f in files if checked[f].startswith(REASON_CHECK_FAILED)]
    unchecked = [f for f in files if checked[f] == REASON_NO_CHECK]
    why = [f"model check failed for {', '.join(failed)}"] if failed else []
    why += [f"no model check for {', '.join(unchecked)}"] if unchecked else []
    return decided, f"{'; '.join(why)}; decided on the answer's figures and the retrieval order"


def _figure_chunks(answer: str, candidates: Sequence[S], reasons: dict[str, str]) -> list[str]:
    """Codes of the chunks of files kept on evidence that share a figure with the answer."""
    figures = {f.lower() for f in _FIGURE.findall(render_citations(answer, {}))}
    out = []
    for c in candidates:
        if reasons.get(c.file, "").startswith(REASON_EVIDENCE) and figures & {f.lower() for f in _FIGURE.findall(c.text)}:
            out.append(c.code)
    return out


def is_quoted(answer: str, text: str, *, min_words: int = QUOTE_MIN_WORDS) -> bool:
    """Whether ``answer`` repeats at least ``min_words`` consecutive words of ``text``.

    Words are ``\\w+`` tokens compared case-insensitively, so punctuation and spacing
    do not matter; citation codes are removed from the answer first, so a code in the
    middle of a quoted sentence does not break the run.

    Args:
        answer: the raw answer.
        text: a chunk's text.
        min_words: the shortest run that counts as a quote (>= 1).

    Returns:
        True when some run of ``min_words`` words appears in both.
    """
    return not _answer_runs(answer, min_words).isdisjoint(_word_runs(text, min_words))


def _answer_runs(answer: str, length: int) -> set[tuple[str, ...]]:
    # Unknown codes are removed by render_citations, so an empty mapping strips them all.
    return _word_runs(render_citations(answer, {}), length)


def _word_runs(text: str, length: int) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + length]) for i in range(len(words) - length + 1)}


def _ask_model(answer: str, candidates: Sequence[S], files: list[str], confirm: Confirm | None) -> dict[str, str]:
    """Reason per file from the model check; failures drop the file and say why."""
    if confirm is None:
        return dict.fromkeys(files, REASON_NO_CHECK)
    reasons: dict[str, str] = {}
    for file in files:
        text = "\n\n".join(c.text for c in candidates if c.file == file)
        try:
            confirmed = bool(confirm(answer, file, text))
        except Exception as exc:
            log.warning("model check of %s failed: %s", file, exc)
            reasons[file] = f"{REASON_CHECK_FAILED}: {type(exc).__name__}: {exc}"
            continue
        reasons[file] = REASON_CONFIRMED if confirmed else REASON_NOT_USED
    return reasons
