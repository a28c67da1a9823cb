"""RECURSIVE chunking: paragraphs, then lines, then sentences, then words — with tables and code kept readable.

Text is first cut into *atoms*: Markdown blocks (fenced code blocks and pipe tables)
and, for the rest, the coarsest separator level whose pieces fit into ``size``.
Consecutive atoms are packed greedily into chunks of at most ``size`` characters;
each chunk after the first starts with the last ``overlap`` characters of its
predecessor (moved forward to a word boundary, and never into a block), and a
chunk does not end on a heading when more text follows.

A block that fits into ``size`` is one atom. A larger one is split so that each
piece still reads on its own:

* a **table** only between rows; every piece repeats the header and delimiter row;
* a **fenced code block** only at line ends, preferring top-level definitions
  (``def``, ``class``, ``function`` …), then blank lines; every piece starts with the
  section heading and the opening fence (with its language) and ends with a fence.

Source files (``source_code=True``) are cut at top-level definitions first, then
blank lines, then lines, and keep their indentation.

The separator hierarchy follows the widely used recursive character splitter
(LangChain's ``RecursiveCharacterTextSplitter``), with sentence ends added.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from ragtopics.errors import InvalidSettingError
from ragtopics.text.keywords import is_searchable

#: ``cuts(text, start, end)``: offsets inside ``(start, end)`` where a piece may end.
_Cutter = Callable[[str, int, int], list[int]]


def _pattern_cuts(pattern: re.Pattern[str]) -> _Cutter:
    return lambda text, start, end: [m.end() for m in pattern.finditer(text, start, end) if start < m.end() < end]


#: Prose separators from coarsest to finest; a match ends the piece before it.
_LEVELS: tuple[_Cutter, ...] = (
    _pattern_cuts(re.compile(r"\n[ \t]*\n\s*")),  # paragraphs
    _pattern_cuts(re.compile(r"\n")),  # lines (lists, source code)
    _pattern_cuts(re.compile(r"(?<=[.!?;:])[\"')\]]*\s+")),  # sentence ends
    _pattern_cuts(re.compile(r"\s+")),  # words
)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\1[ \t]*$\n?", re.MULTILINE | re.DOTALL)
_DELIMITER_ROW = r"[ \t]*\|?(?:[ \t]*:?-+:?[ \t]*\|)+(?:[ \t]*:?-+:?[ \t]*)?[ \t]*"
_TABLE = re.compile(rf"^[^\n]*\|[^\n]*\n{_DELIMITER_ROW}(?:\n[ \t]*\S[^\n]*\|[^\n]*)*\n?", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}[ \t]+\S[^\n]*$", re.MULTILINE)
#: A top-level definition in common languages (column 0).
_DEFINITION = re.compile(
    r"^(?:(?:export|pub(?:\([^)\n]*\))?|async|static|public|private|protected|final|abstract|default|unsafe)[ \t]+)*"
    r"(?:def|class|function|func|fn|impl|struct|interface|trait|enum|module|namespace|object|proc|sub|macro)\b",
    re.MULTILINE,
)
#: Lines that belong to the definition below them (decorators, comments).
_ATTACHED = re.compile(r"[ \t]*(?:@|#(?:[ \t]|$)|//|/\*|\*|--[ \t])")
_WHITESPACE = re.compile(r"\s")
_LEADING_BLANK_LINES = re.compile(r"(?:[ \t]*\n)+")

#: A piece of a split block keeps at least this much room for its own content;
#: with less, the heading is dropped from its repeated lines.
_MIN_BLOCK_BODY = 40


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk of a text.

    Attributes:
        text: the chunk's text: ``source[start:end]`` with outer whitespace removed;
            a piece of a split table or code block is preceded by the lines it repeats
            (header and delimiter row; heading and opening fence) and a code piece
            ends with a closing fence.
        start: offset of the first character of the span in the source, in characters.
        end: offset one past the last character of the span in the source.
        is_code: the chunk is (or holds) a fenced code block.
        records: for structured files, how many records (whole or part) the chunk holds; 0 otherwise.
        pages: 1-based pages of the source document the chunk comes from (empty when unknown).
        pictures: docling picture numbers (``Picture.index``) of the document's pictures tied
            to the chunk by the document's structure (see :mod:`ragtopics.ingest.docling_chunks`);
            empty for chunks cut from text, whose pictures are linked by matching text.
    """

    text: str
    start: int
    end: int
    is_code: bool = False
    records: int = 0
    pages: tuple[int, ...] = ()
    pictures: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class _Atom:
    start: int
    end: int
    kind: str = "text"  # text | heading | code | table
    prefix: str = ""  # lines repeated before the span (a piece of a split block)
    suffix: str = ""  # closing fence of a code piece that is not the last
    alone: bool = False  # a piece of a split block: a chunk of its own


