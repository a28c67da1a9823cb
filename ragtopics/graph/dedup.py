"""Deduplication: is an extracted entity already in the graph (or named twice in this batch)?

:func:`deduplicate` applies the specification's rules in order (Phase A, step 6):

1. ``same_name``: the same name and type;
2. ``normalized``: the same name ignoring case, spaces and punctuation (:func:`normalize_name`);
   rules 1 and 2 are one step, since :func:`entity_id_for` already gives both the same id;
3. ``alias``: a name equals a recorded alias of the other entity; ``abbreviation``: an
   all-capital short name equals the initials of a multi-word name ("IBM",
   "International Business Machines"; with or without small words: "USA", "United
   States of America"). A surname alone ("Tolkien" for "J. R. R. Tolkien") is *not*
   an abbreviation: it names many people; at best the model decides;
4. ``fuzzy``: :func:`fuzzy_score` (the rapidfuzz Indel ratio of the normalised names, order
   kept) at or above the threshold ("Tolkein", "Tolkien"), or the same words in another
   order ("Curie, Marie", "Marie Curie"; score 1.0). Candidates come from blocking
   (:func:`fuzzy_candidates`), never from all pairs;
5. ``model``: pairs in the grey band go to the Deduplication model, several per call
   (:func:`ask_model`); without a model they are not merged and are listed as unclear.

Why the plain ratio and not WRatio or token_sort_ratio: WRatio scores a name contained in a
longer one at 90 ("Paris", "Paris Hilton"), which is the homonym case; token_sort_ratio
re-sorts words, so a typo in a first letter reorders them and a one-letter slip scores 45
("Dale Brown", "Dale vBrown"). Word order alone is handled by its own exact key instead.

Homonym guards: entities of different types never merge (not even with the same name:
"Jaguar" ANIMAL, "Jaguar" ORGANIZATION); names with different numbers never merge by
fuzziness ("Pump P-12", "Pump P-13"; "World War I", "World War II"); a name that only adds
words, or only an "s", to the other is unclear, not a merge ("Premier of South Australia",
"Deputy Premier of South Australia"). With an embedder and both descriptions present, a
pair of rules 3-5 whose descriptions are clearly different is kept apart, and one whose
"name: description" embeddings disagree is unclear rather than merged.

Two graph entities (``existing``) are never merged with each other; a group keeps at most
one. The kept name is the existing entity's, else the first incoming one's.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, Field
from rapidfuzz import fuzz, process
from rapidfuzz.distance import OSA, Levenshtein

from ragtopics.errors import ModelUnavailableError
from ragtopics.graph.model import Entity, MergeRecord, normalize_name
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import DEDUPLICATION, PromptTemplate
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: Fuzzy score (0-1) from which two names of the same type merge without asking. One typo in
#: a name of ten letters or more scores >= 0.90; two names of the HotpotQA titles that differ
#: by more than a number score <= 0.88 (measured; see ``bench/dedup.py``).
FUZZY_THRESHOLD = 0.90
#: Lower end of the grey band: pairs from here up to the threshold are unclear (model or list).
#: One typo in a name of five to nine letters lands here ("Wambion", "Wamboin": 0.86).
FUZZY_GREY_MIN = 0.80
#: Shortest name (letters and digits) in which two swapped neighbours merge below the threshold
#: ("Tolkein", "Tolkien": 0.86). A swap is the commonest slip and seldom turns one real name into
#: another, unlike a changed letter ("Gambia", "Zambia"; "Iran", "Iraq"), which stays unclear.
MIN_SWAP_CHARS = 6
#: Cosine similarity of the two descriptions (all-MiniLM-L6-v2) below which they are clearly
#: about different things: kept apart without asking. Low on purpose: two sentences about one
#: thing from different chunks score 0.06-0.45 (HotpotQA, 1st-50th percentile).
HOMONYM_MAX_DESCRIPTION_SIMILARITY = 0.10
#: Cosine similarity of ``"name: description"`` below which a rule 3-4 match is unclear rather
#: than merged. True matches with different descriptions score 0.51-0.63 (IBM, Tolkein, Pump
#: P-12); "ECB" (a cricket board) against the European Central Bank 0.36.
NAME_DESCRIPTION_MIN_SIMILARITY = 0.45
#: Longest merged description in characters (about the bundled embedder's 256-token window).
MAX_DESCRIPTION_CHARS = 1000
#: Longest description shown to the model per name.
MODEL_DESCRIPTION_CHARS = 300
#: Candidate pairs per Deduplication model call.
MODEL_BATCH_PAIRS = 8
#: Largest word block compared by fuzzy matching; a more common word ("film", "river") says
#: too little to be worth its square, and one-typo pairs are found by deletion keys anyway.
MAX_WORD_BLOCK = 1000
#: Longest normalised name that gets one-deletion keys (longer names are found by their words).
MAX_DELETION_KEY_CHARS = 64
#: Words that initials skip ("United States of America" → USA) and word blocks ignore.
SMALL_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "at",
        "de",
        "del",
        "der",
        "des",
        "di",
        "die",
        "du",
        "für",
        "in",
        "la",
        "le",
        "of",
        "on",
        "the",
        "to",
        "und",
        "van",
        "von",
    ]
)

Embed = Callable[[list[str]], np.ndarray]


class DedupDecision(BaseModel):
    """The model's verdict on one numbered pair."""

    pair: int = Field(description="The pair's number as listed, starting at 1.")
    same: bool = Field(description="True only when both names certainly mean the same thing.")
    reason: str = Field("", description="A few words on why.")


class DedupDecisions(BaseModel):
    """The Deduplication model's typed reply: one decision per listed pair."""

    decisions: list[DedupDecision] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CandidatePair:
    """Two names of one type that may mean the same thing, as the model is shown them.

    Attributes:
        name, other: the two names.
        type: their shared type.
        description, other_description: their descriptions (may be empty).
        score: :func:`fuzzy_score` of the names (0-1).
        reason: why the pair is unclear (``grey band``, ``adds words``, ...).
    """

    name: str
    other: str
    type: str
    description: str
    other_description: str
    score: float
    reason: str


