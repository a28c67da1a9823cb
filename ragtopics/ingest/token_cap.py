"""Keep every chunk inside the embedding model's window, counted in its own tokens.

The bundled all-MiniLM-L6-v2 reads at most 256 word pieces (about 1,000 to 1,200
characters of English); sentence-transformers silently drops the rest, so a fact
near the end of a long chunk would be invisible to dense search. Chunk Size is in
characters and may be up to 8,000, so chunking alone cannot prevent this.

Choice: a chunk over the window is **split** into consecutive parts that each fit,
cut at a sentence end where one is near, else between words. The alternative,
embedding a long chunk in windows and averaging the vectors, keeps one chunk but
blurs it: a fact in one window weighs 1/n of the mean, and the answer still cites
the whole long chunk. Split parts each get a sharp vector, their own keywords and
context line, and a narrower source span. Parts do not overlap (the chunker's own
overlap still applies between the original chunks).

The SEMANTIC context line is embedded in front of its chunk, so it counts against
the window: chunks are capped to the window less :data:`CONTEXT_LINE_TOKENS`, and a
context line longer than that is shortened (:func:`trim_to_tokens`).

Plain functions over a ``count_tokens(texts) -> list[int]`` callable (the embedder's
own tokenizer, special tokens included); an embedder with an unknown window is not capped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from ragtopics.ingest.chunking import Piece

log = logging.getLogger(__name__)

#: ``count_tokens(texts)``: tokens each text takes in the embedder's window, special tokens included.
TokenCounter = Callable[[list[str]], list[int]]

#: Tokens kept free for a SEMANTIC context line (at most 300 characters; usually one sentence of 20-60 tokens).
CONTEXT_LINE_TOKENS = 80
#: A part may end at a sentence end if that keeps at least this share of the budget; else it ends between words.
_SENTENCE_CUT_MIN_SHARE = 0.5
_SENTENCE_END = re.compile(r"[.!?;:]['\")\]]*$")


@dataclass(frozen=True, slots=True)
class CappedChunks:
    """Chunks after the token cap.

    Attributes:
        pieces: every chunk, each within ``max_tokens`` less the reserve, in document order.
        split_chunks: how many of the input chunks were split.
        added_chunks: how many chunks the splits added (``len(pieces)`` minus the input count).
        max_tokens: the embedder's window in tokens; None when unknown (nothing was capped).
    """

    pieces: list[Piece]
    split_chunks: int
    added_chunks: int
    max_tokens: int | None

    def note(self) -> str:
        """What the Indexed Documents list says, e.g. ``12 chunks split to fit the embedder's 256-token window``."""
        if not self.split_chunks:
            return ""
        plural = "chunk" if self.split_chunks == 1 else "chunks"
        return (
            f"{self.split_chunks} {plural} split to fit the embedder's {self.max_tokens}-token window "
            f"({self.added_chunks} more chunks)"
        )


def cap_tokens(
    pieces: list[Piece],
    *,
    max_tokens: int | None,
    count_tokens: TokenCounter | None,
    reserve_tokens: int = 0,
    counts: list[int] | None = None,
) -> CappedChunks:
    """Split each chunk that exceeds the embedder's window into parts that fit.

    Args:
        pieces: the chunks, in document order.
        max_tokens: the embedder's window in tokens; None: unknown, return the chunks unchanged.
        count_tokens: the embedder's token counter; None: unknown, unchanged.
        reserve_tokens: tokens to keep free in each chunk's window (the SEMANTIC context line).
        counts: each chunk's tokens, when the caller counted them already (one call for many
            files); None: counted here.

    Returns:
        The capped chunks; a split part keeps the chunk's ``is_code``, ``records``, ``pages``
        and ``pictures`` (all of the chunk's: which page a part's text is on is not known), and
        its own ``start``/``end`` when the chunk's text is its source span (else the chunk's).

    Raises:
        ValueError: when ``reserve_tokens`` leaves fewer than 4 tokens for the chunk.
    """
    if not pieces or not max_tokens or count_tokens is None:
        return CappedChunks(list(pieces), 0, 0, max_tokens)
    budget = max_tokens - reserve_tokens
    if budget < 4:
        raise ValueError(f"a window of {max_tokens} tokens less {reserve_tokens} reserved leaves no room for a chunk")
    out: list[Piece] = []
    split = 0
    if counts is None or len(counts) != len(pieces):
        counts = count_tokens([p.text for p in pieces])
    for piece, tokens in zip(pieces, counts, strict=True):
        if tokens <= budget:
            out.append(piece)
            continue
        parts = _split_piece(piece, budget, count_tokens)
        log.debug("a chunk of %s tokens split into %s parts of at most %s", tokens, len(parts), budget)
        split += 1
        out.extend(parts)
    return CappedChunks(out, split, len(out) - len(pieces), max_tokens)