@dataclass(frozen=True, slots=True)
class _Block:
    start: int
    end: int
    kind: str  # code | table
    heading_start: int | None  # start of a heading directly above (only blank lines between)
    heading: str  # text of the nearest heading above ("" when none)


def split_recursive(text: str, *, size: int, overlap: int, source_code: bool = False) -> list[Piece]:
    """Cut ``text`` into chunks of at most ``size`` characters with ``overlap`` repeated.

    Args:
        text: the document text (Markdown or plain text; source code with ``source_code``).
        size: Chunk Size in characters (>= 1). A chunk is longer only when one table
            row or one line of code is (it is never cut), or when the repeated lines
            of a split block leave less than 40 characters for the content.
        overlap: Chunk Overlap in characters, ``0 <= overlap < size``.
        source_code: cut at top-level definitions first and keep indentation.

    Returns:
        The chunks in document order; text without any letter or digit gives ``[]``,
        and a chunk without any is dropped.

    Raises:
        InvalidSettingError: when ``size`` or ``overlap`` is out of range.
    """
    if size < 1:
        raise InvalidSettingError(f"chunk_size must be at least 1 character, got {size}")
    if not 0 <= overlap < size:
        raise InvalidSettingError(f"chunk_overlap must be >= 0 and < chunk_size ({size}), got {overlap}")
    atoms = _split_span(text, 0, len(text), size, _CODE_LEVELS) if source_code else _atomize(text, size)
    pieces: list[Piece] = []
    i = 0
    prev_end: int | None = None
    while i < len(atoms):
        if atoms[i].alone:
            j = i + 1
            piece = _trimmed(text, atoms[i], atoms[i].start, atoms[i].end, keep_indent=True)
        else:
            start = atoms[i].start
            if prev_end is not None and overlap and atoms[i].kind in ("text", "heading"):
                start = _overlap_start(text, atoms, i, prev_end, overlap, size, by_line=source_code)
            j = i + 1
            while j < len(atoms) and not atoms[j].alone and atoms[j].end - start <= size:
                j += 1
            if j < len(atoms) and j - 1 > i and atoms[j - 1].kind == "heading":
                j -= 1  # a heading goes with the text below it
            piece = _trimmed(
                text,
                atoms[i],
                start,
                atoms[j - 1].end,
                keep_indent=source_code,
                is_code=any(a.kind == "code" for a in atoms[i:j]),
            )
        if piece is not None and is_searchable(piece.text):
            pieces.append(piece)
        prev_end = atoms[j - 1].end
        i = j
    return pieces


def _overlap_start(text: str, atoms: list[_Atom], i: int, prev_end: int, overlap: int, size: int, *, by_line: bool) -> int:
    """Where chunk ``i`` starts so that it repeats up to ``overlap`` characters."""
    floor = max(prev_end - overlap, atoms[i].end - size)
    start = prev_end
    for k in range(i - 1, -1, -1):  # walk back only as far as the overlap reaches (no slice: linear overall)
        atom = atoms[k]
        if atom.end <= floor or atom.kind in ("code", "table") or atom.alone:
            break
        start = max(atom.start, floor)
    if start < prev_end and start > 0 and text[start - 1] != "\n" and (by_line or not text[start - 1].isspace()):
        if by_line:
            newline = text.find("\n", start, prev_end)
            start = newline + 1 if newline >= 0 else prev_end
        else:
            match = _WHITESPACE.search(text, start, prev_end)
            start = match.end() if match else prev_end
    return start


