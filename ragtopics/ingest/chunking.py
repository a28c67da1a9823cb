"""RECURSIVE chunking: paragraphs, then lines, then sentences, then words.

Text is first cut into *atoms*: fenced code blocks (never split) and, for the rest,
the coarsest separator level whose pieces fit into ``size``. Consecutive atoms are
packed greedily into chunks of at most ``size`` characters; each chunk after the
first starts with the last ``overlap`` characters of its predecessor (moved forward
to a word boundary, and never into a code block). Every chunk is a contiguous span
of the input, so no text is lost and offsets point back into the source.

The separator hierarchy follows the widely used recursive character splitter
(LangChain's ``RecursiveCharacterTextSplitter``), with sentence ends added.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragtopics.errors import InvalidSettingError

#: Separators from coarsest to finest; a match ends the piece before it.
_LEVELS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraphs
    re.compile(r"\n"),  # lines (lists, source code)
    re.compile(r"(?<=[.!?;:])[\"')\]]*\s+"),  # sentence ends
    re.compile(r"\s+"),  # words
)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\1[ \t]*$\n?", re.MULTILINE | re.DOTALL)

_WHITESPACE = re.compile(r"\s")


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk of a text.

    Attributes:
        text: the chunk's text, ``source[start:end]`` with outer whitespace removed.
        start: offset of the first character in the source, in characters.
        end: offset one past the last character in the source.
        is_code: the chunk is (or holds) a fenced code block.
    """

    text: str
    start: int
    end: int
    is_code: bool = False


@dataclass(frozen=True, slots=True)
class _Atom:
    start: int
    end: int
    is_code: bool


def split_recursive(text: str, *, size: int, overlap: int) -> list[Piece]:
    """Cut ``text`` into chunks of at most ``size`` characters with ``overlap`` repeated.

    Args:
        text: the document text.
        size: Chunk Size in characters (>= 1). Only a fenced code block longer than
            ``size`` yields a longer chunk, which then holds that block alone.
        overlap: Chunk Overlap in characters, ``0 <= overlap < size``.

    Returns:
        The chunks in document order; whitespace-only text gives ``[]``.

    Raises:
        InvalidSettingError: when ``size`` or ``overlap`` is out of range.
    """
    if size < 1:
        raise InvalidSettingError(f"chunk_size must be at least 1 character, got {size}")
    if not 0 <= overlap < size:
        raise InvalidSettingError(f"chunk_overlap must be >= 0 and < chunk_size ({size}), got {overlap}")
    atoms = _atomize(text, size)
    pieces: list[Piece] = []
    i = 0
    prev_end: int | None = None
    while i < len(atoms):
        start = atoms[i].start
        if prev_end is not None and overlap and not atoms[i].is_code:
            start = _overlap_start(text, atoms, i, prev_end, overlap, size)
        end = atoms[i].end
        is_code = atoms[i].is_code
        j = i + 1
        while j < len(atoms) and atoms[j].end - start <= size:
            end = atoms[j].end
            is_code = is_code or atoms[j].is_code
            j += 1
        piece = _trimmed(text, start, end, is_code)
        if piece is not None:
            pieces.append(piece)
        prev_end = end
        i = j
    return pieces


def _overlap_start(text: str, atoms: list[_Atom], i: int, prev_end: int, overlap: int, size: int) -> int:
    """Where chunk ``i`` starts so that it repeats up to ``overlap`` characters."""
    floor = max(prev_end - overlap, atoms[i].end - size)
    start = prev_end
    for k in range(i - 1, -1, -1):  # walk back only as far as the overlap reaches (no slice: linear overall)
        atom = atoms[k]
        if atom.end <= floor or atom.is_code:
            break
        start = max(atom.start, floor)
    if start < prev_end and start > 0 and not text[start - 1].isspace():
        match = _WHITESPACE.search(text, start, prev_end)
        start = match.end() if match else prev_end
    return start


def _trimmed(text: str, start: int, end: int, is_code: bool) -> Piece | None:
    span = text[start:end]
    stripped = span.strip()
    if not stripped:
        return None
    lead = len(span) - len(span.lstrip())
    return Piece(text=stripped, start=start + lead, end=start + lead + len(stripped), is_code=is_code)


def _atomize(text: str, size: int) -> list[_Atom]:
    """Cut ``text`` into contiguous atoms covering it: code blocks and fitting pieces."""
    atoms: list[_Atom] = []
    cursor = 0
    for fence in _FENCE.finditer(text):
        atoms.extend(_split_span(text, cursor, fence.start(), size, 0))
        atoms.append(_Atom(fence.start(), fence.end(), True))
        cursor = fence.end()
    atoms.extend(_split_span(text, cursor, len(text), size, 0))
    return atoms


def _split_span(text: str, start: int, end: int, size: int, level: int) -> list[_Atom]:
    if start >= end:
        return []
    if end - start <= size:
        return [_Atom(start, end, False)]
    if level == len(_LEVELS):
        return [_Atom(s, min(s + size, end), False) for s in range(start, end, size)]
    cuts = [m.end() for m in _LEVELS[level].finditer(text, start, end) if start < m.end() < end]
    bounds = [start, *cuts, end]
    atoms: list[_Atom] = []
    for a, b in zip(bounds, bounds[1:]):
        atoms.extend(_split_span(text, a, b, size, level + 1))
    return atoms
