"""Extractive answers: the sentences of the evidence that best answer the question, quoted with citations.

While the Language Model role is served by the bundled 135M model, a written answer is
not worth reading (it loops and invents). The design already routes with the embedding
model and extracts the graph with an NLP library while that is so; this module does the
same for answers. It is query-focused extractive summarisation in its simplest sound
form: split the evidence into sentences, score each against the question with the
embedding model (cosine similarity of unit vectors) plus the share of the question's
content words and codes it contains (weighted by their rarity among the candidate
sentences, as BM25's idf does), prefer the better-ranked evidence a little, keep the best
sentence of each passage that comes close to the best overall (the facts of a multi-hop
question stand in different passages), and show them in the order they stand in their
passages, each followed by its citation code.

Pure functions; the only model used is the embedding function passed in.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Most sentences an answer quotes, and most taken from one passage.
MAX_QUOTES = 5
MAX_QUOTES_PER_PASSAGE = 2
#: A sentence is quoted only when its score is within this margin of the best sentence's. Tuned on the
#: development sets (hotpotqa-opaque, 100 questions, Top-K 5): margin 0.15 with at most 4 quotes put the gold
#: answer in 25 % of the answers (41 words on average), 0.3 with the best of each of the first three passages
#: in 32 % (54 words), 0.4 with the best of each passage and at most 5 in 43 % (84 words).
SCORE_MARGIN = 0.4
#: Weight of the question-word overlap (0..1) next to cosine similarity (-1..1).
KEYWORD_WEIGHT = 0.3
#: Weight of the passage's retrieval rank: ``RANK_WEIGHT / (rank + 1)`` is added to its sentences' scores.
RANK_WEIGHT = 0.1
#: Sentences shorter than this (in words) are not quoted alone: headings, captions, list stubs.
MIN_SENTENCE_WORDS = 4
#: Longest quoted sentence, in characters (a table row or a run-on line is clipped at a word).
MAX_SENTENCE_CHARS = 400
#: Most sentences embedded per answer (the best-ranked passages' first); bounds the embedding cost.
MAX_CANDIDATES = 160

#: Words that carry no meaning of their own in a question (spaCy's English stop words, plus question words).
_QUESTION_WORDS = {
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "does",
    "did",
    "do",
    "is",
    "are",
    "was",
    "were",
    "much",
    "many",
    "often",
    "long",
}
_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")
#: A code: a word with a digit, or letters joined by a hyphen to digits ("K-2", "P-1", "ISO-9001", "v2").
_CODE = re.compile(r"^(?=.*\d)[^\W_]+(?:-[^\W_]+)*$")


@dataclass(frozen=True, slots=True)
class Passage:
    """A text an extractive answer may quote from.

    Attributes:
        code: its citation code (``S1``...); "" when it cannot be cited (an attached file).
        text: the passage's text.
        rank: its retrieval rank, 0 for the best.
    """

    code: str
    text: str
    rank: int


@dataclass(frozen=True, slots=True)
class Quote:
    """One sentence chosen for the answer.

    Attributes:
        code: the citation code of its passage ("" when none).
        text: the sentence, whitespace collapsed.
        rank: its passage's retrieval rank.
        position: the sentence's index in its passage.
        score: cosine similarity + keyword and rank bonuses (see the module docstring).
    """

    code: str
    text: str
    rank: int
    position: int
    score: float


_SPLITTER = None
_SPLITTER_LOCK = threading.Lock()


#: Cue words of a question about a whole collection (its themes, topics, an overview or a summary).
_OVERVIEW_CUES = frozenset(
    {
        "theme",
        "themes",
        "topic",
        "topics",
        "subject",
        "subjects",
        "overview",
        "summary",
        "summarise",
        "summarize",
        "gist",
        "about",
        "cover",
        "covered",
        "covers",
        "discuss",
        "discussed",
        "discusses",
    }
)
#: Words such a question may use besides its cues: asking, pointing at the collection, qualifying the themes.
_OVERVIEW_WORDS = _OVERVIEW_CUES | frozenset(
    {
        "a",
        "all",
        "an",
        "and",
        "any",
        "are",
        "as",
        "be",
        "broad",
        "by",
        "can",
        "collection",
        "common",
        "content",
        "contents",
        "corpus",
        "data",
        "describe",
        "do",
        "document",
        "documents",
        "does",
        "file",
        "files",
        "for",
        "general",
        "give",
        "here",
        "how",
        "i",
        "ideas",
        "important",
        "in",
        "is",
        "it",
        "its",
        "key",
        "kind",
        "kinds",
        "know",
        "list",
        "main",
        "major",
        "material",
        "me",
        "most",
        "mostly",
        "of",
        "on",
        "or",
        "our",
        "overall",
        "please",
        "recurring",
        "say",
        "says",
        "set",
        "sort",
        "sorts",
        "sources",
        "talk",
        "tell",
        "text",
        "texts",
        "that",
        "the",
        "their",
        "them",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "us",
        "various",
        "we",
        "what",
        "whats",
        "which",
        "with",
        "you",
        "your",
        "central",
        "areas",
        "matters",
        "broadly",
        "mainly",
    }
)


def is_overview(question: str) -> bool:
    """Whether a question asks about the whole collection and names no subject of its own.

    True for "What are the main themes of these documents?" or "Give me an overview"; false for
    "What are the main themes of the documents about physicists?" (physicists is a subject: the
    summaries most similar to it answer that). Every word must be one of a fixed list of asking and
    pointing words, and one of them a cue (theme, topic, overview, summary, about, cover, discuss).
    """
    words = re.findall(r"[a-z]+", question.lower().replace("'", ""))
    return bool(words) and all(w in _OVERVIEW_WORDS for w in words) and any(w in _OVERVIEW_CUES for w in words)


#: Words of a question that name a kind of named thing, and the graph's entity types they mean (NLP extraction types
#: spaCy's labels: GPE, LOC and FAC are PLACE, ORG is ORGANIZATION, NORP is GROUP, WORK_OF_ART is WORK).
SUBJECT_TYPES: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ("place", "places", "location", "locations", "city", "cities", "town", "towns", "country", "countries"),
        frozenset({"PLACE"}),
    ),
    **dict.fromkeys(
        ("region", "regions", "village", "villages", "island", "islands", "landmark", "landmarks", "geography"),
        frozenset({"PLACE"}),
    ),
    **dict.fromkeys(
        ("people", "person", "persons", "individual", "individuals", "who", "whom", "characters", "personalities"),
        frozenset({"PERSON"}),
    ),
    **dict.fromkeys(
        ("organisation", "organisations", "organization", "organizations", "company", "companies", "institution"),
        frozenset({"ORGANIZATION"}),
    ),
    **dict.fromkeys(("institutions", "firms", "businesses", "agencies"), frozenset({"ORGANIZATION"})),
    **dict.fromkeys(("event", "events"), frozenset({"EVENT"})),
    **dict.fromkeys(("language", "languages"), frozenset({"LANGUAGE"})),
    **dict.fromkeys(("nationalities", "peoples"), frozenset({"GROUP"})),
    **dict.fromkeys(("product", "products"), frozenset({"PRODUCT"})),
    "works": frozenset({"WORK"}),
}
#: Words a question about a kind of named thing in the whole collection may use besides :data:`SUBJECT_TYPES` and the
#: overview words ("Which people do these documents talk about, and what are they known for?").
_SUBJECT_WORDS = _OVERVIEW_WORDS | frozenset(
    {
        "appear",
        "appears",
        "been",
        "described",
        "did",
        "different",
        "each",
        "famous",
        "feature",
        "featured",
        "has",
        "have",
        "involved",
        "known",
        "mentioned",
        "named",
        "notable",
        "play",
        "played",
        "referred",
        "role",
        "roles",
        "take",
        "talked",
        "types",
        "was",
        "were",
    }
)


def overview_subject(question: str) -> frozenset[str]:
    """The kinds of named things an overview question asks about, as the graph's entity types; empty for any other
    question.

    "What kinds of places are described?" gives ``{"PLACE"}``, "Which people do these documents talk about, and
    what are they known for?" ``{"PERSON"}``; "Which people won the Nobel Prize?" names more than a kind (Nobel,
    Prize), so it is not one (similarity answers it). Every word must be an asking, pointing or overview word and
    at least one a kind of thing (:data:`SUBJECT_TYPES`).
    """
    words = re.findall(r"[a-z]+", question.lower().replace("'", ""))
    types = [SUBJECT_TYPES[w] for w in words if w in SUBJECT_TYPES]
    if not types or any(w not in SUBJECT_TYPES and w not in _SUBJECT_WORDS for w in words):
        return frozenset()
    return frozenset().union(*types)


def _sentencizer():
    """spaCy's rule-based sentence splitter on a blank English pipeline (no model to load), built once."""
    global _SPLITTER
    with _SPLITTER_LOCK:
        if _SPLITTER is None:
            # deferred: spaCy takes seconds to import; only answers written without a model need it
            import spacy

            nlp = spacy.blank("en")
            nlp.add_pipe("sentencizer")
            _SPLITTER = nlp
    return _SPLITTER