class UnclearPair(NamedTuple):
    """A pair left unmerged because neither the rules nor a model decided it."""

    name: str
    other: str
    type: str
    score: float
    reason: str


class KeptApart(NamedTuple):
    """A pair with matching or close names kept apart by a homonym guard."""

    name: str
    other: str
    reason: str


@dataclass(frozen=True, slots=True)
class DedupResult:
    """What :func:`deduplicate` decided.

    Attributes:
        entities: one merged entity per group holding incoming entities (existing ones that
            gained something keep their id), in order: existing order, then incoming order.
        mapping: every incoming entity id → the id it is kept under.
        merges: one record per distinct incoming name merged into another name (none for the
            first mention of a new entity); ``kept`` is the group's canonical name, ``rule`` and
            ``score`` those of the comparison that joined the name's group ("I.B.M." joining
            with "IBM" by abbreviation is recorded as an abbreviation).
        unclear: pairs in the grey band that no model decided (not merged).
        kept_apart: close pairs held apart by a guard (type, descriptions, existing twice).
    """

    entities: list[Entity]
    mapping: dict[str, str]
    merges: list[MergeRecord]
    unclear: list[UnclearPair]
    kept_apart: list[KeptApart] = field(default_factory=list)


DedupModel = Callable[[list[CandidatePair]], DedupDecisions]


# ---------------------------------------------------------------------------- name forms


_PUNCTUATION = re.compile(r"[\W_]+")
_ASCII_PUNCTUATION = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isalnum()})
_DIGITS = re.compile(r"\d+")
_CAPITAL_WORD = re.compile(r"\b[IVXLC]+\b")
_ROMAN = re.compile(r"C{0,3}(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")
_ABBREVIATION_MARKS = re.compile(r"[.&\s]")
#: First letters of the words of a name form that do not start with a digit; and of those that are not small words.
_FIRST_LETTERS = re.compile(r"(?:^| )([^\W\d])")
_CONTENT_FIRST_LETTERS = re.compile(r"(?:^| )(?!(?:" + "|".join(sorted(SMALL_WORDS)) + r")(?: |$))([^\W\d])")


def name_form(name: str) -> str:
    """A name for fuzzy scoring: NFKC, case-folded, punctuation as single spaces (``"Curie, Marie"`` → ``"curie marie"``).

    Without its spaces it is :func:`normalize_name` of the name.
    """
    if name.isascii():  # the same result, three times faster: NFKC and casefold change nothing ASCII but case
        return " ".join(name.lower().translate(_ASCII_PUNCTUATION).split())
    return " ".join(_PUNCTUATION.sub(" ", unicodedata.normalize("NFKC", name).casefold()).split())


def fuzzy_score(form: str, other: str) -> float:
    """rapidfuzz's normalised Indel similarity of two :func:`name_form` strings, 0-1."""
    return fuzz.ratio(form, other) / 100.0


def number_key(name: str) -> tuple[str, ...]:
    """The numbers a name carries: digit runs, and Roman numerals written as capital words (``"Louis XIV"`` → ``("XIV",)``).

    Roman numerals use I, V, X, L and C only (D and M are more often initials, as in "DC"),
    and a lone letter counts only when it is I, V or X.
    """
    digits = [d.lstrip("0") or "0" for d in _DIGITS.findall(name)]
    romans = [w for w in _CAPITAL_WORD.findall(name) if _ROMAN.fullmatch(w) and (len(w) > 1 or w in "IVX")]
    return tuple(sorted(digits + romans))


def initials(name: str) -> set[str]:
    """Lower-case initials of a multi-word name, with and without small words; empty for one word.

    Words are split at spaces and punctuation ("Hewlett-Packard" → "hp"); words that start with a
    digit are skipped.
    """
    return _initials(name_form(name))


def _initials(form: str) -> set[str]:
    letters = _FIRST_LETTERS.findall(form)
    if len(letters) < 2:
        return set()
    found = {"".join(letters)}
    content = _CONTENT_FIRST_LETTERS.findall(form)
    if len(content) >= 2:
        found.add("".join(content))
    return found


def is_abbreviation(name: str) -> bool:
    """Whether a name looks like an abbreviation: 2-10 capitals, with dots or ``&`` (``IBM``, ``U.S.``, ``U. S.``, ``AT&T``)."""
    if len(name) > 20 or not name.isupper():
        return False
    parts = name.split()
    if len(parts) > 1 and any(len(p.rstrip(".")) > 1 for p in parts):  # "U. S. A." is one, "DEMON DICE" is not
        return False
    letters = _ABBREVIATION_MARKS.sub("", name)
    return 2 <= len(letters) <= 10 and letters.isalpha()


def fuzzy_verdict(name: str, other: str, score: float, *, threshold: float = FUZZY_THRESHOLD) -> tuple[str, str] | None:
    """Rule 4 for one pair of names of the same type: ``("merge"|"unclear", why)``, or None for no match.

    Args:
        name, other: the two names as written.
        score: their :func:`fuzzy_score` (0-1).
        threshold: the merge threshold (0-1); the grey band starts at :data:`FUZZY_GREY_MIN`.
    """
    return _verdict(name, other, name_form(name), name_form(other), score, threshold)


def _verdict(name: str, other: str, form: str, other_form: str, score: float, threshold: float) -> tuple[str, str] | None:
    if score < min(FUZZY_GREY_MIN, threshold) or number_key(name) != number_key(other):
        return None
    words, other_words = form.split(), other_form.split()
    if len(words) != len(other_words):
        fewer, more = (words, other_words) if len(words) < len(other_words) else (other_words, words)
        if Counter(fewer) <= Counter(more):
            return "unclear", "adds words"
    elif sorted(map(_singular, words)) == sorted(map(_singular, other_words)):
        return "unclear", "singular and plural"
    if score >= threshold:
        return "merge", "fuzzy"
    if is_swap(form.replace(" ", ""), other_form.replace(" ", "")):
        return "merge", "swapped letters"
    return "unclear", "grey band"


