"""A second hop through file names: a top hit that names another file of the Topic brings in that file's best chunk.

Questions that need two files ("Who directed the film shot in Leland, North Carolina in
1986?") find the first file by similarity, but the second one often shares few words with
the question: it is found because the first one *names* it. Following such references from
retrieved passages is the usual second hop of multi-hop retrieval over linked documents
(Asai et al., "Learning to Retrieve Reasoning Paths over Wikipedia Graph for Question
Answering", ICLR 2020, follow the hyperlinks of retrieved passages; HotpotQA's bridge
questions are built on such links). A Topic has no hyperlinks, but its files have names, and
a file called ``Leland, North Carolina.txt`` is what a text mentioning "Leland, North
Carolina" refers to.

How it works, per search:

1. The Topic's file names (without extension) become *name keys*: their words (Unicode NFKC,
   case-folded) joined by one space (``"leland north carolina"``). Names shorter than
   :data:`MIN_NAME_CHARS`, without a letter, or made of stop words only are not names anyone
   refers to.
2. The text of each of the first :data:`MENTION_SEEDS` hits is read as words; every run of up
   to :data:`MAX_NAME_WORDS` consecutive words that equals a name key is a mention of that file
   (the hit's own file excepted), when it is written as a name: with a capital letter or a digit
   ("People", "Route 66"), in a script without capitals, or followed by the file's extension
   ("people.csv"). "the people of the city" names no file called ``people.csv``. A name that more than :data:`COMMON_NAME_CHUNKS` chunks and
   :data:`COMMON_NAME_SHARE` of the Topic's chunks contain, the named file's own chunks not
   counted, is a common phrase, not a reference ("Introduction", "Notes"), and is ignored.
3. For each mentioned file, its chunk most similar to the question (a KNN query restricted to
   the file) is placed right after the hit that names it, at most :data:`LINKS_PER_SEED` files
   per hit, most similar first. A chunk already among the hits moves up instead of appearing
   twice, and when it is one of the first hits itself, the files it names follow it in turn.
   Like a keyword hit under HYBRID, a linked chunk qualifies by the reference, not by
   Min. Similarity Score; its ``score`` is still its cosine similarity to the question.

Measured on the HotpotQA subset (``make eval``): recall@5 of HYBRID from 0.805 to 0.925,
recall@1 unchanged (the first hit never moves); GraphRAG LOCAL (FUSED) from 0.780 to 0.910.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from dataclasses import dataclass, field

import numpy as np
import redis

from ragtopics.storage.chunk_index import ChunkHit, ChunkIndex
from ragtopics.text.keywords import STOP_WORDS, file_stem

log = logging.getLogger(__name__)

#: How many of the first hits are read for file names.
MENTION_SEEDS = 3
#: Most mentioned files brought in after one hit.
LINKS_PER_SEED = 2
#: Shortest name key (characters, spaces included) taken as a reference.
MIN_NAME_CHARS = 4
#: Longest name, in words, looked for in a text.
MAX_NAME_WORDS = 10
#: A name contained in more chunks than this *and* than this share of the Topic's chunks is a common phrase.
COMMON_NAME_CHUNKS = 10
COMMON_NAME_SHARE = 0.01

_WORD = re.compile(r"\w+")


def words_of(text: str) -> list[str]:
    """The words of ``text``, Unicode-normalised (NFKC: a name typed as ``u`` + combining diaeresis
    matches ``ü``) and case-folded. Scripts written without spaces give one word per run."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def written_as_name(words: list[str]) -> bool:
    """Whether words as written in a text read as a name: one of them holds a capital letter or a digit,
    or they are of a script without capitals (every letter its own upper case)."""
    return any(c.isupper() or c.isdigit() for w in words for c in w) or all(c.upper() == c.lower() for w in words for c in w)