def split_sentences(text: str) -> list[str]:
    """The sentences of a passage, in order.

    Lines are grouped into paragraphs first (a blank line, a list item or a table row starts a new
    one; Markdown headings are dropped: they name a section, they do not answer), then spaCy's
    rule-based sentencizer splits each paragraph. Sentences of fewer than :data:`MIN_SENTENCE_WORDS`
    words are dropped; longer than :data:`MAX_SENTENCE_CHARS` characters are clipped at a word with ``…``.
    """
    out: list[str] = []
    nlp = _sentencizer()
    for block in _paragraphs(text):
        for sent in nlp(block).sents:
            sentence = sent.text.strip()
            if len(_WORD.findall(sentence)) < MIN_SENTENCE_WORDS:
                continue
            if len(sentence) > MAX_SENTENCE_CHARS:
                sentence = sentence[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
            out.append(sentence)
    return out


_ITEM = re.compile(r"^\s*(?:[-*•>|]+|\d+[.)])\s+")


def _paragraphs(text: str) -> list[str]:
    """Lines joined into paragraphs, whitespace collapsed, list markers removed, headings left out."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            blocks.append([])
            continue
        if _ITEM.match(line):
            blocks.append([_ITEM.sub("", line)])
            continue
        blocks[-1].append(line)
    return [joined for b in blocks if (joined := " ".join(" ".join(b).split()))]


def question_terms(question: str) -> dict[str, float]:
    """The question's content words and codes, lower-cased, each with its weight (codes count twice).

    Stop words are spaCy's English list plus question words ("how", "often").
    """
    # deferred: spaCy takes seconds to import; only answers written without a model need it
    from spacy.lang.en.stop_words import STOP_WORDS

    terms: dict[str, float] = {}
    for word in _WORD.findall(question):
        key = word.lower()
        if key in STOP_WORDS or key in _QUESTION_WORDS or (len(key) < 2 and not key.isdigit()):
            continue
        terms[key] = 2.0 if _CODE.match(word) else 1.0
    return terms


def rank_sentences(question: str, passages: Sequence[Passage], embed: Callable[[list[str]], np.ndarray]) -> list[Quote]:
    """Every sentence of the passages, scored against the question, best first.

    Args:
        question: the user's question.
        passages: the evidence, best-ranked first.
        embed: texts → unit vectors, shape ``(len(texts), dims)`` (the Topic's embedding model).

    Returns:
        One :class:`Quote` per sentence (at most :data:`MAX_CANDIDATES`), sorted by score, highest first.
    """
    found = [(p, n, s) for p in sorted(passages, key=lambda p: p.rank) for n, s in enumerate(split_sentences(p.text))]
    found = found[:MAX_CANDIDATES]
    if not found:
        return []
    vectors = embed([question, *(s for _, _, s in found)])
    cosine = vectors[1:] @ vectors[0]
    words = [{w.lower() for w in _WORD.findall(s)} for _, _, s in found]
    overlap = _term_overlap(question_terms(question), words)
    quotes = [
        Quote(p.code, s, p.rank, n, float(cosine[i]) + KEYWORD_WEIGHT * overlap[i] + RANK_WEIGHT / (p.rank + 1))
        for i, (p, n, s) in enumerate(found)
    ]
    return sorted(quotes, key=lambda q: -q.score)


def _term_overlap(terms: dict[str, float], sentences: list[set[str]]) -> list[float]:
    """Per sentence, the idf-weighted share (0..1) of the question's terms it contains.

    The idf is BM25's, ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the candidate sentences
    (Robertson and Zaragoza, 2009), so a word every sentence has counts for little.
    """
    if not terms:
        return [0.0] * len(sentences)
    n = len(sentences)
    weight = {t: w * math.log(1 + (n - (df := sum(t in s for s in sentences)) + 0.5) / (df + 0.5)) for t, w in terms.items()}
    total = sum(weight.values()) or 1.0
    return [sum(w for t, w in weight.items() if t in s) / total for s in sentences]


def choose_quotes(ranked: Sequence[Quote], *, max_quotes: int = MAX_QUOTES) -> list[Quote]:
    """The quotes an answer shows, in reading order.

    Among the sentences scoring within :data:`SCORE_MARGIN` of the best, the best sentence of each
    passage comes first (a multi-hop question's second fact usually stands in another passage than
    the one closest to the question), then the next best, at most :data:`MAX_QUOTES_PER_PASSAGE` from
    one passage. They are shown by passage rank and by their place in the passage, so consecutive
    sentences read as they were written.

    Args:
        ranked: scored sentences, best first (:func:`rank_sentences`).
        max_quotes: most sentences kept.
    """
    if not ranked:
        return []
    close = [q for q in ranked if q.score >= ranked[0].score - SCORE_MARGIN]
    kept: list[Quote] = []
    for q in close:  # the best sentence of each passage
        if len(kept) < max_quotes and all((k.code, k.rank) != (q.code, q.rank) for k in kept):
            kept.append(q)
    for q in close:  # then the next best
        if (
            len(kept) < max_quotes
            and q not in kept
            and sum((k.code, k.rank) == (q.code, q.rank) for k in kept) < MAX_QUOTES_PER_PASSAGE
        ):
            kept.append(q)
    first_seen = {key: n for n, key in enumerate(dict.fromkeys((q.code, q.rank) for q in sorted(kept, key=lambda q: q.rank)))}
    return sorted(kept, key=lambda q: (first_seen[(q.code, q.rank)], q.position))


#: The ``source - target: `` head of a key relationship line (``graph.communities._relationship_line``).
_RELATIONSHIP_HEAD = re.compile(r"^[^:\n]{1,80} - [^:\n]{1,80}: (?=\S)")


def theme_quotes(
    question: str,
    passages: Sequence[Passage],
    embed: Callable[[list[str]], np.ndarray],
    *,
    max_themes: int = MAX_QUOTES,
    overview: bool = False,
) -> list[tuple[str, Quote]]:
    """The best sentence of each community summary, titled: an overview answer without a language model.

    A question about a whole corpus ("what are the main themes?") is answered by what the best
    communities are about, so each summary contributes one line, its title with the sentence of it
    closest to the question, in the summaries' retrieval order (GLOBAL's ranking), at most ``max_themes``.
    With ``overview`` (a question that names no subject, :func:`is_overview`)
    the question says nothing to be close to: each summary gives its most representative sentence instead,
    the one closest to the mean of its sentences' vectors.

    Args:
        question: the user's question.
        passages: community report texts as GLOBAL renders them (``Community: <title>`` then ``- <point>``
            lines, see :mod:`ragtopics.graph.global_search`), best first.
        embed: texts → L2-normalised vectors (the embedding model).
        overview: rank each summary's sentences by their centroid, not by the question.

    Returns:
        ``(title, quote)`` pairs; a summary with no sentence is left out.
    """
    titled: list[tuple[str, Passage]] = []
    for p in passages[:max_themes]:
        first, _, rest = p.text.partition("\n")
        title = first.removeprefix("Community:").strip() if first.startswith("Community:") else ""
        lines = [line.removeprefix("- ") for line in (rest if title else p.text).splitlines()]
        body = "\n".join(_RELATIONSHIP_HEAD.sub("", line) for line in lines)
        titled.append((title, Passage(p.code, body, p.rank)))
    out: list[tuple[str, Quote]] = []
    for title, passage in titled:
        ranked = _central_sentences(passage, embed) if overview else rank_sentences(question, [passage], embed)
        if ranked:
            out.append((title, ranked[0]))
    return out


def point_index(text: str, sentence: str) -> int | None:
    """Which point of a community report text (``Community: <title>`` then ``- <point>`` lines) a quoted sentence
    comes from: its 0-based index among the point lines, or None when no point holds it.

    Args:
        text: the report text as GLOBAL renders it.
        sentence: a quote's text (a sentence of one point, possibly clipped with ``…``).
    """
    wanted = " ".join(sentence.removesuffix("…").split())
    points = [line[2:] for line in text.splitlines() if line.startswith("- ")]
    for n, point in enumerate(points):
        said = " ".join(_RELATIONSHIP_HEAD.sub("", point).split())
        if wanted and (wanted in said or said in wanted):
            return n
    return None


def _central_sentences(passage: Passage, embed: Callable[[list[str]], np.ndarray]) -> list[Quote]:
    """A passage's sentences by cosine to the mean of their vectors (the most representative first)."""
    sentences = split_sentences(passage.text)[:MAX_CANDIDATES]
    if not sentences:
        return []
    vectors = np.asarray(embed(sentences))
    scores = vectors @ vectors.mean(axis=0)
    quotes = [Quote(passage.code, s, passage.rank, n, float(scores[n])) for n, s in enumerate(sentences)]
    return sorted(quotes, key=lambda q: -q.score)


def compose_themes(themes: Sequence[tuple[str, Quote]], *, lead: str, note: str) -> str:
    """The overview answer: a lead line, one block per community (``> **title**: sentence [S1]``), a note line."""
    if not themes:
        return ""
    blocks = [f"> **{title}**: {q.text}" if title else f"> {q.text}" for title, q in themes]
    blocks = [b + (f" [{q.code}]" if q.code else "") for b, (_, q) in zip(blocks, themes, strict=True)]
    return "\n\n".join([lead, *blocks, *([note] if note else [])])


def compose_answer(quotes: Sequence[Quote], *, lead: str, note: str, pictures: str = "") -> str:
    """The answer text: a lead line, the quotes (consecutive sentences of one passage joined), a note line.

    Args:
        quotes: the chosen sentences in reading order (:func:`choose_quotes`).
        lead: the line above the quotes, e.g. ``From [S1] and [S3]:``.
        note: the line under them saying why the answer is quoted ("" for none).
        pictures: picture codes (``[P1] [P2]``) shown between the quotes and the note ("" for none).

    Returns:
        Markdown: each group of sentences as a block quote ended by its citation code
        (``[S1]``; none for a passage without a code); "" when there is no quote.
    """
    if not quotes:
        return ""
    groups: list[list[Quote]] = []
    for q in quotes:
        last = groups[-1][-1] if groups else None
        if last is not None and (last.code, last.rank) == (q.code, q.rank) and q.position == last.position + 1:
            groups[-1].append(q)
        else:
            groups.append([q])
    blocks = [f"> {' '.join(q.text for q in g)}" + (f" [{g[0].code}]" if g[0].code else "") for g in groups]
    return "\n\n".join([lead, *blocks, *([pictures] if pictures else []), *([note] if note else [])])


def lead_line(codes_files: Sequence[tuple[str, list[str]]], *, fallback: str) -> str:
    """``From [S1] and [S3]:``: one citation per distinct file the quotes come from.

    Args:
        codes_files: ``(code, file names)`` of the quoted passages, in reading order.
        fallback: the line when no quoted passage names a file (``From the community summaries:``).
    """
    seen: dict[str, str] = {}
    for code, files in codes_files:
        for name in files:
            seen.setdefault(name, code)
    codes = list(dict.fromkeys(seen.values()))
    if not codes:
        return fallback
    cited = [f"[{c}]" for c in codes]
    joined = cited[0] if len(cited) == 1 else ", ".join(cited[:-1]) + " and " + cited[-1]
    return f"From {joined}:"