def is_swap(compact: str, other: str) -> bool:
    """Whether two names of :data:`MIN_SWAP_CHARS` or more characters differ only by two neighbours swapped ("Tolkein")."""
    return (
        len(compact) == len(other) >= MIN_SWAP_CHARS
        and OSA.distance(compact, other, score_cutoff=1) == 1
        and Levenshtein.distance(compact, other, score_cutoff=2) == 2
    )


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


# ---------------------------------------------------------------------------- blocking


def fuzzy_candidates(
    names: Sequence[str], probe: Sequence[bool] | None = None, *, min_score: float = FUZZY_GREY_MIN
) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of names that may score at least ``min_score``, found by blocking.

    Three kinds of block, none quadratic in ``len(names)``:

    * one-deletion keys of the normalised name (each name and every copy with one character
      removed): two names share one exactly when they are at most one edit apart
      (substitution, insertion, deletion or swap of neighbours), however short;
    * the sorted words: the same words in another order;
    * each word of three or more letters, in blocks of at most :data:`MAX_WORD_BLOCK`
      names, scored with ``rapidfuzz.process.cdist`` (only pairs reaching ``min_score``):
      longer names with more than one edit.

    Keys are compared by their 64-bit hash; a collision only adds a candidate, which the
    verdict then rejects.

    Args:
        names: the names.
        probe: which names to find partners for (True); a pair needs one. All when None.
        min_score: the word blocks' score cutoff (0-1).

    Returns:
        The candidate pairs, sorted (not yet checked for type or verdict).
    """
    probe_arr = np.ones(len(names), dtype=bool) if probe is None else np.asarray(probe, dtype=bool)
    codes, _ = _candidates([name_form(n) for n in names], probe_arr, min_score)
    return [divmod(c, len(names)) for c in codes.tolist()]


def _candidates(
    forms: list[str], probe: np.ndarray, min_score: float, common: frozenset[str] = frozenset()
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs as sorted unique codes ``i * len(forms) + j`` with ``i < j``: all, and those of the same words.

    ``common``: words whose block is known to be larger than :data:`MAX_WORD_BLOCK` (counted in the
    graph, of which only a part is here): left out as such a block is.
    """
    n = len(forms)
    found = [_pairs_in_blocks(*_deletion_hashes([f.replace(" ", "") for f in forms]), probe, n)]
    sorted_keys: list[int] = []
    sorted_owners: list[int] = []
    word_keys: list[int] = []
    word_owners: list[int] = []
    for i, form in enumerate(forms):
        if " " in form:
            split = form.split()
            sorted_keys.append(hash(" ".join(sorted(split))))
            sorted_owners.append(i)
            keys = [hash(w) for w in _words(form) if w not in common]
            word_keys += keys
            word_owners += [i] * len(keys)
    reordered = _pairs_in_blocks(np.array(sorted_keys, dtype=np.int64), np.array(sorted_owners, dtype=np.int64), probe, n)
    found.append(
        _word_block_pairs(np.array(word_keys, dtype=np.int64), np.array(word_owners, dtype=np.int64), probe, forms, min_score)
    )
    return np.unique(np.concatenate([*found, reordered])), np.unique(reordered)


#: Polynomial hashing of the one-deletion keys (mod 2**64): base, and its powers up to the longest key.
_BASE = 0x100000001B3
_POWERS = np.array([pow(_BASE, k, 2**64) for k in range(MAX_DELETION_KEY_CHARS + 2)], dtype=np.uint64)
_DELETION_ROWS = 8192


def _deletion_hashes(compacts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every name (up to :data:`MAX_DELETION_KEY_CHARS` characters) and of its one-deletion copies, with owners.

    Vectorised: a key's hash is its characters as a base-:data:`_BASE` number, left-aligned to
    :data:`MAX_DELETION_KEY_CHARS` digits, so the copy without character ``k`` is
    ``prefix[k] * B^(W-k) + B * suffix[k+1]`` from one prefix and one suffix pass per row.
    """
    lengths = np.fromiter(map(len, compacts), dtype=np.int64, count=len(compacts))
    usable = np.flatnonzero((lengths > 0) & (lengths <= MAX_DELETION_KEY_CHARS))
    usable = usable[np.argsort(lengths[usable], kind="stable")]  # rows of similar length: little padding
    hashes, owners = [np.zeros(0, dtype=np.uint64)], [np.zeros(0, dtype=np.int64)]
    base = np.uint64(_BASE)
    for start in range(0, len(usable), _DELETION_ROWS):
        rows = usable[start : start + _DELETION_ROWS]
        width = int(lengths[rows[-1]])
        chars = np.array([compacts[i] for i in rows.tolist()], dtype=f"<U{width}").view(np.uint32)
        chars = chars.reshape(len(rows), width).astype(np.uint64)
        prefix = np.zeros((len(rows), width + 1), dtype=np.uint64)
        suffix = np.zeros((len(rows), width + 1), dtype=np.uint64)
        for k in range(width):
            prefix[:, k + 1] = prefix[:, k] * base + chars[:, k]
            back = width - 1 - k
            suffix[:, back] = chars[:, back] * _POWERS[k] + suffix[:, back + 1]
        keys = prefix[:, :width] * _POWERS[width - np.arange(width)] + base * suffix[:, 1:]
        valid = np.arange(width) < lengths[rows][:, None]
        valid[:, :-1] &= chars[:, :-1] != chars[:, 1:]  # in a run of one letter every deletion gives one key: keep the last
        scale = _POWERS[MAX_DELETION_KEY_CHARS - width]  # align every chunk to the same width
        hashes += [keys[valid] * scale, suffix[:, 0] * scale]
        owners += [np.broadcast_to(rows[:, None], keys.shape)[valid], rows]
    return np.concatenate(hashes).view(np.int64), np.concatenate(owners)


def _blocks(hashes: np.ndarray, owners: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Owners sorted by key hash, and the start and size of each run of one hash."""
    order = np.argsort(hashes)
    hashes, owners = hashes[order], owners[order]
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]]) if len(hashes) else np.zeros(0, dtype=np.int64)
    return owners, starts, np.diff(np.r_[starts, len(hashes)])