@dataclass(frozen=True)
class FileNames:
    """The name keys of a Topic's files, for finding mentions in a text.

    Names made of stop words only ("This", "With") are left out: every text contains them.

    Attributes:
        by_key: name key → ids of the documents with that name (two files may share a stem).
        longest: most words in any key (at most :data:`MAX_NAME_WORDS`).
        extensions: name key → the extensions (case-folded) of the files with that name.
    """

    by_key: dict[str, tuple[str, ...]] = field(default_factory=dict)
    longest: int = 0
    extensions: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, file_names: dict[str, str]) -> FileNames:
        """Build from ``{document id: file name}``; names too short or without a letter are left out."""
        by_key: dict[str, list[str]] = {}
        extensions: dict[str, set[str]] = {}
        for document_id, file_name in file_names.items():
            stem = file_stem(file_name)
            words = words_of(stem)
            key = " ".join(words)
            if (
                len(key) >= MIN_NAME_CHARS
                and any(c.isalpha() for c in key)
                and len(words) <= MAX_NAME_WORDS
                and not all(w in STOP_WORDS for w in words)
            ):  # "This.txt", "With.txt" name nothing
                by_key.setdefault(key, []).append(document_id)
                if stem != file_name:
                    extensions.setdefault(key, set()).add(file_name[len(stem) + 1 :].casefold())
        longest = max((k.count(" ") + 1 for k in by_key), default=0)
        return cls({k: tuple(v) for k, v in by_key.items()}, longest, {k: frozenset(v) for k, v in extensions.items()})

    def mentioned_in(self, text: str) -> list[tuple[str, str]]:
        """``(name key, document id)`` of every file named in ``text`` (see :func:`written_as_name`), in order
        of first mention, without repeats."""
        if not self.by_key:
            return []
        # Each written word case-folded and split again as words_of splits (casefold may add a combining
        # mark: "İzmir" → "i̇zmir", two words), remembering the written word each part came from.
        pairs = [(part, w) for w in _WORD.findall(unicodedata.normalize("NFKC", text)) for part in _WORD.findall(w.casefold())]
        words = [part for part, _ in pairs]
        written = [w for _, w in pairs]
        found: dict[tuple[str, str], None] = {}
        for start in range(len(words)):
            for width in range(1, min(self.longest, len(words) - start) + 1):
                key = " ".join(words[start : start + width])
                ids = self.by_key.get(key, ())
                if not ids:
                    continue
                after = words[start + width] if start + width < len(words) else ""
                if written_as_name(written[start : start + width]) or after in self.extensions.get(key, ()):
                    for document_id in ids:
                        found.setdefault((key, document_id), None)
        return list(found)


