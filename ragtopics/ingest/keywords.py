"""ALGORITHMIC keyword extraction for the BM25 keyword index.

The words of a chunk without stop words, plus *codes* (tokens that mix letters and
digits or join parts with ``-``, ``_``, ``/``, ``.``, such as ``E-4711``, ``SK-44``,
``v2.3``) kept whole. A code is written in a normalised form (lower case, joiners
removed: ``E-4711`` → ``e4711``) because RediSearch's tokenizer would otherwise cut
it at the hyphen; questions go through the same function, so both sides match.
"""

from __future__ import annotations

import re

#: English function words (after the classic SMART / NLTK stop lists, shortened).
STOP_WORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves also may might must shall one two many much
    get got like per via etc""".split()
)

_CODE = re.compile(r"(?<![\w-])(?=[\w./-]*\d)(?=[\w./-]*[A-Za-z])[A-Za-z0-9]+(?:[-_./][A-Za-z0-9]+)*(?![\w-])|"
                   r"(?<![\w-])[A-Za-z0-9]+(?:[-_/][A-Za-z0-9]+)*\d+(?![\w-])")  # fmt: skip
_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)
_JOINERS = re.compile(r"[-_./]")


def normalise_code(code: str) -> str:
    """``"E-4711"`` → ``"e4711"``: lower case, joiners removed."""
    return _JOINERS.sub("", code).lower()


def query_keywords(question: str) -> list[str]:
    """Keywords to search for a question: its codes when it has any, else its content words.

    A code (``E-4711``) is what keyword search exists for; adding the question's
    generic words ("error", "code") would let every chunk that talks about error
    codes in general outrank, after fusion, the one chunk that holds the code.
    """
    keywords = extract_keywords(question)
    codes = [k for k in keywords if any(c.isdigit() for c in k)]
    return codes or keywords


def extract_keywords(text: str, *, max_keywords: int = 200) -> list[str]:
    """Keywords of a text: normalised codes first, then content words, without repeats.

    Args:
        text: a chunk or a question.
        max_keywords: cap on the number returned.

    Returns:
        Lower-case keywords in order of first appearance (codes before words).
    """
    seen: dict[str, None] = {}
    for match in _CODE.finditer(text):
        token = match.group(0).strip("./")
        if any(c.isdigit() for c in token):
            seen.setdefault(normalise_code(token), None)
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)[:max_keywords]