def _pairs_in_blocks(
    hashes: np.ndarray, owners: np.ndarray, probe: np.ndarray, n: int, *, max_size: int | None = None
) -> np.ndarray:
    """Every pair within each block (blocks of two vectorised; larger ones are rare and small)."""
    owners, starts, sizes = _blocks(hashes, owners)
    parts = [_codes(owners[starts[sizes == 2]], owners[starts[sizes == 2] + 1], probe, n)]
    first: list[int] = []
    second: list[int] = []
    for start, size in zip(starts[sizes > 2].tolist(), sizes[sizes > 2].tolist()):
        if max_size is None or size <= max_size:
            members = sorted(set(owners[start : start + size].tolist()))
            for x, i in enumerate(members):
                first += [i] * (len(members) - x - 1)
                second += members[x + 1 :]
    parts.append(_codes(np.array(first, dtype=np.int64), np.array(second, dtype=np.int64), probe, n))
    return np.concatenate(parts)


#: Word blocks up to this size pass all their pairs on unscored (scoring a pair later costs less than a cdist call).
_SMALL_WORD_BLOCK = 8


def _word_block_pairs(
    hashes: np.ndarray, owners: np.ndarray, probe: np.ndarray, forms: list[str], min_score: float
) -> np.ndarray:
    """Pairs sharing a word: all of a small block; those of a block up to :data:`MAX_WORD_BLOCK` that reach ``min_score``."""
    n = len(forms)
    parts = [_pairs_in_blocks(hashes, owners, probe, n, max_size=_SMALL_WORD_BLOCK)]
    owners, starts, sizes = _blocks(hashes, owners)
    for start, size in zip(starts[sizes > _SMALL_WORD_BLOCK].tolist(), sizes[sizes > _SMALL_WORD_BLOCK].tolist()):
        if size > MAX_WORD_BLOCK:
            continue
        block = owners[start : start + size]
        queries = block[probe[block]]
        scores = process.cdist(
            [forms[i] for i in queries.tolist()],
            [forms[j] for j in block.tolist()],
            scorer=fuzz.ratio,
            score_cutoff=min_score * 100,
            dtype=np.uint8,
            workers=1,
        )
        q, c = np.nonzero(scores)
        parts.append(_codes(queries[q], block[c], probe, n))
    return np.concatenate(parts)


def _codes(a: np.ndarray, b: np.ndarray, probe: np.ndarray, n: int) -> np.ndarray:
    keep = (a != b) & (probe[a] | probe[b])
    return np.minimum(a, b)[keep] * n + np.maximum(a, b)[keep]


# ---------------------------------------------------------------------------- stored blocking keys
#
# An upload compares its entities with the graph's. Reading every stored entity for that makes an
# upload's cost grow with the graph (0.3-0.6 s a file at 10,884 entities, so a corpus's ingest grows
# with its square). Instead each graph entity stores the blocking keys of its name (a FalkorDB
# array property with a range index) and an upload fetches only the stored entities that share a
# key with one of its own: every one that any rule could pair with an incoming entity.


@dataclass(frozen=True, slots=True)
class PartnerKeys:
    """What an upload looks up to find the stored entities its entities may pair with.

    Attributes:
        blocks: stored block keys (:func:`block_keys`) that make a stored entity a candidate:
            the incoming names' one-deletion keys and sorted words, and the initials key of each
            incoming abbreviation (a stored long form with those initials).
        words: the incoming names' word keys, with their words; a word shared by more than
            :data:`MAX_WORD_BLOCK` stored names is not looked up, and deduplication is told to
            leave its block out (:class:`Partners`), as it leaves out such a block of the whole graph.
        name_keys: :func:`normalize_name` keys a stored entity's name may have: the incoming
            names', their aliases' (rule 3, alias) and their initials (a stored abbreviation).
        alias_keys: keys a stored entity's aliases may hold: the incoming names' (rule 3, alias).
    """

    blocks: list[int]
    words: dict[int, str]
    name_keys: list[str]
    alias_keys: list[str]


@dataclass(frozen=True, slots=True)
class Partners:
    """The stored entities an upload's entities may pair with (:meth:`GraphStore.dedup_partners`).

    Pass both to :func:`deduplicate` (``existing=entities, common_words=common_words``): it then
    decides as it would over every stored entity.

    Attributes:
        entities: the stored entities, by id.
        common_words: words of the upload's names that more than :data:`MAX_WORD_BLOCK` stored
            names share (their stored entities were not fetched for that word).
    """

    entities: list[Entity]
    common_words: frozenset[str]


def _stable_key(kind: str, text: str) -> int:
    """A signed 64-bit key of ``text`` that is the same in every process (Python's ``hash`` of a string is not)."""
    return int.from_bytes(hashlib.blake2b(f"{kind}\x00{text}".encode(), digest_size=8).digest(), "little", signed=True)


def _words(form: str) -> list[str]:
    """The words of a :func:`name_form` that word blocks compare by (three letters or more, no small words)."""
    return [w for w in sorted(set(form.split())) if len(w) >= 3 and w not in SMALL_WORDS]


def _sorted_words_key(form: str) -> int:
    """The stable key of a name's words in sorted order (the same words in another order share it)."""
    return _stable_key("s", " ".join(sorted(form.split())))