def _trimmed(text: str, first: _Atom, start: int, end: int, *, keep_indent: bool, is_code: bool = False) -> Piece | None:
    """The piece for ``text[start:end]``: outer whitespace removed (indentation kept for code), repeated lines added."""
    span = text[start:end]
    if keep_indent or first.kind == "code":
        lead = _LEADING_BLANK_LINES.match(span)
        stripped = span[lead.end() if lead else 0 :].rstrip()
    else:
        stripped = span.strip()
    if not stripped:
        return None
    offset = start + span.index(stripped)
    body = first.prefix + stripped + first.suffix
    return Piece(text=body, start=offset, end=offset + len(stripped), is_code=is_code or first.kind == "code")


# --- atoms ---------------------------------------------------------------------------------


def _atomize(text: str, size: int) -> list[_Atom]:
    """Cut Markdown/plain ``text`` into contiguous atoms covering it: blocks, pieces of blocks and fitting text."""
    atoms: list[_Atom] = []
    cursor = 0
    for block in _find_blocks(text):
        if block.end - block.start <= size:
            atoms.extend(_split_span(text, cursor, block.start, size, _LEVELS))
            atoms.append(_Atom(block.start, block.end, block.kind))
        else:
            head = block.heading_start if block.heading_start is not None and block.heading_start >= cursor else block.start
            atoms.extend(_split_span(text, cursor, head, size, _LEVELS))
            split = _split_table if block.kind == "table" else _split_code
            atoms.extend(split(text, block, head, size))
        cursor = block.end
    atoms.extend(_split_span(text, cursor, len(text), size, _LEVELS))
    return atoms


def _find_blocks(text: str) -> list[_Block]:
    """Fenced code blocks, and pipe tables outside them, in document order."""
    fences = [(m.start(), m.end(), "code") for m in _FENCE.finditer(text)]
    spans = list(fences)
    cursor = 0
    for start, end, _ in [*fences, (len(text), len(text), "")]:
        spans.extend((m.start(), m.end(), "table") for m in _TABLE.finditer(text, cursor, start))
        cursor = end
    spans.sort()
    headings = [m for m in _HEADING.finditer(text) if not any(s <= m.start() < e for s, e, k in fences)]
    blocks = []
    for start, end, kind in spans:
        above = [m for m in headings if m.end() <= start]
        nearest = above[-1] if above else None
        direct = nearest is not None and not text[nearest.end() : start].strip()
        blocks.append(
            _Block(
                start,
                end,
                kind,
                nearest.start() if direct and nearest is not None else None,
                nearest.group(0).strip() if nearest else "",
            )
        )
    return blocks


def _split_span(text: str, start: int, end: int, size: int, levels: tuple[_Cutter, ...], level: int = 0) -> list[_Atom]:
    if start >= end:
        return []
    if end - start <= size:
        kind = "heading" if _HEADING.fullmatch(text[start:end].strip()) else "text"
        return [_Atom(start, end, kind)]
    if level == len(levels):
        return [_Atom(s, min(s + size, end)) for s in range(start, end, size)]
    bounds = [start, *levels[level](text, start, end), end]
    atoms: list[_Atom] = []
    for a, b in itertools.pairwise(bounds):
        atoms.extend(_split_span(text, a, b, size, levels, level + 1))
    return atoms


def _line_end(text: str, start: int, end: int) -> int:
    """Offset just after the line that begins at ``start`` (``end`` at most)."""
    newline = text.find("\n", start, end)
    return end if newline < 0 else newline + 1


