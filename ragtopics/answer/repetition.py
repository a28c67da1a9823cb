"""A guard against degenerate loops in a streamed answer.

Small models (and larger ones at a low temperature) can fall into a loop: the same few
words over and over ("The [a.md] is from [a.md] and the is from. The [a.md] is from …")
until the token limit. The guard watches the text as it streams and trips when

* a word n-gram of :data:`NGRAM_WORDS` words occurs :data:`NGRAM_REPEATS` times (the
  repeated n-gram test of degenerate text, Holtzman et al., 2020, "The Curious Case of
  Neural Text Degeneration"), or
* one word (a citation, say) stands :data:`SAME_WORD_RUN` times in a row.

:func:`trimmed` then cuts the answer back to the end of its last whole sentence before
the loop began, so the answer ends cleanly, and the caller says that it was stopped.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

#: Size of the word n-grams watched, and how often one may occur before the answer counts as looping.
NGRAM_WORDS = 6
NGRAM_REPEATS = 3
#: The same word this many times in a row is a loop too ("[a.md] [a.md] [a.md] [a.md]").
SAME_WORD_RUN = 4
#: What ends an answer that the guard stopped.
STOPPED_NOTE = "*(stopped: the model began repeating itself)*"

_SENTENCE_END = re.compile(r"[.!?](?:\s*\[[^\[\]]+\])*(?=\s|$)|\n")


@dataclass(slots=True)
class RepetitionGuard:
    """Watches a streamed answer for a loop; feed it the text so far after each piece.

    Attributes:
        loop_start: the character offset in the text where the repeated words first stood, once tripped
            (else None).
        cycle_end: where they stood the second time: the text before it holds one whole cycle of the loop.
    """

    loop_start: int | None = None
    cycle_end: int | None = None
    _counts: Counter = field(default_factory=Counter)
    _spans: list[tuple[int, int]] = field(default_factory=list)
    _text_len: int = 0

    def tripped(self, text: str) -> bool:
        """True once ``text`` (the whole answer so far, growing) has begun to loop.

        Only words completed since the last call are counted, so a whole answer costs time
        linear in its length.
        """
        if self.loop_start is not None:
            return True
        base = self._spans[-1][1] if self._spans else 0
        for match in re.finditer(r"\S+", text[base:]):
            start, end = base + match.start(), base + match.end()
            if end == len(text):
                break  # the last word may still grow with the next piece
            self._spans.append((start, end))
            if self._add(text):
                return True
        return False

    def _add(self, text: str) -> bool:
        words = [text[s:e].lower() for s, e in self._spans[-max(NGRAM_WORDS, SAME_WORD_RUN) :]]
        if len(words) >= SAME_WORD_RUN and len(set(words[-SAME_WORD_RUN:])) == 1:
            self.loop_start = self.cycle_end = self._spans[-SAME_WORD_RUN + 1][0]
            return True
        if len(self._spans) < NGRAM_WORDS:
            return False
        gram = tuple(words[-NGRAM_WORDS:])
        self._counts[gram] += 1
        if self._counts[gram] < NGRAM_REPEATS:
            return False
        starts = self._occurrences(text, gram)
        self.loop_start, self.cycle_end = starts[0], starts[1]
        return True

    def _occurrences(self, text: str, gram: tuple[str, ...]) -> list[int]:
        """Where the n-gram starts, each time it occurs (at least :data:`NGRAM_REPEATS` offsets)."""
        return [
            self._spans[i][0]
            for i in range(len(self._spans) - NGRAM_WORDS + 1)
            if tuple(text[s:e].lower() for s, e in self._spans[i : i + NGRAM_WORDS]) == gram
        ]


def trimmed(text: str, guard: RepetitionGuard) -> str:
    """The answer cut before its loop, back to the end of the last whole sentence (with its citations).

    Args:
        text: the answer as streamed.
        guard: a guard that has tripped on ``text``.

    Returns:
        The text before the loop began, up to its last sentence end (or all of it when it has none);
        when nothing stands before the loop, its first cycle the same way; stripped.
    """
    for cut in (guard.loop_start, guard.cycle_end):
        head = text[:cut]
        ends = [m.end() for m in _SENTENCE_END.finditer(head)]
        head = (head[: ends[-1]] if ends else head).strip()
        if head:
            return head
    return ""