def block_keys(names: Sequence[str]) -> list[list[int]]:
    """The blocking keys stored on each entity, as signed 64-bit integers (one list per name, sorted, unique).

    The keys of :func:`fuzzy_candidates` and of the abbreviation rule, made stable across processes:
    the name's one-deletion keys (itself and every copy with one character removed, up to
    :data:`MAX_DELETION_KEY_CHARS`; two names share one exactly when at most one edit apart),
    its words of three or more letters, its sorted words and its initials (all of a name of
    two or more words). Keys of different kinds never meet: a collision only adds a candidate.
    """
    forms = [name_form(n) for n in names]
    hashes, owners = _deletion_hashes([f.replace(" ", "") for f in forms])
    keys: list[set[int]] = [set() for _ in forms]
    for h, owner in zip(hashes.tolist(), owners.tolist()):
        keys[owner].add(h)
    for i, form in enumerate(forms):
        if " " in form:
            keys[i].update(_stable_key("w", w) for w in _words(form))
            keys[i].add(_sorted_words_key(form))
            keys[i].update(_stable_key("i", k) for k in _initials(form))
    return [sorted(k) for k in keys]


def long_form_keys(names: Iterable[str]) -> list[int]:
    """The initials keys (see :func:`block_keys`) that find the long forms of those of ``names`` that are abbreviations.

    The abbreviation rule needs every long form of an abbreviation, stored or incoming: with
    several it is unclear which one is meant.
    """
    keys = set()
    for name in names:
        key = normalize_name(name)
        if 2 <= len(key) <= 10 and is_abbreviation(name):
            keys.add(_stable_key("i", key))
    return sorted(keys)


def partner_keys(incoming: Sequence[Entity]) -> PartnerKeys:
    """The look-ups that find every stored entity a rule could pair with one of ``incoming`` (see :class:`PartnerKeys`)."""
    names = list(dict.fromkeys(e.name for e in incoming))
    forms = [name_form(n) for n in names]
    hashes, _ = _deletion_hashes([f.replace(" ", "") for f in forms])
    blocks = set(hashes.tolist())
    words: dict[int, str] = {}
    name_keys: set[str] = set()
    for _name, form in zip(names, forms):
        key = form.replace(" ", "")
        name_keys.add(key)
        if " " in form:
            words.update((_stable_key("w", w), w) for w in _words(form))
            blocks.add(_sorted_words_key(form))
            name_keys.update(_initials(form))
    blocks.update(long_form_keys(names))
    for entity in incoming:
        name_keys.update(normalize_name(a) for a in entity.aliases)
    alias_keys = {form.replace(" ", "") for form in forms}
    return PartnerKeys(sorted(blocks), dict(sorted(words.items())), sorted(name_keys - {""}), sorted(alias_keys - {""}))


# ---------------------------------------------------------------------------- the steps


def deduplicate(
    incoming: list[Entity],
    existing: list[Entity],
    *,
    embed: Embed | None = None,
    model: DedupModel | None = None,
    fuzzy_threshold: float = FUZZY_THRESHOLD,
    common_words: Iterable[str] = (),
    apart: Iterable[frozenset[tuple[str, str]]] = (),
    trace: Trace | None = None,
) -> DedupResult:
    """Merge incoming entities into each other and into existing ones, rule by rule (see the module docstring).

    Args:
        incoming: entities of this upload, in the order found (names may repeat).
        existing: entities already in the graph, canonical first; never merged with each other.
        embed: texts → L2-normalised vectors (the bundled MiniLM in the product); enables the
            description guards. None: names alone decide.
        model: decides unclear pairs, several per call (:func:`ask_model` bound to a gateway).
            None: unclear pairs are not merged and are listed in ``unclear``.
        fuzzy_threshold: rule 4's merge threshold, 0-1 (:data:`FUZZY_THRESHOLD`).
        common_words: words (as in :func:`name_form`) shared by more than :data:`MAX_WORD_BLOCK`
            stored names when ``existing`` is only the part of the graph that may pair
            (:class:`Partners`): their blocks are left out, as they would be over the whole graph.
        apart: pairs of ``(normalize_name(name), TYPE)`` identities an operator split apart
            (:mod:`ragtopics.graph.corrections`): no rule and no model merges a group holding one
            with a group holding the other (noted in ``kept_apart`` as ``operator split``).
        trace: the upload's trace; gets a ``deduplicate`` step with every decision.

    Returns:
        A :class:`DedupResult`. A model call that fails leaves its pairs unclear (logged and traced).
    """
    split = apart
    with _step(trace, len(incoming), len(existing)) as event:
        nodes, node_of, kept_apart = _group_by_name(incoming, existing)
        groups = _Groups(nodes, frozenset(split))
        edges = _rule_edges(nodes) + _fuzzy_edges(nodes, fuzzy_threshold, kept_apart, frozenset(common_words))
        if embed is not None:
            kept_apart += _check_descriptions(nodes, edges, embed)
        for edge in sorted((e for e in edges if e.verdict == "merge"), key=lambda e: (_RANK[e.rule], -e.score, e.a, e.b)):
            if groups.is_split(edge.a, edge.b):
                kept_apart.append(KeptApart(nodes[edge.a].head.name, nodes[edge.b].head.name, "operator split"))
            elif not groups.union(edge.a, edge.b, edge.rule, edge.score) and groups.is_blocked(edge.a, edge.b):
                kept_apart.append(KeptApart(nodes[edge.a].head.name, nodes[edge.b].head.name, "both already in the graph"))
        open_pairs = _open_pairs(groups, [e for e in edges if e.verdict == "unclear"])
        event.data["open_pairs"] = len(open_pairs)  # the pairs the model is asked about, MODEL_BATCH_PAIRS a call
        if model is not None:
            kept_apart += _decide_by_model(nodes, groups, open_pairs, model, event.data)
        still_open = _open_pairs(groups, [e for e in open_pairs if e.verdict == "unclear"])
        unclear = [
            UnclearPair(nodes[e.a].head.name, nodes[e.b].head.name, nodes[e.a].type, round(e.score, 4), e.reason)
            for e in still_open
        ]
        result = _result(nodes, groups, node_of, incoming, unclear, kept_apart)
        event.data.update(
            merges=[[m.kept, m.merged, m.rule, round(m.score, 3)] for m in result.merges],
            unclear=[list(u) for u in unclear],
            kept_apart=[list(k) for k in kept_apart],
            entities=len(result.entities),
        )
    log.debug("deduplicate: %s incoming, %s merges, %s unclear", len(incoming), len(result.merges), len(unclear))
    return result