def trim_to_tokens(text: str, max_tokens: int, count_tokens: TokenCounter) -> str:
    """``text`` cut back between words until it takes at most ``max_tokens`` tokens ("" if no word fits)."""
    words = text.split()
    while words and count_tokens([" ".join(words)])[0] > max_tokens:
        words = words[: max(0, min(len(words) - 1, len(words) * 4 // 5))]
    return " ".join(words)


def _split_piece(piece: Piece, budget: int, count_tokens: TokenCounter) -> list[Piece]:
    """The parts of one over-long chunk, each within ``budget`` tokens.

    Multi-line text is split between lines (see :func:`_line_parts`): a Markdown table
    between rows, each part repeating the header and delimiter rows; a fenced code
    chunk re-fenced in each part; code and prose preferably before a top-level
    definition or at a blank line. A single long paragraph is split between words
    (see :func:`_pack_words`).
    """
    text = piece.text
    maps_to_source = len(text) == piece.end - piece.start
    by_lines = _line_parts(text, budget, count_tokens, is_code=piece.is_code)
    if by_lines is not None:
        return [
            replace(
                piece,
                text=t,
                start=piece.start + at if at is not None and maps_to_source else piece.start,
                end=piece.start + at + len(t) if at is not None and maps_to_source else piece.end,
            )
            for t, at in by_lines
        ]
    spans = _pack_words(text, budget, count_tokens)
    spans = [s for span in spans for s in _verified(text, span, budget, count_tokens)]
    parts = []
    for start, end in spans:
        bounds = (piece.start + start, piece.start + end) if maps_to_source else (piece.start, piece.end)
        parts.append(replace(piece, text=text[start:end], start=bounds[0], end=bounds[1]))
    return parts


_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _frame(lines: list[str], *, is_code: bool) -> tuple[list[str], list[str], list[str]]:
    """``(head, body, suffix)``: the lines each part repeats before and after (table header, code fences), and the rest."""
    table = next(
        (i for i in range(len(lines) - 1) if lines[i].lstrip().startswith("|") and _TABLE_DELIMITER.match(lines[i + 1])), None
    )
    if table is not None:
        return lines[: table + 2], lines[table + 2 :], []
    fence = next((i for i, line in enumerate(lines) if line.lstrip().startswith("```")), None) if is_code else None
    if fence is None:
        return [], lines, []
    body = lines[fence + 1 :]
    if body and body[-1].strip().startswith("```"):
        return lines[: fence + 1], body[:-1], [body[-1]]
    return lines[: fence + 1], body, ["```"]


def _cut_rank(lines: list[str], j: int) -> int:
    """How good a cut before line ``j`` is: 2 before a top-level definition after a blank line, 1 after a blank line, else 0."""
    after_blank = j > 0 and not lines[j - 1].strip()
    top_level = bool(lines[j]) and not lines[j][0].isspace() and not lines[j].startswith(("}", ")", "]"))
    return 2 if after_blank and top_level else 1 if after_blank else 0


def _line_parts(text: str, budget: int, count_tokens: TokenCounter, *, is_code: bool) -> list[tuple[str, int | None]] | None:
    """Parts of a multi-line chunk as ``(text, offset in the chunk or None when framed)``; None when lines don't fit."""
    head, body, suffix = _frame(text.split("\n"), is_code=is_code)
    if len(body) < 2:
        return None
    special = count_tokens([""])[0]
    frame = count_tokens(["\n".join(head + suffix)])[0] - special if head or suffix else 0
    room = budget - special - frame
    costs = [max(0, n - special) for n in count_tokens(body)]
    if room < budget // 4 or max(costs) > room:  # a frame that fills the window, or one line alone too long
        return None
    groups, first, used = [], 0, 0
    for i, cost in enumerate(costs):
        if i > first and used + cost > room:
            cut = max(range(first + 1, i + 1), key=lambda j: (_cut_rank(body, j) if sum(costs[first:j]) >= room // 4 else -1, j))
            groups.append((first, cut))
            first, used = cut, sum(costs[cut:i])
        used += cost
    groups.append((first, len(body)))
    offsets = [0]
    for line in body:
        offsets.append(offsets[-1] + len(line) + 1)
    out = []
    for start, end in groups:
        lines = body[start:end]
        while lines and not lines[-1].strip():
            lines = lines[:-1]
        while lines and not lines[0].strip():
            start, lines = start + 1, lines[1:]
        if lines:
            out.append(("\n".join(head + lines + suffix), None if head or suffix else offsets[start]))
    if max(count_tokens([t for t, _ in out])) > budget:
        return None
    return out


def _pack_words(text: str, budget: int, count_tokens: TokenCounter) -> list[tuple[int, int]]:
    """Greedy spans of whole words whose summed token counts fit ``budget``.

    Word-piece tokenizers tokenize each whitespace-separated word on its own, so a span's
    count is the sum of its words' counts plus the special tokens; :func:`_verified`
    checks the result for tokenizers where that is only an estimate.
    """
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    special = count_tokens([""])[0]
    costs = [max(1, n - special) for n in count_tokens([text[s:e] for s, e in words])]
    room = budget - special
    spans: list[tuple[int, int]] = []
    first, used, last_sentence = 0, 0, -1
    for i, cost in enumerate(costs):
        if used + cost > room and i > first:
            at_sentence = last_sentence >= first and sum(costs[first : last_sentence + 1]) >= room * _SENTENCE_CUT_MIN_SHARE
            cut = last_sentence + 1 if at_sentence else i
            spans.append((words[first][0], words[cut - 1][1]))
            first, used = cut, sum(costs[cut:i])
        used += cost
        if _SENTENCE_END.search(text[words[i][0] : words[i][1]]) or text[words[i][1] : words[i][1] + 1] == "\n":
            last_sentence = i
    if first < len(words):
        spans.append((words[first][0], words[-1][1]))
    return spans


def _verified(text: str, span: tuple[int, int], budget: int, count_tokens: TokenCounter) -> list[tuple[int, int]]:
    """``span`` if it really fits; else its halves (between words, or mid-word for one huge word), recursively."""
    start, end = span
    if count_tokens([text[start:end]])[0] <= budget or end - start <= 1:
        return [span]
    middle = start + (end - start) // 2
    gaps = [m.start() for m in re.finditer(r"\s+", text[start + 1 : end - 1])]
    gap = start + 1 + min(gaps, key=lambda g: abs(start + 1 + g - middle)) if gaps else -1
    if gap > start:  # between words: drop the whitespace between the halves
        left, right = (start, gap), (gap + len(text[gap:end]) - len(text[gap:end].lstrip()), end)
    else:  # one huge word (a hash, a data URL): cut it in the middle
        left, right = (start, middle), (middle, end)
    return _verified(text, left, budget, count_tokens) + _verified(text, right, budget, count_tokens)