class _NamesCache:
    """The :class:`FileNames` of each chunk index, rebuilt when the index's file set changes (see
    :meth:`ChunkIndex.files_generation`); shared by the threads of a process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, FileNames]] = {}

    def get(self, index: ChunkIndex) -> FileNames:
        pool = index.client.connection_pool.connection_kwargs
        key = f"{pool.get('host')}:{pool.get('port')}:{pool.get('db')}:{pool.get('path')}:{index.index.name}"
        generation = index.files_generation()  # read before the names: a change in between only costs a rebuild
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry[0] == generation:
            return entry[1]
        names = FileNames.of(index.file_names())
        with self._lock:
            self._entries[key] = (generation, names)
        return names


_NAMES = _NamesCache()


@dataclass(frozen=True, slots=True)
class Link:
    """One hop taken: ``seed`` (a hit's chunk id) names the file of ``chunk`` (the chunk brought in).

    Attributes:
        seed: chunk id of the hit whose text names the file.
        chunk: chunk id of the linked file's chunk placed after it.
        name: the name as found (a name key).
        moved: True when the chunk was already among the hits and moved up.
    """

    seed: str
    chunk: str
    name: str
    moved: bool


def follow_mentions(
    index: ChunkIndex,
    hits: list[ChunkHit],
    query_vector: np.ndarray,
    *,
    seeds: int = MENTION_SEEDS,
    per_seed: int = LINKS_PER_SEED,
) -> tuple[list[ChunkHit], list[Link]]:
    """Place the best chunk of each file named by one of the first ``seeds`` hits right after that hit.

    Args:
        index: the Topic's chunk index.
        hits: the ranked hits, best first (``score``: cosine similarity).
        query_vector: the question's embedding, shape ``(dims,)``, unit norm.
        seeds: how many leading hits are read for names.
        per_seed: most files brought in per hit.

    Returns:
        ``(hits, links)``: the hits with linked chunks inserted (longer than ``hits`` when chunks
        were brought in; the caller cuts to its Top-K), and each hop taken.
    """
    if not hits or seeds < 1 or per_seed < 1:
        return hits, []
    names = _NAMES.get(index)
    mentions = {h.chunk_id: [(k, d) for k, d in names.mentioned_in(h.text) if d != h.document_id] for h in hits[:seeds]}
    wanted = list(dict.fromkeys(d for found in mentions.values() for _, d in found))
    if not wanted:
        return hits, []
    keys = {k: names.by_key[k] for found in mentions.values() for k, _ in found}
    common = index.common_phrases(keys, at_least=COMMON_NAME_CHUNKS, share=COMMON_NAME_SHARE)
    present: dict[str, ChunkHit] = {}
    for h in hits:  # a named file already among the hits: its chunk most similar to the question moves up
        if h.document_id not in present or h.score > present[h.document_id].score:
            present[h.document_id] = h
    fetched = index.best_chunks([d for d in wanted if d not in present], query_vector)
    best = {**fetched, **present}
    named = {cid: [(k, best[d]) for k, d in found if k not in common and d in best] for cid, found in mentions.items()}
    return place_links(hits, named, per_seed=per_seed)


def place_links(
    hits: list[ChunkHit], named: dict[str, list[tuple[str, ChunkHit]]], *, per_seed: int
) -> tuple[list[ChunkHit], list[Link]]:
    """Insert, right after each seed hit, the chunks it leads to: at most ``per_seed``, most similar to the question first.

    A chunk already among the hits moves up instead of appearing twice; a placed chunk that is a seed
    itself brings its own links in turn.

    Args:
        hits: the ranked hits, best first (``score``: cosine similarity to the question).
        named: seed chunk id → ``(name, chunk)`` pairs: the name that leads from the seed to the chunk.
        per_seed: most chunks placed after one seed.

    Returns:
        ``(hits, links)``: every hit once, with the linked chunks placed (the list may grow), and each hop taken.
    """
    present = {h.chunk_id for h in hits}
    out: list[ChunkHit] = []
    placed: set[str] = set()
    links: list[Link] = []

    def place(hit: ChunkHit) -> None:
        """Append ``hit``, then, if it is a seed, the chunks it leads to (each of which may be a seed too)."""
        out.append(hit)
        placed.add(hit.chunk_id)
        taken = 0
        for key, chunk in sorted(named.get(hit.chunk_id, ()), key=lambda pair: -pair[1].score):
            if taken == per_seed:
                break
            if chunk.chunk_id in placed:
                continue
            links.append(Link(hit.chunk_id, chunk.chunk_id, key, chunk.chunk_id in present))
            taken += 1
            place(chunk)

    for hit in hits:
        if hit.chunk_id not in placed:
            place(hit)
    return out, links


def follow_mentions_guarded(
    index: ChunkIndex, hits: list[ChunkHit], query_vector: np.ndarray
) -> tuple[list[ChunkHit], list[Link]]:
    """:func:`follow_mentions`, or the hits unchanged when Redis fails it: the second hop improves an answer,
    it must never cost one (the failure is logged)."""
    try:
        return follow_mentions(index, hits, query_vector)
    except redis.RedisError as exc:
        log.warning("file mentions not followed: %s", exc)
        return hits, []