def ask_model(
    gateway: ModelGateway, pairs: list[CandidatePair], trace: Trace | None = None, *, template: PromptTemplate = DEDUPLICATION
) -> DedupDecisions:
    """Ask the Deduplication model about several pairs in one call.

    Args:
        gateway: the model gateway (role ``deduplication``).
        pairs: the pairs, numbered from 1 in the prompt.
        trace: records the model call.
        template: the ``deduplication`` prompt (a Topic's override, or the default).

    Returns:
        The typed decisions (pairs the model left out are simply absent).

    Raises:
        StructuredOutputError: when the reply does not fit :class:`DedupDecisions`.
        ModelUnavailableError: when the endpoint cannot be reached.
    """
    lines = "\n".join(
        f"[{n}] {_describe(p.name, p.type, p.description)}  |  {_describe(p.other, p.type, p.other_description)}"
        for n, p in enumerate(pairs, start=1)
    )
    messages = [{"role": "user", "content": template.render(pairs=lines)}]
    return gateway.structured(
        "deduplication", messages, DedupDecisions, prompt_name=template.name, trace=trace, max_tokens=64 + 48 * len(pairs)
    )


def merge_descriptions(descriptions: Iterable[str], *, max_chars: int = MAX_DESCRIPTION_CHARS) -> str:
    """The first description followed by every new sentence of the others, up to ``max_chars`` characters.

    A sentence counts as seen when its :func:`normalize_name` form was; merging stops at the
    first sentence that would not fit (a first description longer than the bound is cut).
    """
    present = [d.strip() for d in descriptions if d and not d.isspace()]
    if len(present) <= 1:  # the common case, one mention: nothing to merge
        return present[0][:max_chars] if present else ""
    kept: list[str] = []
    seen: set[str] = set()
    length = 0
    for description in present:
        for sentence in re.split(r"(?<=[.!?])\s+", description.strip()):
            key = normalize_name(sentence)
            if not key or key in seen:
                continue
            if length + len(sentence) + bool(kept) > max_chars:
                return " ".join(kept) if kept else sentence[:max_chars]
            seen.add(key)
            kept.append(sentence)
            length += len(sentence) + (len(kept) > 1)
    return " ".join(kept)


# ---------------------------------------------------------------------------- internals

_RANK = {"alias": 0, "abbreviation": 1, "fuzzy": 2}


@dataclass(slots=True)
class _Node:
    """Entities of one normalised name and type: an existing entity (with any incoming ones on it), or new ones."""

    key: str  # normalize_name of the head's name
    form: str  # name_form of the head's name
    type: str
    head: Entity
    existing: bool
    entities: list[Entity]
    incoming_names: list[str]


@dataclass(slots=True)
class _Edge:
    a: int
    b: int
    rule: str
    score: float
    verdict: str  # "merge", "unclear" or "apart"
    reason: str = ""


class _Groups:
    """Union-find over nodes; a group's root is its canonical node, and a group holds at most one existing node.

    Nodes are numbered existing first, then incoming in order of first mention, so the lowest
    number in a group is its canonical node; a union keeps the lower root.
    """

    def __init__(self, nodes: list[_Node], apart: frozenset[frozenset[tuple[str, str]]] = frozenset()):
        self.parent = list(range(len(nodes)))
        self.existing = [n.existing for n in nodes]
        self.attached: dict[int, tuple[str, float]] = {}  # node → (rule, score) of the union that attached its group
        # An operator's split keeps two names apart: each group's (name key, type) identities, kept only when needed.
        self.apart = apart
        self.names = [{(n.key, n.type)} for n in nodes] if apart else []

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def is_blocked(self, a: int, b: int) -> bool:
        """Whether two nodes are in different groups that each hold a graph entity."""
        ra, rb = self.find(a), self.find(b)
        return ra != rb and self.existing[ra] and self.existing[rb]

    def is_split(self, a: int, b: int) -> bool:
        """Whether an operator's split keeps the groups of two nodes apart (a name of one, a name of the other)."""
        if not self.apart:
            return False
        ra, rb = self.find(a), self.find(b)
        return ra != rb and any(frozenset((x, y)) in self.apart for x in self.names[ra] for y in self.names[rb])

    def union(self, a: int, b: int, rule: str, score: float) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb or (self.existing[ra] and self.existing[rb]) or self.is_split(a, b):
            return False
        keep, lose = min(ra, rb), max(ra, rb)  # node index order: existing first, then first seen
        self.parent[lose] = keep
        if self.apart:
            self.names[keep] |= self.names[lose]
        self.existing[keep] = self.existing[keep] or self.existing[lose]
        self.attached[lose] = (rule, score)
        return True


def _type(entity: Entity) -> str:
    return entity.type.strip().upper()


def _group_by_name(incoming: list[Entity], existing: list[Entity]) -> tuple[list[_Node], list[int], list[KeptApart]]:
    """Rules 1-2: one node per existing entity, incoming entities joined by (normalised name, type)."""
    nodes: list[_Node] = []
    by_key: dict[tuple[str, str], int] = {}
    for entity in existing:
        form = name_form(entity.name)
        key = (form.replace(" ", ""), _type(entity))  # = normalize_name(entity.name), computed once
        by_key.setdefault(key, len(nodes))
        nodes.append(_Node(key[0], form, key[1], entity, True, [entity], []))
    node_of: list[int] = []
    types: dict[str, str] = {}
    for entity in incoming:
        form = name_form(entity.name)
        type_ = types.get(entity.type) or types.setdefault(entity.type, _type(entity))
        key = (form.replace(" ", ""), type_)
        at = by_key.get(key)
        if at is None:
            at = by_key[key] = len(nodes)
            nodes.append(_Node(key[0], form, key[1], entity, False, [entity], [entity.name]))
        else:
            node = nodes[at]
            node.entities.append(entity)
            if entity.name not in node.incoming_names:
                node.incoming_names.append(entity.name)
        node_of.append(at)
    types_of: dict[str, list[int]] = defaultdict(list)
    for (name_key, _), i in by_key.items():
        types_of[name_key].append(i)
    apart = [
        KeptApart(nodes[i].head.name, nodes[j].head.name, f"types {nodes[i].type} and {nodes[j].type}")
        for same in types_of.values()
        if len(same) > 1
        for x, i in enumerate(same)
        for j in same[x + 1 :]
        if nodes[i].incoming_names or nodes[j].incoming_names
    ]
    return nodes, node_of, apart