def _groups(bounds: list[tuple[int, int]], first_budget: int, budget: int) -> list[tuple[int, int]]:
    """Greedy runs of consecutive ``(start, end)`` units whose span fits the budget (the first run gets ``first_budget``)."""
    runs: list[tuple[int, int]] = []
    for start, end in bounds:
        limit = first_budget if len(runs) == 1 else budget
        if runs and end - runs[-1][0] <= limit:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
    return runs


def _split_table(text: str, block: _Block, head: int, size: int) -> list[_Atom]:
    """Pieces of a table larger than ``size``: whole rows only, each piece starting with header and delimiter row."""
    body_start = _line_end(text, _line_end(text, block.start, block.end), block.end)
    header = text[block.start : body_start].strip("\n") + "\n"
    rows: list[tuple[int, int]] = []
    cursor = body_start
    while cursor < block.end:
        rows.append((cursor, _line_end(text, cursor, block.end)))
        cursor = rows[-1][1]
    if not rows:
        return [_Atom(head, block.end, "table", alone=True)]
    budget = max(size - len(header), _MIN_BLOCK_BODY)
    runs = _groups(rows, max(size - (body_start - head), _MIN_BLOCK_BODY), budget)
    first = _Atom(head, runs[0][1], "table", alone=True)
    return [first, *(_Atom(a, b, "table", prefix=header, alone=True) for a, b in runs[1:])]


def _split_code(text: str, block: _Block, head: int, size: int) -> list[_Atom]:
    """Pieces of a fenced block larger than ``size``: whole lines, each with the heading, the opening fence and a closing fence."""
    opener_end = _line_end(text, block.start, block.end)
    opener = text[block.start : opener_end].strip()
    inner_end = block.start + len(text[block.start : block.end].rstrip())
    closing_start = text.rfind("\n", block.start, inner_end) + 1
    closer = "\n" + text[closing_start : block.end].strip()
    heading = block.heading + "\n\n" if block.heading else ""
    if size - len(heading) - len(opener) - len(closer) - 1 < _MIN_BLOCK_BODY:
        heading = ""
    prefix = heading + opener + "\n"
    budget = max(size - len(prefix) - len(closer), _MIN_BLOCK_BODY)
    units = [(a.start, a.end) for a in _split_span(text, opener_end, closing_start, budget, _CODE_LEVELS)]
    if not units:
        return [_Atom(head, block.end, "code", alone=True)]
    first_prefix = heading if head == block.start else ""  # a heading directly above is inside the span already
    first_budget = max(size - len(first_prefix) - (opener_end - head) - len(closer), _MIN_BLOCK_BODY)
    runs = _groups(units, first_budget, budget)
    atoms = []
    for n, (a, b) in enumerate(runs):
        last = n == len(runs) - 1
        end = block.end if last else b
        if n == 0:
            atoms.append(_Atom(head, end, "code", prefix=first_prefix, suffix="" if last else closer, alone=True))
        else:
            atoms.append(_Atom(a, end, "code", prefix=prefix, suffix="" if last else closer, alone=True))
    return atoms


def _definition_cuts(text: str, start: int, end: int) -> list[int]:
    """Offsets before each top-level definition, moved up over the decorators and comments directly above it."""
    cuts = []
    for match in _DEFINITION.finditer(text, start, end):
        pos = match.start()
        while pos > start:
            newline = text.rfind("\n", start, pos - 1)
            above = newline + 1 if newline >= 0 else start
            if not _ATTACHED.match(text, above, pos - 1):
                break
            pos = above
        if start < pos < end:
            cuts.append(pos)
    return sorted(set(cuts))


#: Code separators from coarsest to finest: top-level definitions, blank lines, lines, words.
_CODE_LEVELS: tuple[_Cutter, ...] = (
    _definition_cuts,
    _pattern_cuts(re.compile(r"\n(?:[ \t]*\n)+")),
    _pattern_cuts(re.compile(r"\n")),
    _pattern_cuts(re.compile(r"[ \t]+")),
)
