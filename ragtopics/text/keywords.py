"""ALGORITHMIC keyword extraction for the BM25 keyword index.

The words of a chunk without stop words, plus *codes* (tokens that mix letters and
digits or join parts with ``-``, ``_``, ``/``, ``.``, such as ``E-4711``, ``SK-44``,
``v2.3``) kept whole. A code is written in a normalised form (lower case, joiners
removed: ``E-4711`` → ``e4711``) because RediSearch's tokenizer would otherwise cut
it at the hyphen; questions go through the same function, so both sides match.

A code inside a path, URL, e-mail address or dotted name
(``/v3/fleet/telemetry/ZETA-7781/export``, ``jane.doe42@example.com``) is written
both whole and by segment (``zeta7781``), so a question naming only the segment
finds it. A question is searched by its codes *and* its words; the keyword search
weights the codes up (see ``ChunkIndex.search_keywords``).
"""

from __future__ import annotations

import re
from collections import Counter

#: English function words (after the classic SMART / NLTK stop lists, shortened).
STOP_WORDS: frozenset[str] = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "also",
        "may",
        "might",
        "must",
        "shall",
        "one",
        "two",
        "many",
        "much",
        "get",
        "got",
        "like",
        "per",
        "via",
        "etc",
    ]
)

_CODE = re.compile(
    r"(?<![\w-])(?=[\w./-]*\d)(?=[\w./-]*[A-Za-z])[A-Za-z0-9]+(?:[-_./][A-Za-z0-9]+)*(?![\w-])|"
    r"(?<![\w-])[A-Za-z0-9]+(?:[-_/][A-Za-z0-9]+)*\d+(?![\w-])"
)
_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)
_JOINERS = re.compile(r"[-_./]")
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
#: Joiners that separate the segments of a path, URL, e-mail address or dotted name.
_SEGMENT_JOINERS = re.compile(r"[/.@+]")
_SEARCHABLE = re.compile(r"[^\W_]")
#: Most distinct keywords written to a chunk's keyword field (a 2,000-character chunk has about 250).
MAX_INDEX_KEYWORDS = 1000
#: A segment of only digits is indexed on its own from this many digits (``v2.3`` gives no ``3``).
_MIN_DIGIT_SEGMENT = 3


def normalise_code(code: str) -> str:
    """``"E-4711"`` → ``"e4711"``: lower case, joiners removed."""
    return _JOINERS.sub("", code).lower()


def is_searchable(text: str) -> bool:
    """True when ``text`` holds a letter or a digit (any script): something a search can match.

    A question made only of punctuation and symbols (``"?!"``, ``"--- ***"``) is not
    searchable; retrieval returns no hits for it, so the no-answer path answers.
    """
    return _SEARCHABLE.search(text) is not None


def is_code(keyword: str) -> bool:
    """True for a normalised code (a keyword with a digit: ``e4711``, ``40``)."""
    return any(c.isdigit() for c in keyword)


def query_keywords(question: str) -> list[str]:
    """Keywords to search for a question: its codes first, then its content words.

    Both are searched: a question about "the unit price of Brass hinge, 40 mm" needs
    ``brass`` and ``hinge`` as much as ``40``. The keyword search weights codes up
    (a code is what keyword search exists for), so the chunk holding ``E-4711``
    still outranks chunks that only talk about error codes in general.

    Returns:
        Normalised keywords, codes before words (see :func:`extract_keywords`).
    """
    return extract_keywords(question)


def extract_keywords(text: str, *, max_keywords: int = 200) -> list[str]:
    """Keywords of a text: normalised codes first, then content words, without repeats.

    Args:
        text: a chunk or a question.
        max_keywords: cap on the number returned.

    Returns:
        Lower-case keywords in order of first appearance (codes before words).
    """
    seen: dict[str, None] = {}
    for match in _EMAIL.finditer(text):
        seen.setdefault(re.sub(r"[^0-9a-z]", "", match.group(0).lower()), None)
        for segment in _segments(match.group(0)):
            seen.setdefault(segment, None)
    for match in _CODE.finditer(text):
        token = match.group(0).strip("./")
        if any(c.isdigit() for c in token):
            seen.setdefault(normalise_code(token), None)
            for segment in _segments(token):
                seen.setdefault(segment, None)
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)[:max_keywords]


def is_identifier(keyword: str) -> bool:
    """True for a normalised code with letters and digits (``e4711``, ``sk44``), not a plain number (``1986``)."""
    return is_code(keyword) and any(c.isalpha() for c in keyword)


def term_counts(text: str) -> Counter[str]:
    """How often each keyword occurs in a text, with the normalisation of :func:`extract_keywords`:
    the term frequencies that BM25 scores a chunk by (``"Pump P-7: the pump"`` → ``{"p7": 1, "pump": 2}``)."""
    counts: Counter[str] = Counter()
    for match in _EMAIL.finditer(text):
        counts[re.sub(r"[^0-9a-z]", "", match.group(0).lower())] += 1
        counts.update(_segments(match.group(0)))
    for match in _CODE.finditer(text):
        token = match.group(0).strip("./")
        if any(c.isdigit() for c in token):
            counts[normalise_code(token)] += 1
            counts.update(_segments(token))
    counts.update(w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOP_WORDS)
    return counts


def index_keywords(file_name: str, text: str) -> str:
    """A chunk's keyword field: the distinct keywords of its file's name (its stem: ``Leland, North Carolina``
    from ``Leland, North Carolina.txt``) and of its text, space separated. The name often says what a
    file is about when its text does not repeat it, so a question naming it finds the file's chunks."""
    return " ".join(extract_keywords(f"{file_stem(file_name)}\n{text}", max_keywords=MAX_INDEX_KEYWORDS))


def file_stem(file_name: str) -> str:
    """A file name without its extension (``manual.v2.pdf`` → ``manual.v2``)."""
    stem, dot, ext = file_name.rpartition(".")
    return stem if dot and stem and ext.isalnum() and len(ext) <= 5 else file_name


def _segments(token: str) -> list[str]:
    """Normalised codes among the segments of a path, URL, e-mail address or dotted name (``[]`` for a plain code)."""
    parts = _SEGMENT_JOINERS.split(token)
    if len(parts) < 2:
        return []
    codes = []
    for part in parts:
        code = normalise_code(part)
        if is_code(code) and (not code.isdigit() or len(code) >= _MIN_DIGIT_SEGMENT):
            codes.append(code)
    return codes