def _rule_edges(nodes: list[_Node]) -> list[_Edge]:
    """Rule 3: recorded aliases, then abbreviations (an abbreviation with several long forms is unclear)."""
    aliases: dict[str, list[int]] = defaultdict(list)
    short: list[int] = []
    for i, node in enumerate(nodes):
        for entity in node.entities:
            if entity.aliases:
                for alias in {normalize_name(a) for a in entity.aliases} - {node.key, ""}:
                    aliases[alias].append(i)
        if 2 <= len(node.key) <= 10 and any(is_abbreviation(e.name) for e in node.entities):
            short.append(i)
    wanted = {nodes[i].key for i in short}
    shapes = {(key[0], len(key)) for key in wanted}
    long_forms: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(nodes if wanted else ()):
        if " " in node.form and _may_have_initials(node.form, shapes):
            for key in _initials(node.form) & wanted:
                long_forms[key].append(i)
    edges: dict[tuple[int, int], _Edge] = {}
    for i in range(len(nodes)) if aliases else ():
        for j in aliases.get(nodes[i].key, ()):
            if _may_pair(nodes, i, j):
                edges.setdefault((min(i, j), max(i, j)), _Edge(min(i, j), max(i, j), "alias", 1.0, "merge"))
    for i in short:
        matches = [j for j in long_forms.get(nodes[i].key, ()) if j != i and nodes[j].type == nodes[i].type]
        for j in matches:
            if _may_pair(nodes, i, j):
                verdict, reason = ("merge", "") if len(matches) == 1 else ("unclear", "abbreviation of several names")
                edges.setdefault((min(i, j), max(i, j)), _Edge(min(i, j), max(i, j), "abbreviation", 1.0, verdict, reason))
    return list(edges.values())


def _may_have_initials(form: str, shapes: set[tuple[str, int]]) -> bool:
    """A cheap filter before :func:`_initials`: could a name of this form have initials of one of these (first letter, length)?

    When the first word is neither a small word nor a number, both kinds of initials start
    with its letter and have at most one letter per word.
    """
    if form[0].isdigit() or form[: form.find(" ")] in SMALL_WORDS:
        return True
    return any((form[0], length) in shapes for length in range(2, form.count(" ") + 2))


def _may_pair(nodes: list[_Node], i: int, j: int) -> bool:
    return i != j and nodes[i].type == nodes[j].type and not (nodes[i].existing and nodes[j].existing)


def _fuzzy_edges(
    nodes: list[_Node], threshold: float, apart: list[KeptApart], common: frozenset[str] = frozenset()
) -> list[_Edge]:
    """Rule 4 over blocked candidates; a close pair of different types is noted as kept apart."""
    n = len(nodes)
    forms = [node.form for node in nodes]
    probe = np.fromiter((not node.existing for node in nodes), dtype=bool, count=n)
    cutoff = min(FUZZY_GREY_MIN, threshold) * 100
    codes, reordered = _candidates(forms, probe, cutoff / 100, common)
    first, second = np.divmod(codes, n)
    scores = process.cpdist(
        [forms[i] for i in first.tolist()], [forms[j] for j in second.tolist()], scorer=fuzz.ratio, score_cutoff=cutoff, workers=1
    )
    close = (scores > 0) | np.isin(codes, reordered)
    edges = []
    for i, j in zip(first[close].tolist(), second[close].tolist()):
        a, b = nodes[i], nodes[j]
        score = fuzz.ratio(a.form, b.form) / 100  # again, in double precision, for the record
        if (a.existing and b.existing) or a.key == b.key:  # the same normalised name was decided by type already
            continue
        found: tuple[str, str] | None
        if sorted(a.form.split()) == sorted(b.form.split()):
            score, found = 1.0, ("merge", "same words")
        else:
            found = _verdict(a.head.name, b.head.name, a.form, b.form, score, threshold)
        if found is None:
            continue
        if a.type != b.type:
            if found[0] == "merge":
                apart.append(KeptApart(a.head.name, b.head.name, f"types {a.type} and {b.type}"))
            continue
        edges.append(_Edge(i, j, "fuzzy", score, *found))
    return edges


def _node_description(node: _Node) -> str:
    return merge_descriptions((e.description for e in node.entities), max_chars=MODEL_DESCRIPTION_CHARS)


def _check_descriptions(nodes: list[_Node], edges: list[_Edge], embed: Embed) -> list[KeptApart]:
    """The homonym guard and the second signal, for edges whose two names both have a description."""
    described = sorted({i for e in edges for i in (e.a, e.b) if _node_description(nodes[i])})
    checked = [e for e in edges if e.a in described and e.b in described] if described else []
    if not checked:
        return []
    row = {i: r for r, i in enumerate(described)}
    descriptions = [_node_description(nodes[i]) for i in described]
    # "name: description" only matters for a merge by rule 3-4: embedded only for the names such an edge joins.
    second = sorted({i for e in checked if e.verdict == "merge" and e.rule != "alias" for i in (e.a, e.b)})
    vectors = np.asarray(embed(descriptions + [f"{nodes[i].head.name}: {descriptions[row[i]]}" for i in second]))
    about = vectors[: len(described)]
    named = {i: vectors[len(described) + n] for n, i in enumerate(second)}
    apart = []
    for edge in checked:
        about_sim = float(about[row[edge.a]] @ about[row[edge.b]])
        if about_sim < HOMONYM_MAX_DESCRIPTION_SIMILARITY:
            edge.verdict = "apart"
            apart.append(KeptApart(nodes[edge.a].head.name, nodes[edge.b].head.name, f"descriptions differ ({about_sim:.2f})"))
        elif edge.verdict == "merge" and edge.rule != "alias":
            named_sim = float(named[edge.a] @ named[edge.b])
            if named_sim < NAME_DESCRIPTION_MIN_SIMILARITY:
                edge.verdict, edge.reason = "unclear", f"descriptions disagree ({named_sim:.2f})"
    return apart


def _open_pairs(groups: _Groups, edges: list[_Edge]) -> list[_Edge]:
    """Unclear edges still between two groups that may merge, one per pair of groups."""
    seen: set[tuple[int, int]] = set()
    kept = []
    for edge in edges:
        ra, rb = groups.find(edge.a), groups.find(edge.b)
        key = (min(ra, rb), max(ra, rb))
        if ra != rb and not (groups.existing[ra] and groups.existing[rb]) and key not in seen and not groups.is_split(ra, rb):
            seen.add(key)
            kept.append(edge)
    return kept


def _decide_by_model(nodes: list[_Node], groups: _Groups, edges: list[_Edge], model: DedupModel, data: dict) -> list[KeptApart]:
    """Rule 5: unclear pairs to the model in batches; ``same`` merges (rule ``model``), ``different`` is kept apart."""
    apart: list[KeptApart] = []
    calls = failed = 0
    queue = list(edges)
    while queue:
        still_open = _open_pairs(groups, queue)  # an earlier batch may have joined these groups already
        batch, queue = still_open[:MODEL_BATCH_PAIRS], still_open[MODEL_BATCH_PAIRS:]
        if not batch:
            break
        pairs = [
            CandidatePair(
                nodes[e.a].head.name,
                nodes[e.b].head.name,
                nodes[e.a].type,
                _node_description(nodes[e.a]),
                _node_description(nodes[e.b]),
                round(e.score, 4),
                e.reason,
            )
            for e in batch
        ]
        calls += 1
        try:
            reply = model(pairs)
        except ModelUnavailableError as exc:  # the conservative outcome: these pairs stay unmerged and listed
            failed += 1
            log.warning("deduplication model failed; %s pairs stay unclear: %s", len(batch), exc)
            data.setdefault("model_errors", []).append(str(exc)[:300])
            continue
        for decision in reply.decisions:
            if not 1 <= decision.pair <= len(batch) or batch[decision.pair - 1].verdict != "unclear":
                continue
            edge = batch[decision.pair - 1]
            if decision.same and groups.union(edge.a, edge.b, "model", edge.score):
                edge.verdict = "merged"
            elif not decision.same:
                edge.verdict = "apart"
                reason = f"model: {decision.reason or 'different'}"
                apart.append(KeptApart(nodes[edge.a].head.name, nodes[edge.b].head.name, reason))
    data.update(model_calls=calls, model_failures=failed)
    return apart


def _describe(name: str, type_: str, description: str) -> str:
    text = f'"{name}" ({type_})'
    return f"{text}: {description[:MODEL_DESCRIPTION_CHARS]}" if description else text


def _step(trace: Trace | None, incoming: int, existing: int):
    if trace is None:
        return nullcontext(SimpleNamespace(data={}))
    return trace.step("deduplicate", incoming=incoming, existing=existing)


def _result(
    nodes: list[_Node],
    groups: _Groups,
    node_of: list[int],
    incoming: list[Entity],
    unclear: list[UnclearPair],
    apart: list[KeptApart],
) -> DedupResult:
    """Merged entities, the id mapping and one merge record per merged incoming name."""
    roots = [groups.find(i) for i in range(len(nodes))]
    members: dict[int, list[int]] = {}
    for i, root in enumerate(roots):
        if root == i:
            members[i] = [i]
        else:
            members[root].append(i)  # a root has the lowest number of its group: it came first
    entities: list[Entity] = []
    merges: list[MergeRecord] = []
    for root, group in members.items():
        canon = nodes[root]
        if len(group) == 1 and not canon.existing and len(canon.entities) == 1:  # most names: new, mentioned once
            entities.append(canon.head if canon.head.type == canon.type else _merged_entity(canon, canon.entities))
            continue
        if not any(nodes[i].incoming_names for i in group):
            continue  # an existing entity nothing was merged into
        entities.append(_merged_entity(canon, [e for i in group for e in nodes[i].entities]))
        for i in group:
            rule, score = groups.attached.get(i, (None, 1.0))
            for name in nodes[i].incoming_names:
                if rule is None and name == canon.head.name and not canon.existing:
                    continue  # the first mention of a new entity: nothing merged
                exact = "same_name" if name == canon.head.name else "normalized"
                merges.append(MergeRecord(canon.head.name, name, rule or exact, score))
    # an Entity's id is entity_id_for(name, type) of its own name, so the canonical entity's id is the kept id
    mapping = {entity.id: nodes[roots[node_of[k]]].head.id for k, entity in enumerate(incoming)}
    return DedupResult(entities, mapping, merges, unclear, apart)


def _merged_entity(canon: _Node, entities: list[Entity]) -> Entity:
    """The canonical entity with the others' names as aliases, their chunks and their new sentences."""
    head = canon.head
    if len(entities) == 1 and head.type == canon.type:  # a new entity mentioned once: as it came
        return head
    aliases: dict[str, None] = {}
    for entity in entities:  # the canonical entity first
        for alias in (entity.name, *entity.aliases):
            if alias and alias != head.name:
                aliases.setdefault(alias, None)
    return Entity(
        id=head.id,
        name=head.name,
        type=canon.type,
        description=merge_descriptions(e.description for e in entities),
        aliases=tuple(aliases),
        chunk_ids=frozenset().union(*(e.chunk_ids for e in entities)),
    )
