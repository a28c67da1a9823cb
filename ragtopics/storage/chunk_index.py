"""The per-Topic chunk index in RediSearch, declared once through redisvl (schema, creation, filters).

The vector KNN and the keyword terms' document frequencies, which every chat turn waits for,
are sent as plain ``FT.SEARCH`` commands in pipelines (one round trip each) and their replies,
parsed by hiredis, read here: ``make bench`` measures what that saves next to redisvl's query objects.

Each chunk is a Redis hash under ``rt:{topic_id}:chunk:{chunk_id}`` holding its
text, keywords, document id, file name, offsets, the ids of its pictures and the
pages it comes from (both stored, not indexed) and its embedding (half precision in indexes
made since :data:`VECTOR_DATATYPE`, single precision in older ones). The index
serves vector KNN (cosine) and BM25 full-text search over text and keywords.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import redis
import Stemmer
from redis.commands.search import reducers
from redis.commands.search.aggregation import AggregateRequest
from redis.commands.search.query import Query
from redisvl.exceptions import RedisSearchError
from redisvl.index import SearchIndex
from redisvl.query import FilterQuery
from redisvl.query.filter import Tag

from ragtopics.errors import EmbeddingMismatchError
from ragtopics.storage.locks import Fence
from ragtopics.text.keywords import file_stem, is_identifier, term_counts

log = logging.getLogger(__name__)
T = TypeVar("T")

_PAGE = 1000
#: The field that marks a Topic's file-names hash as holding every file (see :meth:`ChunkIndex.file_names`).
_NAMES_COMPLETE = ""
#: Fields of the keyword counts hash (``ChunkIndex.terms_key``) beside the keywords, which are ``[0-9a-z]+``:
#: the mark that the counts hold every chunk, and the number of chunks.
_TERMS_COMPLETE = ""
_TERMS_TOTAL = "*"
#: The value of the complete mark: what the counts are keyed by (counts keyed otherwise are rebuilt).
_TERMS_KEYED_BY = "english-stem"
#: RediSearch matches a word of a TEXT field by its Snowball (Porter2) English stem too, so a count
#: query for ``films`` counts the chunks holding ``film``; the counts are kept per stem to agree with it.
#: PyStemmer wraps the same C library (libstemmer) RediSearch uses, at about 0.3 µs a word.
_STEMMER = Stemmer.Stemmer("english")


def term_stems(words: Iterable[str]) -> set[str]:
    """The distinct Snowball English stems of ``words`` (``["films", "film"]`` → ``{"film"}``)."""
    return set(_STEMMER.stemWords(list(words)))


#: Most documents :meth:`ChunkIndex.chunk_counts` reports on.
_MAX_GROUPS = 1_000_000

#: How much more an identifier (a keyword with letters and digits: ``e4711``) counts than a word in keyword search.
CODE_WEIGHT = 3.0
#: Most postings (chunks holding a term, summed over the terms) a keyword candidate query walks; rarer terms
#: first, the rest only scored in the candidates (see :func:`candidate_terms`). Chosen with ``make bench``
#: (the keyword search over 100,000 chunks) and ``make eval`` (recall on the HotpotQA and MuSiQue sets,
#: whose indexes are small enough that every term stays searched).
CANDIDATE_POSTINGS = 2_000
#: Terms always searched, the rarest, whatever their postings.
CANDIDATE_TERMS_KEPT = 2
#: Keyword candidates fetched from RediSearch before BM25 scoring, per hit asked for and at least
#: (:func:`keyword_candidates_limit`).
KEYWORD_CANDIDATES_PER_HIT = 4
MIN_KEYWORD_CANDIDATES = 100
#: RediSearch's default stop words: left out of its index, so a phrase query holding one matches nothing.
REDISEARCH_STOP_WORDS = frozenset(
    [
        "a",
        "is",
        "the",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)
#: Okapi BM25 parameters (Robertson & Zaragoza 2009, the usual defaults).
BM25_K1 = 1.2
BM25_B = 0.75
#: HNSW graph parameters of the vector index (M: links per node, RediSearch's default 16;
#: EF_CONSTRUCTION: candidates kept while linking a new node, RediSearch's default 200) and the
#: candidate list searched per query (EF_RUNTIME; RediSearch's default is 10). Chosen by measurement
#: (``bench.latency`` and a sweep over the same 100,000 chunks of MiniLM embeddings, recall@10 against
#: exact search): M 16 needs EF_RUNTIME 100 for recall 0.986; M 32 with EF_CONSTRUCTION 200 reaches
#: 0.985 at EF_RUNTIME 60, and built with EF_CONSTRUCTION 400 it reaches 0.992 at EF_RUNTIME 30 and
#: 0.993 at 40, for about 1.5 times the build time (117 against 79 s for 100,000 chunks). 40, not 30:
#: on structureless data (random unit vectors in 32 dimensions, the hardest case for a graph) 30
#: finds 0.97 of the exact top 10 and 40 at least 0.98; it costs 0.04 ms a search at 100,000 chunks.
#: An index keeps the graph it was created with and records the EF_RUNTIME its graph needs.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 400
HNSW_EF_RUNTIME = 40
#: The EF_RUNTIME of an index whose record does not name one: made with EF_CONSTRUCTION 200, its
#: graph needs 60 for the same recall.
EF_RUNTIME_BEFORE = 60
#: How a new index stores vectors (in each chunk's hash and in the HNSW graph). FLOAT16 halves
#: both copies (768 instead of 1,536 bytes per MiniLM vector, each) and, measured at 100,000 chunks
#: (``make bench``), cut the server's HNSW search by about a fifth at the same recall@10 (0.985).
#: Unit vectors lose nothing a ranking notices: half precision keeps about three decimal digits.
#: An index keeps the type it was created with (older indexes: FLOAT32); readers follow each index.
VECTOR_DATATYPE = "float16"
_NUMPY_TYPES = {"float16": np.float16, "float32": np.float32}
#: ``{index name: (vector type, EF_RUNTIME)}`` of the indexes this process has seen (a search needs
#: both to write its query before the one round trip that also reads the index's record, which
#: confirms them).
_PROFILES: dict[str, tuple[str, int]] = {}


def union_terms(words) -> list[str]:
    """Words for a RediSearch ``(a|b|c)`` union: lower case, each once, RediSearch's stop words left out.

    RediSearch drops stop words from a query anyway, but a union that opens with two of them and
    goes on (``(at|the|census)``) crashes RediSearch 2.10.5's query parser (``QueryNode_AddChildren``)
    and with it the whole Redis server; found by a HotpotQA question ("At the 2011 census, ...").
    """
    return [w for w in dict.fromkeys(w.lower() for w in words) if w and w not in REDISEARCH_STOP_WORDS]


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A chunk as it is written to the index.

    Attributes:
        chunk_id: content-hash id, ``chunk-<hex>``.
        document_id: the document the chunk belongs to.
        file_name: the document's file name, shown as the source.
        position: 0-based order of the chunk within its document.
        text: the chunk text (what the model reads).
        embedding: shape ``(dim,)`` float32, L2-normalised.
        start, end: character offsets in the document's text.
        keywords: space-separated keywords for BM25 ("" when none were written).
        context: a context line stored with the chunk ("" when none).
        pictures: space-separated ids of the pictures linked to the chunk ("" when none).
        pages: 1-based pages (slides, sheets) of the document the chunk comes from, ascending;
            stored as space-separated text (``"3 4"``; ``""`` when unknown).
        version: SHA-256 (hex) of the file version the chunk was read from, so a hit's
            download link serves exactly that version ("" when unknown).
    """

    chunk_id: str
    document_id: str
    file_name: str
    position: int
    text: str
    embedding: np.ndarray = field(repr=False)
    start: int = 0
    end: int = 0
    keywords: str = ""
    context: str = ""
    pictures: str = ""
    pages: tuple[int, ...] = ()
    version: str = ""


@dataclass(frozen=True, slots=True)
class ChunkHit:
    """A chunk returned by a search.

    Attributes:
        chunk_id, document_id, file_name, position, text, context, pictures: as stored.
        score: cosine similarity in [-1, 1] for vector search; BM25 score for keyword search.
        pages: as stored (``()`` for chunks stored before pages were kept, or without pages).
        version: as stored ("" for chunks stored before versions were kept).
    """

    chunk_id: str
    document_id: str
    file_name: str
    position: int
    text: str
    score: float
    context: str = ""
    pictures: str = ""
    pages: tuple[int, ...] = ()
    version: str = ""


#: The fields a search reads per chunk; its id comes from the key (one field less for the server to read).
_RETURN_FIELDS = ["document_id", "file_name", "position", "text", "context", "pictures", "pages", "version"]
#: The fields a HYBRID search reads per candidate before fusion (a source's other fields are read for the kept
#: hits only, :meth:`ChunkIndex.read_hits`): what the trace shows of each list, without the text.
_RANKING_FIELDS = ["document_id", "file_name"]
#: The hash field that holds a chunk's BM25 term frequencies and length, written at upload with its keywords
#: (:func:`pack_term_counts`); a keyword search reads it for each candidate instead of counting the text.
TERM_COUNTS_FIELD = "term_counts"


#: How long the chunks a swap parked (:meth:`ChunkIndex.swap_documents`) outlive it when it is neither settled nor
#: put back (its process died in between), in seconds; a commit after a swap takes milliseconds.
PARKED_TTL_S = 3600


@dataclass(frozen=True, slots=True)
class ChunkSwap:
    """A chunk swap whose previous chunks are parked (:meth:`ChunkIndex.swap_documents`): settle it or put it back.

    Attributes:
        index: the chunk index swapped.
        removed: ``{document id: old chunks removed}`` (those not written again under their id).
        parked: ``{chunk key: parked key}`` of every previous chunk of the swapped documents.
        written: keys of the chunks the swap wrote.
        names: ``{document id: its file name before the swap}`` ("" for a document that had no chunks).
        old_keywords, new_keywords: the keyword fields of the chunks taken out and written (for the term counts).
        files_changed: whether the swap changed the set of searchable files (it then renewed ``files_key``).
    """

    index: ChunkIndex
    removed: dict[str, int]
    parked: dict[str, str] = field(repr=False)
    written: list[str] = field(repr=False)
    names: dict[str, str]
    old_keywords: list[str] = field(repr=False)
    new_keywords: list[str] = field(repr=False)
    files_changed: bool = False

    def settle(self) -> None:
        """Delete the parked chunks: the swap stays. A failure is logged (the parked keys expire by themselves)."""
        keys = list(self.parked.values())
        try:
            for start in range(0, len(keys), _PAGE):
                self.index.client.unlink(*keys[start : start + _PAGE])
        except redis.RedisError as exc:
            log.warning(
                "%d parked chunks of Topic %s not deleted (they expire in an hour): %s", len(keys), self.index.topic_id, exc
            )

    def put_back(self, fence: Fence | None = None) -> None:
        """Undo the swap in one MULTI/EXEC: the written chunks go, the parked ones come back under their keys
        (searchable again, with no time to live), and the file names, the files generation and the keyword
        counts are as before the swap.

        Args:
            fence: the locks the caller holds (as for the swap); nothing is written once one is lost.

        Raises:
            LockLostError: with ``fence``, when a lock was lost (nothing is written: its new holder owns the chunks).
            redis.RedisError: when Redis fails (a parked chunk that expired meanwhile is named in the error).
        """
        index = self.index
        pipe = index.client.pipeline(transaction=True)
        if fence is not None:
            fence.watch(pipe)
            pipe.multi()
        if self.written:
            pipe.delete(*self.written)
        for key, parked_key in self.parked.items():
            pipe.rename(parked_key, key)
            pipe.persist(key)
        for document_id, file_name in self.names.items():
            if file_name:
                pipe.hset(index.names_key, document_id, file_name)
            else:
                pipe.hdel(index.names_key, document_id)
        if self.files_changed:
            pipe.set(index.files_key, uuid.uuid4().hex)
        index._count_terms(pipe, self.new_keywords, self.old_keywords)
        index._execute(pipe, fence)
        log.info(
            "chunk swap of Topic %s put back: %d chunks restored, %d removed", index.topic_id, len(self.parked), len(self.written)
        )


class ChunkIndex:
    """The RediSearch chunk index of one Topic.

    The index records the embedding model and dimension it was built with (a hash at
    ``rt:{topic_id}:index:chunks``); writing to it or searching it by vector with another
    embedder raises :class:`EmbeddingMismatchError` instead of failing silently.

    Args:
        client: a redis-py client (``decode_responses=False``).
        topic_id: the Topic's id; it names the index and the key prefix.
        dims: embedding dimension of the configured embedder.
        embedding_model: name of the configured embedding model ("" when unknown: not checked).
    """

    def __init__(self, client: redis.Redis, topic_id: str, dims: int, embedding_model: str = ""):
        self.client = client
        self.topic_id = topic_id
        self.dims = dims
        self.embedding_model = embedding_model
        self.prefix = f"rt:{topic_id}:chunk"
        self.record_key = f"rt:{topic_id}:index:chunks"  # outside the chunk prefix, so never indexed
        self.files_key = f"rt:{topic_id}:index:files"  # changes whenever a file appears or goes
        self.names_key = f"rt:{topic_id}:index:names"  # {document id: file name}, written with each chunk swap
        self.terms_key = f"rt:{topic_id}:index:terms"  # {keyword: chunks holding it}, written with each chunk swap
        self.parked_prefix = f"rt:{topic_id}:parked"  # chunks a swap replaced, kept until it settles; never indexed
        self.index = SearchIndex.from_dict(self.schema(topic_id, dims), redis_client=client)

    @staticmethod
    def schema(topic_id: str, dims: int, datatype: str = VECTOR_DATATYPE) -> dict:
        """The redisvl schema of a Topic's chunk index (one place, used for create and query)."""
        return {
            "index": {"name": f"rt-{topic_id}-chunks", "prefix": f"rt:{topic_id}:chunk", "storage_type": "hash"},
            "fields": [
                {"name": "chunk_id", "type": "tag"},
                {"name": "document_id", "type": "tag"},
                {"name": "text", "type": "text"},
                {"name": "keywords", "type": "text"},
                {"name": "position", "type": "numeric", "attrs": {"sortable": True}},
                {
                    "name": "embedding",
                    "type": "vector",
                    "attrs": {
                        "dims": dims,
                        "distance_metric": "cosine",
                        "algorithm": "hnsw",
                        "datatype": datatype,
                        "m": HNSW_M,
                        "ef_construction": HNSW_EF_CONSTRUCTION,
                    },
                },
            ],
        }

    def ensure(self) -> None:
        """Create the index if it does not exist yet (idempotent), recording the embedder it is built for.

        An existing index without chunks that was built for another embedder is rebuilt.

        Raises:
            EmbeddingMismatchError: when the existing index holds chunks embedded by another
                model or with another dimension.
        """
        if self.index.exists():
            try:
                self.check_embedder()
                _PROFILES.pop(self.index.name, None)  # read again before writing: another process may have made it anew
                return
            except EmbeddingMismatchError:
                if self.count():
                    raise
                self.index.delete(drop=True)
        self.index.create(overwrite=False)
        self.client.hset(
            self.record_key,
            mapping={
                "embedding_model": self.embedding_model,
                "dims": self.dims,
                "datatype": VECTOR_DATATYPE,
                "ef_runtime": HNSW_EF_RUNTIME,
            },
        )
        with self.client.pipeline(transaction=True) as pipe:  # a new index holds no chunk: its term counts are complete
            pipe.delete(self.terms_key)
            pipe.hset(self.terms_key, mapping={_TERMS_COMPLETE: _TERMS_KEYED_BY, _TERMS_TOTAL: 0})
            pipe.execute()
        _PROFILES[self.index.name] = (VECTOR_DATATYPE, HNSW_EF_RUNTIME)
        log.info("created chunk index %s (%s, %d dims)", self.index.name, self.embedding_model or "model unknown", self.dims)

    def built_with(self) -> tuple[str, int] | None:
        """The embedding model name and dimension the index was built with.

        Returns:
            ``(model, dims)``; model is ``""`` for an index built before the record was kept
            (its dims are read from the index schema); ``None`` when there is no index.
        """
        record = self.client.hgetall(self.record_key)
        if record:  # written with the index and deleted with it
            return _record_built(record)
        if not self.index.exists():
            return None
        existing = SearchIndex.from_existing(self.index.name, redis_client=self.client)
        return "", int(existing.schema.fields["embedding"].attrs.dims)

    def check_embedder(self) -> None:
        """Check that the configured embedder is the one the index was built with.

        An index from before the record was kept is adopted when its dimension matches.

        Raises:
            EmbeddingMismatchError: naming both models and dimensions, and what to do.
        """
        self._check_built(self.built_with())

    def _check_built(self, built: tuple[str, int] | None) -> None:
        """:meth:`check_embedder` on what :meth:`built_with` returned."""
        if built is None or not self.embedding_model:
            return
        model, dims = built
        if dims == self.dims and model in ("", self.embedding_model):
            if not model:
                self.client.hset(self.record_key, mapping={"embedding_model": self.embedding_model, "dims": self.dims})
            return
        raise EmbeddingMismatchError(
            f"the chunk index of Topic {self.topic_id} was built with the embedding model {model or 'unknown'} "
            f"({dims} dims), but the configured embedding model is {self.embedding_model} ({self.dims} dims). "
            "Its chunks cannot be searched or extended with another model: re-embed the Topic's documents "
            "(console: Topics → Configure a Topic → Re-embed documents; or delete and upload them again), "
            f"or set EMBEDDING_MODEL={model or '…'} and EMBEDDING_DIM={dims} again."
        )

    def key(self, chunk_id: str) -> str:
        """Redis key of a chunk."""
        return f"{self.prefix}:{chunk_id}"

    def datatype(self) -> str:
        """How the index stores vectors: ``"float16"`` or ``"float32"`` (see :data:`VECTOR_DATATYPE`).

        Read from the index's record (an index created before the type was recorded: from its
        schema); remembered for the process. :data:`VECTOR_DATATYPE` when there is no index yet.
        """
        return self._profile()[0]

    def ef_runtime(self) -> int:
        """The EF_RUNTIME this index is searched with: its record's (:data:`HNSW_EF_RUNTIME` when it was
        made), :data:`EF_RUNTIME_BEFORE` for an index made before it was recorded."""
        return self._profile()[1]

    def _profile(self) -> tuple[str, int]:
        """``(vector type, EF_RUNTIME)`` of the index, remembered for the process once read."""
        known = _PROFILES.get(self.index.name)
        if known:
            return known
        datatype, ef = self.client.hmget(self.record_key, ["datatype", "ef_runtime"])
        if datatype:
            datatype = _decode(datatype)
        elif self.index.exists():
            existing = SearchIndex.from_existing(self.index.name, redis_client=self.client)
            datatype = str(existing.schema.fields["embedding"].attrs.datatype.value).lower()
        else:
            return VECTOR_DATATYPE, HNSW_EF_RUNTIME
        profile = (datatype, int(ef) if ef else EF_RUNTIME_BEFORE)
        _PROFILES[self.index.name] = profile
        return profile

    def encode(self, vector: np.ndarray) -> bytes:
        """A vector as the index stores and searches it (its :meth:`datatype`)."""
        return np.asarray(vector, dtype=_NUMPY_TYPES[self.datatype()]).tobytes()

    def document_chunk_ids(self, document_id: str) -> list[str]:
        """Ids of every chunk stored for ``document_id``, in document order."""
        if not self.index.exists():
            return []
        ids: list[str] = []
        offset = 0
        while True:
            query = FilterQuery(
                filter_expression=Tag("document_id") == document_id,
                return_fields=["chunk_id", "position"],
                num_results=_PAGE,
                sort_by="position",
            )
            query.paging(offset, _PAGE)
            page = self.index.query(query)
            ids.extend(row["chunk_id"] for row in page)
            if len(page) < _PAGE:
                return ids
            offset += _PAGE

    def replace_document(self, document_id: str, chunks: list[ChunkRecord], *, fence: Fence | None = None) -> int:
        """Swap a document's chunks for ``chunks`` in one transaction.

        The new chunks and the removal of the old ones are sent in a single
        MULTI/EXEC, so a reader sees the old version or the new one, never a mix.
        With ``fence`` (the document lock's), see :meth:`replace_documents`.

        Returns:
            The number of old chunks removed.

        Raises:
            ValueError: when an embedding does not have ``dims`` values.
        """
        return self.replace_documents({document_id: chunks}, fence=fence)[document_id]

    def replace_documents(self, swaps: dict[str, list[ChunkRecord]], *, fence: Fence | None = None) -> dict[str, int]:
        """Swap the chunks of several documents in one transaction (:meth:`replace_document` for a batch of uploads).

        One query finds the old chunks of every document, one MULTI/EXEC writes the new ones
        and removes the old: a reader sees every document before the swap, or every one after.

        Args:
            swaps: ``{document id: its new chunks}`` (``[]`` removes the document's chunks).
            fence: the document locks the caller holds; the transaction then commits only while every
                lock is still the caller's (its keys are watched), so a holder that lost its lock writes nothing.

        Returns:
            ``{document id: old chunks removed}``.

        A swap that only removes chunks needs no embedder check: a Topic's files can still be deleted
        after its embedding model changed.

        Raises:
            ValueError: when an embedding does not have ``dims`` values (nothing is written).
            EmbeddingMismatchError: when new chunks would join an index built with another embedder.
            LockLostError: with ``fence``, when a lock was lost before the swap or during it (nothing is written).
        """
        return self._swap(swaps, fence, park=False).removed

    def swap_documents(self, swaps: dict[str, list[ChunkRecord]], *, fence: Fence | None = None) -> ChunkSwap:
        """:meth:`replace_documents`, keeping the previous chunks parked until the caller settles or undoes the swap.

        The same single MULTI/EXEC makes the new chunks searchable; each previous chunk is renamed out of
        the index's prefix (to :attr:`parked_prefix`, with a time to live of :data:`PARKED_TTL_S`) instead of
        deleted. The caller then calls :meth:`ChunkSwap.settle` once what depends on the swap is committed
        (the SQL rows of the versions), or :meth:`ChunkSwap.put_back` when it failed: the previous chunks
        come back whole, embeddings included, without being read or sent again.

        Args:
            swaps, fence: as in :meth:`replace_documents`.

        Returns:
            The swap, to settle or to put back.

        Raises:
            As :meth:`replace_documents`.
        """
        return self._swap(swaps, fence, park=True)

    def _swap(self, swaps: dict[str, list[ChunkRecord]], fence: Fence | None, *, park: bool) -> ChunkSwap:
        """The one chunk swap of :meth:`replace_documents` and :meth:`swap_documents` (``park``: rename, not delete)."""
        if any(swaps.values()):
            self.ensure()
        mappings = [(self.key(c.chunk_id), self._mapping(c)) for chunks in swaps.values() for c in chunks]
        old, old_keywords = self._stored_chunks(list(swaps))
        parked: dict[str, str] = {}
        if park:
            token = uuid.uuid4().hex
            parked = {self.key(cid): f"{self.parked_prefix}:{token}:{cid}" for before in old.values() for cid in before}
        pipe = self.client.pipeline(transaction=True)
        if fence is not None:
            fence.watch(pipe)
            pipe.multi()
        for key, parked_key in parked.items():  # first: a chunk kept under its id is written again below
            pipe.rename(key, parked_key)
            pipe.expire(parked_key, PARKED_TTL_S)
        for key, mapping in mappings:
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]  # redis-py types the mapping's key invariantly
        removed, names, files_changed = {}, {}, False
        for document_id, chunks in swaps.items():
            before = old.get(document_id, {})
            stale = [self.key(cid) for cid in set(before) - {c.chunk_id for c in chunks}]
            if stale and not park:
                pipe.delete(*stale)
            removed[document_id] = len(stale)
            names[document_id] = next(iter(before.values()), "")
            if chunks:
                pipe.hset(self.names_key, document_id, chunks[0].file_name)
            else:
                pipe.hdel(self.names_key, document_id)
            renamed = bool(before and chunks) and names[document_id] != chunks[0].file_name
            files_changed |= not before or not chunks or renamed
        if files_changed:  # the set of searchable files changed
            pipe.set(self.files_key, uuid.uuid4().hex)
        new_keywords = [c.keywords for chunks in swaps.values() for c in chunks]
        self._count_terms(pipe, old_keywords, new_keywords)
        self._execute(pipe, fence)
        return ChunkSwap(self, removed, parked, [key for key, _ in mappings], names, old_keywords, new_keywords, files_changed)

    @staticmethod
    def _execute(pipe, fence: Fence | None) -> None:
        """Run a transaction queued on ``pipe`` (watching ``fence``'s keys when given).

        Raises:
            LockLostError: with ``fence``, when a lock was lost (nothing is written).
        """
        try:
            pipe.execute()
        except redis.WatchError:
            if fence is None:
                raise
            raise fence.lost_at_exec() from None
        finally:
            pipe.reset()

    def _count_terms(self, pipe, removed: list[str], added: list[str]) -> None:
        """Queue on ``pipe`` the change of the keyword document frequencies (:attr:`terms_key`) that a swap makes.

        Args:
            removed: the keyword fields of the chunks the swap takes out (every old chunk of the swapped documents).
            added: those of the chunks it writes (a chunk kept under its id may have new keywords: its file
                was renamed, or the Topic's strategy changed).

        Always written, so a rebuild of the counts that runs meanwhile fails its ``WATCH``; on an
        index whose counts were never complete the partial counts stay unused until a rebuild
        (:meth:`term_frequencies`).
        """
        delta: Counter[str] = Counter()
        for keywords in removed:
            delta.subtract(term_stems(keywords.split()))
        for keywords in added:
            delta.update(term_stems(keywords.split()))
        for term, change in delta.items():
            if change:
                pipe.hincrby(self.terms_key, term, change)
        pipe.hincrby(self.terms_key, _TERMS_TOTAL, len(added) - len(removed))

    def term_frequencies(self, terms: list[str]) -> tuple[list[int], int] | None:
        """For each term, how many chunks' keywords hold it, and how many chunks the index holds; one ``HMGET``.

        A term counts as RediSearch matches it: by its stem (``films`` counts the chunks holding ``film``).

        Read from the counts every chunk swap keeps (:meth:`_count_terms`), so the cost does not grow
        with the index, unlike a count query per term (which walks the term's posting list: 1–20 ms a
        term at 100,000 chunks, ``make bench``). An index written before the counts were kept gets them
        here, once, from its chunks' keywords (:meth:`_rebuild_term_counts`).

        Returns:
            ``(frequencies in the order of terms, total chunks)``; ``None`` when the counts are not
            complete (a rebuild lost a race with a swap): the caller counts with queries instead.
        """
        stems = _STEMMER.stemWords(list(terms))
        values = self.client.hmget(self.terms_key, [_TERMS_COMPLETE, _TERMS_TOTAL, *stems])
        if _decode(values[0] or b"") != _TERMS_KEYED_BY:
            if not self._rebuild_term_counts():
                return None
            values = self.client.hmget(self.terms_key, [_TERMS_COMPLETE, _TERMS_TOTAL, *stems])
            if _decode(values[0] or b"") != _TERMS_KEYED_BY:
                return None
        return [max(0, int(v or 0)) for v in values[2:]], max(0, int(values[1] or 0))

    def _rebuild_term_counts(self) -> bool:
        """Count every chunk's keywords into :attr:`terms_key` and mark the counts complete.

        ``WATCH`` on the counts: a chunk swap in between changes them, the rebuild is dropped
        (``False``) and the next search tries again.
        """
        with self.client.pipeline(transaction=True) as pipe:
            pipe.watch(self.terms_key)
            counts: Counter[str] = Counter()
            total = 0
            for keywords in self._all_keywords():
                counts.update(term_stems(keywords.split()))
                total += 1
            pipe.multi()
            pipe.delete(self.terms_key)
            pipe.hset(self.terms_key, mapping={**counts, _TERMS_TOTAL: total, _TERMS_COMPLETE: _TERMS_KEYED_BY})  # type: ignore[dict-item]  # redis-py types the mapping's key invariantly
            try:
                pipe.execute()
            except redis.WatchError:
                return False
        log.info("counted the keywords of %d chunks for index %s", total, self.index.name)
        return True

    def _all_keywords(self) -> Iterator[str]:
        """The keyword field of every chunk of the index (an aggregation read through a cursor)."""
        reply = _unless_missing(
            lambda: self.client.execute_command(
                "FT.AGGREGATE", self.index.name, "*", "LOAD", 1, "@keywords", "WITHCURSOR", "COUNT", _PAGE, "DIALECT", 2
            ),
            None,
        )
        while reply:
            rows, cursor = reply
            for row in rows[1:] if isinstance(rows, list) else []:
                fields = dict(zip(row[::2], row[1::2], strict=False))
                yield _decode(fields.get(b"keywords", fields.get("keywords")) or b"")
            if not int(cursor):
                return
            reply = self.client.execute_command("FT.CURSOR", "READ", self.index.name, int(cursor), "COUNT", _PAGE)

    def _stored_chunks(self, document_ids: list[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
        """``{document id: {chunk id: file name}}`` of the chunks stored for ``document_ids``, and their keyword fields.

        One query for them all when they fit in a page (a batch of small files); else each
        document's chunks are paged by position, which is unique within a document, so pages
        neither skip nor repeat a chunk.
        """
        if not document_ids or not self.index.exists():
            return {}, []
        if len(document_ids) > 1:
            rows = self._chunk_rows(document_ids, 0)
            if len(rows) < _PAGE:
                return _by_document(rows), [row.get("keywords", "") for row in rows]
        rows = []
        for document_id in document_ids:
            offset = 0
            while True:
                page = self._chunk_rows([document_id], offset)
                rows.extend(page)
                if len(page) < _PAGE:
                    break
                offset += _PAGE
        return _by_document(rows), [row.get("keywords", "") for row in rows]

    def _chunk_rows(self, document_ids: list[str], offset: int) -> list[dict]:
        """One page of the chunk id, document id, file name and keywords of the chunks of ``document_ids``, by position."""
        query = FilterQuery(
            filter_expression=Tag("document_id") == list(document_ids),
            return_fields=["chunk_id", "document_id", "file_name", "keywords"],
            num_results=_PAGE,
            sort_by="position",
        )
        query.paging(offset, _PAGE)
        return self.index.query(query)

    def delete_document(self, document_id: str) -> int:
        """Remove every chunk of a document; returns how many were removed."""
        return self.replace_document(document_id, [])

    def _mapping(self, chunk: ChunkRecord) -> dict[str, str | bytes | int]:
        vector = np.asarray(chunk.embedding)
        if vector.shape != (self.dims,):
            raise ValueError(f"embedding of {chunk.chunk_id} has shape {vector.shape}, index expects ({self.dims},)")
        return {
            "chunk_id": chunk.chunk_id,
            "document_id": chunk.document_id,
            "file_name": chunk.file_name,
            "position": chunk.position,
            "text": chunk.text,
            "context": chunk.context,
            "keywords": chunk.keywords,
            "pictures": chunk.pictures,
            "pages": " ".join(str(p) for p in chunk.pages),
            "version": chunk.version,
            "start": chunk.start,
            "end": chunk.end,
            "embedding": self.encode(vector),
            # only a chunk with keywords can be a keyword candidate: a DENSE upload stores no counts
            TERM_COUNTS_FIELD: pack_term_counts(chunk_terms(chunk.file_name, chunk.text, chunk.keywords.split()))
            if chunk.keywords
            else "",
        }

    def search_vector(self, vector: np.ndarray, k: int, *, fields: Sequence[str] = _RETURN_FIELDS) -> list[ChunkHit]:
        """Return the ``k`` chunks nearest to ``vector`` by cosine similarity, best first.

        One round trip: the embedder record and the KNN query (HNSW at the index's
        :meth:`ef_runtime`) go in one pipeline, and the reply is read here rather than
        through redisvl's result processing (``make bench`` measured 0.35 ms of the 0.95 ms a
        search took at 20,000 chunks in the second round trip and the generic parsing).

        Args:
            vector: shape ``(dims,)``.
            k: number of neighbours (>= 1).
            fields: the stored fields read per hit (by default every field a source shows); a field left
                out is empty in the hit (position 0).

        Raises:
            EmbeddingMismatchError: the index was built with another embedder.
        """
        hits, _ = self._search_vector(vector, k, fields, ())
        return hits or []

    def _search_vector(
        self, vector: np.ndarray, k: int, fields: Sequence[str], also: Sequence[tuple], *, _again: bool = False
    ) -> tuple[list[ChunkHit] | None, list]:
        """:meth:`search_vector`, with the commands ``also`` sent in the same pipeline.

        Returns:
            ``(hits, the replies to also)`` (a failed command's reply is its exception); hits ``None``
            when there is no index.
        """
        profile = self._profile()  # remembered for the process after the first read
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self.record_key)
        pipe.execute_command(*self._knn_command(vector, k, profile=profile, fields=fields))
        for command in also:
            pipe.execute_command(*command)
        record, reply, *extra = pipe.execute(raise_on_error=False)
        if isinstance(record, Exception):
            raise record
        if record and record.get(b"datatype") and _record_profile(record) != profile and not _again:
            _PROFILES.pop(self.index.name, None)  # the index was made anew meanwhile
            return self._search_vector(vector, k, fields, also, _again=True)
        if not record:  # no index, or one from before the record was kept: the slower path decides
            built = self.built_with()
            if built is None:
                return None, extra
            self._check_built(built)
            reply = _unless_missing(lambda: self.client.execute_command(*self._knn_command(vector, k, fields=fields)), None)
            if reply is None:
                return None, extra
        else:
            self._check_built(_record_built(record))
        if isinstance(reply, Exception):
            return _unless_missing(_raiser(reply), None), extra
        return _vector_hits(reply, self.prefix), extra

    def _knn_command(
        self,
        vector: np.ndarray,
        k: int,
        *,
        within: str = "",
        profile: tuple[str, int] | None = None,
        fields: Sequence[str] = _RETURN_FIELDS,
    ) -> tuple:
        """The ``FT.SEARCH`` KNN command for ``vector`` (the query redisvl's ``VectorQuery`` builds, less its
        ``SORTBY``: the reply holds the k nearest in any order and :func:`_vector_hits` sorts them, which
        spares the server a sorter, 0.03 of its 0.4 ms at 100,000 chunks); ``within``: only the chunks of
        that document; ``profile``: the index's ``(vector type, EF_RUNTIME)`` when the caller has it;
        ``fields``: the stored fields returned per hit."""
        returned = (*fields, "vector_distance")
        scope = f"@document_id:{{{_escape_term(within)}}}" if within else "*"
        datatype, ef = profile or self._profile()
        blob = np.asarray(vector, dtype=_NUMPY_TYPES[datatype]).tobytes()
        return (
            "FT.SEARCH",
            self.index.name,
            f"{scope}=>[KNN {int(k)} @embedding $vector EF_RUNTIME $ef AS vector_distance]",
            "PARAMS",
            4,
            "vector",
            blob,
            "ef",
            max(ef, int(k)),
            "RETURN",
            len(returned),
            *returned,
            "LIMIT",
            0,
            int(k),
            "DIALECT",
            2,
        )

    def search_hybrid(
        self, vector: np.ndarray, terms: list[str], k: int, *, code_weight: float = CODE_WEIGHT
    ) -> tuple[list[ChunkHit], list[ChunkHit]]:
        """The two ranked lists a HYBRID search fuses: the ``k`` chunks nearest to ``vector``
        (:meth:`search_vector`) and the ``k`` best by BM25 for ``terms`` (:meth:`search_keywords`).

        Their hits carry the chunk id, document id, file name and score only: a search keeps a few of
        them and reads those chunks' other fields (:meth:`read_hits`), not the text of every candidate.
        Usually one round trip: the embedder record, the KNN, the terms' document frequencies and the
        keyword candidates (each read with its stored term counts, :data:`TERM_COUNTS_FIELD`) go in one
        pipeline. The candidate query needs the frequencies to choose the terms searched
        (:func:`candidate_terms`); it is written from the frequencies this process read last for the
        same terms (:func:`remembered_frequencies`) and its reply is used only when the frequencies read
        in the same pipeline choose the same terms, so the results are those of two round trips
        (frequencies, then candidates), which is what a question with a term not seen before, or whose
        terms' counts changed the choice, takes.

        Args:
            vector: shape ``(dims,)``, unit norm.
            terms: the question's normalised keywords (``ragtopics.text.keywords.query_keywords``).
            k: the depth of each list (>= 1).
            code_weight: as in :meth:`search_keywords`.

        Returns:
            ``(dense, keyword)``: dense scored by cosine similarity, nearest first; keyword by BM25, best
            first. Both empty when the Topic has no index.

        Raises:
            EmbeddingMismatchError: the index was built with another embedder.
        """
        terms = list(dict.fromkeys(t for t in terms if t))
        stems = _STEMMER.stemWords(terms)
        also: list[tuple] = [("HMGET", self.terms_key, _TERMS_COMPLETE, _TERMS_TOTAL, *stems)] if terms else []
        limit = keyword_candidates_limit(k)
        guessed = None
        remembered = remembered_frequencies(self.index.name, stems)
        if remembered is not None:
            frequencies = dict(zip(terms, remembered, strict=True))
            guessed = candidate_terms(frequencies, [t for t in terms if frequencies[t]])
            if guessed:
                also.append(self._candidates_command(guessed, limit))
        dense, extra = self._search_vector(vector, k, _RANKING_FIELDS, also)
        if dense is None:
            return [], []
        if not terms:
            return dense, []
        values = extra[0]
        counted = None
        if not isinstance(values, Exception) and _decode(values[0] or b"") == _TERMS_KEYED_BY:
            counted = [max(0, int(v or 0)) for v in values[2:]], max(0, int(values[1] or 0))
            remember_frequencies(self.index.name, stems, counted[0])
        sent = (guessed, extra[1]) if guessed and len(extra) > 1 else None
        none: list[ChunkHit] = []
        keyword = _unless_missing(lambda: self._search_keywords(terms, k, code_weight, counted=counted, sent=sent), none)
        return dense, keyword

    def search_keywords(self, terms: list[str], k: int, *, code_weight: float = CODE_WEIGHT, full: bool = True) -> list[ChunkHit]:
        """BM25 search of the keyword index: chunks whose keywords match any of ``terms``, identifiers weighted up.

        Only chunks written with keywords (uploaded under HYBRID) can match. RediSearch finds
        the candidates: chunks whose keyword field (the distinct keywords of the chunk's text and
        its file's name, and a model's for LLM enrichment) holds any of ``terms``, up to
        ``max(4k, 100)`` of them in RediSearch's ``BM25STD`` order (on HotpotQA that order finds as
        many gold passages among 100 candidates as the TF-IDF order among 1,000). They are scored
        here with Okapi BM25 (:func:`bm25_score`) on term frequencies counted in the file's name
        and the chunk's text (:func:`~ragtopics.text.keywords.term_counts`), written with the chunk
        at upload (:data:`TERM_COUNTS_FIELD`; counted from the text for a chunk stored before); a
        keyword of the field that the text lacks (an enrichment keyword) counts once. RediSearch's
        own ``BM25`` scores a term that is in most chunks as 0 and ``BM25STD`` overflows on such terms, hence
        the scoring here. Document frequencies come from the index. An identifier (letters and
        digits: ``E-4711``, ``SK-44``) counts ``code_weight`` times a word; when the question names
        one and some chunk holds it, chunks that hold none are left out, so chunks that talk about
        error codes in general get no second vote in fusion against the one that holds ``E-4711``.
        A plain number (a year, a quantity) counts as a word and narrows nothing: "a film shot in
        Leland in 1986" is still searched by all its words.

        Args:
            terms: normalised keywords (see ``ragtopics.text.keywords``); empty gives ``[]``.
            k: how many hits to return.
            code_weight: factor on an identifier's BM25 term weight (>= 1 favours identifiers).
            full: read every field a source shows for the hits returned (one more round trip); ``False``:
                the chunk id, document id and file name only.

        Returns:
            Up to ``k`` hits, best first (ties in RediSearch's order); ``score`` is the BM25 score (> 0).
        """
        terms = list(dict.fromkeys(t for t in terms if t))
        if not terms or self.built_with() is None:
            return []
        none: list[ChunkHit] = []
        hits = _unless_missing(lambda: self._search_keywords(terms, k, code_weight), none)
        if not full or not hits:
            return hits
        stored, _ = self.read_hits([h.chunk_id for h in hits])
        return [replace(stored[h.chunk_id], score=h.score) for h in hits if h.chunk_id in stored]

    def _search_keywords(
        self,
        terms: list[str],
        k: int,
        code_weight: float,
        counted: tuple[list[int], int] | None = None,
        sent: tuple[list[str], Any] | None = None,
    ) -> list[ChunkHit]:
        """:meth:`search_keywords` without the fields a source shows; ``counted``: the terms' document
        frequencies and the chunk total when the caller read them (:meth:`term_frequencies`); ``sent``: the
        terms a candidate query was already sent for and its reply (used when the frequencies choose the
        same terms)."""
        counts, chunks = counted or self.term_frequencies(terms) or self._count_each(terms)
        frequencies = dict(zip(terms, counts, strict=True))
        terms = [t for t in terms if frequencies[t]]
        if not terms:
            return []
        total = max(chunks, max(frequencies.values()))
        weights = {t: (code_weight if is_identifier(t) else 1.0) * bm25_idf(total, frequencies[t]) for t in terms}
        searched = candidate_terms(frequencies, terms)
        if sent is not None and sent[0] == searched and not isinstance(sent[1], Exception):
            rows = self._candidate_rows(sent[1])
        else:
            rows = self._keyword_candidates(searched, keyword_candidates_limit(k))
        return bm25_rank(rows, weights, [t for t in terms if is_identifier(t)], k)

    def _count_each(self, terms: list[str]) -> tuple[list[int], int]:
        """For each term, how many chunks' keywords hold it (its document frequency), and how many chunks
        the index holds; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for term in terms:
            query = f"@keywords:({'|'.join(_escape_term(t) for t in union_terms([term]))})"
            pipe.execute_command("FT.SEARCH", self.index.name, query, "LIMIT", 0, 0, "DIALECT", 2)
        pipe.execute_command("FT.SEARCH", self.index.name, "*", "LIMIT", 0, 0, "DIALECT", 2)
        replies = pipe.execute()
        return [_search_total(reply) for reply in replies[:-1]], _search_total(replies[-1])

    def _candidates_command(self, terms: list[str], limit: int) -> tuple:
        """The ``FT.SEARCH`` of :meth:`_keyword_candidates`: up to ``limit`` chunks whose keywords hold any of
        ``terms``, in RediSearch's ``BM25STD`` order, each with its ids, file name and packed term counts."""
        fields = (*_RANKING_FIELDS, TERM_COUNTS_FIELD)
        return (
            "FT.SEARCH",
            self.index.name,
            f"@keywords:({'|'.join(_escape_term(t) for t in union_terms(terms))})",
            "RETURN",
            len(fields),
            *fields,
            "SCORER",
            "BM25STD",  # the order candidates are cut in; their scores are computed in Python
            "LIMIT",
            0,
            int(limit),
            "DIALECT",
            2,
        )

    def _keyword_candidates(self, terms: list[str], limit: int) -> list[tuple[ChunkHit, str]]:
        """Up to ``limit`` chunks whose keywords hold any of ``terms``, each with its packed term counts
        (:func:`pack_term_counts`); the hits carry the chunk id, document id and file name.

        The reply is read here, as in :meth:`search_vector`: redis-py's generic result objects
        took about a fifth of a HYBRID search's time for 100 candidates. A chunk stored before its
        counts were kept has them counted from its text (one more round trip for such chunks).
        """
        return self._candidate_rows(self.client.execute_command(*self._candidates_command(terms, limit)))

    def _candidate_rows(self, reply) -> list[tuple[ChunkHit, str]]:
        """The rows of a candidate query's reply (:meth:`_candidates_command`) as :meth:`_keyword_candidates` returns them."""
        rows = [(_hit(row, 0.0), row.get(TERM_COUNTS_FIELD, "")) for row in _search_rows(reply, self.prefix)]
        unpacked = [hit for hit, packed in rows if not packed]
        if not unpacked:
            return rows
        pipe = self.client.pipeline(transaction=False)
        for hit in unpacked:
            pipe.hmget(self.key(hit.chunk_id), ["text", "keywords"])
        packed_now = {}
        for hit, (text, keywords) in zip(unpacked, pipe.execute(), strict=True):
            if text is not None:  # else removed since the query
                counts = chunk_term_counts(replace(hit, text=_decode(text)), _decode(keywords or b"").split())
                packed_now[hit.chunk_id] = pack_term_counts(counts)
        return [(hit, packed or packed_now[hit.chunk_id]) for hit, packed in rows if packed or hit.chunk_id in packed_now]

    def read_hits(
        self, chunk_ids: Sequence[str], *, vectors: Iterable[str] = ()
    ) -> tuple[dict[str, ChunkHit], dict[str, np.ndarray]]:
        """The fields a source shows of the given chunks, and the stored embeddings of some of them; one round trip.

        Args:
            chunk_ids: the chunks (a missing id is left out).
            vectors: the chunks among them whose embedding is read as well.

        Returns:
            ``({chunk id: hit with score 0.0}, {chunk id: float32 array of shape (dims,)})``.
        """
        wanted = set(vectors)
        pipe = self.client.pipeline(transaction=False)
        for cid in chunk_ids:
            pipe.hmget(self.key(cid), [*_RETURN_FIELDS, "embedding"] if cid in wanted else _RETURN_FIELDS)
        hits, found = {}, {}
        for cid, values in zip(chunk_ids, pipe.execute() if chunk_ids else [], strict=True):
            if values[0] is None:  # no document id: the chunk is gone
                continue
            row = {name: _decode(value) for name, value in zip(_RETURN_FIELDS, values) if value is not None}
            row["chunk_id"] = cid
            hits[cid] = _hit(row, 0.0)
            if cid in wanted and values[-1]:
                found[cid] = decode_vector(values[-1], self.dims)
        return hits, found

    def chunk_counts(self) -> dict[str, int]:
        """How many chunks the index holds per document (one aggregation): ``{document id: count}``."""
        if self.built_with() is None:
            return {}
        request = AggregateRequest("*").group_by("@document_id", reducers.count().alias("n")).limit(0, _MAX_GROUPS).dialect(2)
        rows: list[Any] = _unless_missing(lambda: self.client.ft(self.index.name).aggregate(request).rows, [])
        counts = {}
        for row in rows:  # [b"document_id", b"doc-…", b"n", b"7"]
            fields = {_decode(k): _decode(v) for k, v in zip(row[::2], row[1::2], strict=False)}
            counts[fields["document_id"]] = int(fields["n"])
        return counts

    def embeddings(self, chunk_ids: list[str]) -> dict[str, np.ndarray]:
        """Stored embeddings of the given chunks as float32 arrays of shape ``(dims,)`` (missing ids are left out)."""
        pipe = self.client.pipeline(transaction=False)
        for cid in chunk_ids:
            pipe.hget(self.key(cid), "embedding")
        return {cid: decode_vector(raw, self.dims) for cid, raw in zip(chunk_ids, pipe.execute()) if raw}

    def chunks_by_id(self, chunk_ids: list[str], vector: np.ndarray, *, texts: bool = True) -> dict[str, ChunkHit]:
        """Stored chunks by id, each scored by its cosine similarity to ``vector`` (one pipelined round trip).

        Args:
            chunk_ids: ids to read (unknown ones are left out; a repeated id is read once).
            vector: the question's embedding, shape ``(dims,)``, unit norm (stored chunks are unit norm too).
            texts: False: leave out the text, context and pictures (the hits carry ``""``), for ranking many
                candidates and reading the texts of the kept ones only (:meth:`read_hits`).

        Returns:
            chunk id → hit, in the order asked.
        """
        fields = _HIT_FIELDS if texts else _SCORING_FIELDS
        pipe = self.client.pipeline(transaction=False)
        for cid in dict.fromkeys(chunk_ids):
            pipe.hmget(self.key(cid), [*fields, "embedding"])
        found: dict[str, ChunkHit] = {}
        for values in pipe.execute():
            if values[0] is None or values[-1] is None:
                continue
            row = {f: (v.decode() if isinstance(v, bytes) else v or "") for f, v in zip(fields, values[:-1], strict=True)}
            score = float(np.dot(decode_vector(values[-1], self.dims), vector))
            found[row["chunk_id"]] = _hit(row, round(score, 6))
        return found

    def count(self) -> int:
        """Number of chunks in the index (0 when it does not exist)."""
        if self.built_with() is None:
            return 0
        return _unless_missing(lambda: int(self.client.ft(self.index.name).search(Query("*").paging(0, 0).dialect(2)).total), 0)

    def drop(self) -> None:
        """Delete the index, every chunk of the Topic and the record of the embedder it was built with."""
        if self.index.exists():
            self.index.delete(drop=True)
        self.client.delete(self.record_key, self.files_key, self.names_key, self.terms_key)
        _PROFILES.pop(self.index.name, None)

    def files_generation(self) -> str:
        """A token that changes whenever a file gains its first chunks, loses its last or is renamed.

        An index written before the token was kept gets one here (set only if still missing).
        """
        token = self.client.get(self.files_key)
        if token is None:
            self.client.set(self.files_key, uuid.uuid4().hex, nx=True)
            token = self.client.get(self.files_key) or b""
        return _decode(token)

    def file_names(self) -> dict[str, str]:
        """``{document id: file name}`` of every document with chunks in the index.

        Read from a hash that every chunk swap keeps up to date in its transaction (one
        ``HGETALL``, whatever the number of chunks). An index written before the hash was kept
        gets it here, once, from one aggregation over its chunks; the hash is marked complete
        (field ``""``) only when no file appeared, went or was renamed in between (``WATCH`` on
        the names and on the files token), else the next call tries again.
        """
        if self.built_with() is None:
            return {}
        stored = {_decode(k): _decode(v) for k, v in self.client.hgetall(self.names_key).items()}
        if stored.pop(_NAMES_COMPLETE, None) is not None:
            return stored
        with self.client.pipeline(transaction=True) as pipe:
            pipe.watch(self.names_key, self.files_key)  # a file that appears, goes or is renamed sets files_key
            names = self._aggregated_names()
            pipe.multi()
            pipe.delete(self.names_key)
            pipe.hset(self.names_key, mapping={**names, _NAMES_COMPLETE: "1"})  # type: ignore[dict-item]  # redis-py types the mapping's key invariantly
            try:
                pipe.execute()
            except redis.WatchError:  # a chunk swap ran meanwhile: these names may be stale, not kept
                pass
        return names

    def _aggregated_names(self) -> dict[str, str]:
        """``{document id: file name}`` from one aggregation over every chunk of the index."""
        request = (
            AggregateRequest("*")
            .load("@document_id", "@file_name")
            .group_by(["@document_id", "@file_name"])
            .limit(0, _MAX_GROUPS)
            .dialect(2)
        )
        rows: list[Any] = _unless_missing(lambda: self.client.ft(self.index.name).aggregate(request).rows, [])
        names = {}
        for row in rows:  # [b"document_id", b"doc-…", b"file_name", b"a.txt"]
            fields = {_decode(k): _decode(v) for k, v in zip(row[::2], row[1::2], strict=False)}
            if fields.get("document_id"):
                names[fields["document_id"]] = fields.get("file_name", "")
        return names

    def common_phrases(self, phrases: Mapping[str, Sequence[str]], *, at_least: int, share: float) -> set[str]:
        """The phrases (space-separated words) that are common words rather than names; one round trip.

        A phrase is common when RediSearch finds its words in order (stemmed; stop words may sit
        between them) in more than ``at_least`` chunks and more than ``share`` of all chunks, not
        counting the chunks of the documents it names (a long file that repeats its own name is
        still a name). A phrase whose count cannot be read (an error, stop words only) counts as common.

        Args:
            phrases: phrase → ids of the documents it names.
        """
        if not phrases:
            return set()
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("FT.SEARCH", self.index.name, "*", "LIMIT", 0, 0, "DIALECT", 2)
        asked = []
        for phrase, document_ids in phrases.items():
            words = phrase.split()
            kept = [w for w in words if w not in REDISEARCH_STOP_WORDS]  # not indexed: a phrase holding one never matches
            if not kept:
                continue
            others = "".join(f" -@document_id:{{{_escape_term(d)}}}" for d in document_ids)
            query = (
                f"(@text:({' '.join(_escape_term(w) for w in kept)}){others}) "
                f"=> {{ $slop: {len(words) - len(kept)}; $inorder: true; }}"
            )
            pipe.execute_command("FT.SEARCH", self.index.name, query, "LIMIT", 0, 0, "DIALECT", 2)
            asked.append(phrase)
        replies = pipe.execute(raise_on_error=False)
        limit = max(at_least, share * _search_total(replies[0]))
        counted = {
            p
            for p, reply in zip(asked, replies[1:], strict=True)
            if not isinstance(reply, Exception) and _search_total(reply) <= limit
        }
        return set(phrases) - counted

    def best_chunks(self, document_ids: list[str], vector: np.ndarray, *, _again: bool = False) -> dict[str, ChunkHit]:
        """Each document's chunk most similar to ``vector`` (exact: a KNN query restricted to the document).

        Args:
            document_ids: the documents (one pipelined query each; an unknown id is left out).
            vector: shape ``(dims,)``, unit norm.

        Returns:
            ``{document id: hit}``; ``score`` is the cosine similarity.
        """
        if not document_ids:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for document_id in document_ids:
            pipe.execute_command(*self._knn_command(vector, 1, within=document_id))
        replies = pipe.execute(raise_on_error=False)
        if not _again and self.index.name in _PROFILES and all(isinstance(r, Exception) for r in replies):
            _PROFILES.pop(self.index.name, None)  # the index may have been made anew with another vector type
            return self.best_chunks(document_ids, vector, _again=True)
        found = {}
        for document_id, reply in zip(document_ids, replies, strict=True):
            if isinstance(reply, Exception):
                continue
            for hit in _vector_hits(reply, self.prefix)[:1]:
                found[document_id] = hit
        return found


def candidate_terms(frequencies: Mapping[str, int], terms: list[str], *, postings: int | None = None) -> list[str]:
    """The terms whose chunks are fetched as keyword candidates: the rarest, up to a budget of postings.

    RediSearch scores every chunk that holds any term of the candidate query before it cuts the
    best ``limit``, so the query costs in proportion to the summed document frequencies of its
    terms (their postings). A term held by a fifth of a large index (``film``, ``state``) costs
    more than all the rare ones together, while its BM25 weight is low (IDF ≈ 1.6 at 20 %, against
    ≈ 5 for a term in 0.6 % of the chunks). So terms are taken rarest first while their postings
    add up to at most :data:`CANDIDATE_POSTINGS` (the rarest :data:`CANDIDATE_TERMS_KEPT` always);
    the others still count in the BM25 score of every candidate (their frequencies are read from
    the candidate's text). The cost of a keyword search then stays flat as the index grows; in an
    index of a few thousand chunks every term is searched, as before. This is the idea of
    MaxScore (Turtle & Flood 1995, "Query evaluation: strategies and optimizations"): a term whose
    weight cannot lift a chunk into the top results need not be walked, here without its exactness
    check (the candidates are cut before scoring anyway).

    Args:
        frequencies: term → how many chunks hold it (every term of ``terms``, each > 0).
        terms: the question's terms, in its order.
        postings: the budget; ``None``: :data:`CANDIDATE_POSTINGS`.

    Returns:
        The terms to search, in the order of ``terms``.
    """
    budget = CANDIDATE_POSTINGS if postings is None else postings
    kept: set[str] = set()
    walked = 0
    for term in sorted(terms, key=lambda t: frequencies[t]):
        if len(kept) >= CANDIDATE_TERMS_KEPT and walked + frequencies[term] > budget:
            break
        kept.add(term)
        walked += frequencies[term]
    return [t for t in terms if t in kept]


def keyword_candidates_limit(k: int) -> int:
    """How many keyword candidates a search for the ``k`` best fetches from RediSearch before BM25 scoring:
    ``max(KEYWORD_CANDIDATES_PER_HIT * k, MIN_KEYWORD_CANDIDATES)``."""
    return max(KEYWORD_CANDIDATES_PER_HIT * int(k), MIN_KEYWORD_CANDIDATES)


def remembered_frequencies(index_name: str, stems: Sequence[str]) -> list[int] | None:
    """The document frequencies of ``stems`` this process read last from the index ``index_name``
    (:func:`remember_frequencies`), in their order; ``None`` when one of them was never read.

    Only a guess, to send a keyword candidate query in the same round trip as the frequencies
    themselves (:meth:`ChunkIndex.search_hybrid`), which then decide whether its reply is used.
    """
    known = _FREQUENCIES.get(index_name)
    if not known:
        return None
    try:
        return [known[stem] for stem in stems]
    except KeyError:
        return None


def remember_frequencies(index_name: str, stems: Sequence[str], counts: Sequence[int]) -> None:
    """Keep the document frequencies ``counts`` of ``stems`` just read from the index ``index_name``
    (at most :data:`_FREQUENCIES_KEPT` stems an index: past that its stems are forgotten and read anew)."""
    known = _FREQUENCIES.setdefault(index_name, {})
    if len(known) + len(stems) > _FREQUENCIES_KEPT:
        known.clear()
    known.update(zip(stems, counts, strict=True))


#: ``{index name: {stem: chunks holding it}}``: the keyword document frequencies this process read last
#: (:func:`remembered_frequencies`); a guess that the frequencies read beside it confirm or overrule.
_FREQUENCIES: dict[str, dict[str, int]] = {}
#: Most stems remembered an index (about 100 bytes each).
_FREQUENCIES_KEPT = 100_000


def bm25_rank(
    rows: Sequence[tuple[ChunkHit, str]], weights: Mapping[str, float], identifiers: Sequence[str], k: int
) -> list[ChunkHit]:
    """The ``k`` best keyword candidates by Okapi BM25 (:func:`bm25_score`), read from their packed term counts.

    Each candidate's frequencies of the question's terms are read from its packed counts
    (:func:`pack_term_counts`) in one scan by a regular expression made once for all candidates (about half the
    time of one substring search per term and candidate, the same counts). When ``identifiers`` (the
    question's terms with letters and digits) are given and some candidate holds one, only those
    candidates are ranked. The average length is that of the candidates ranked.

    Args:
        rows: ``(hit, packed counts)`` of each candidate, in RediSearch's order.
        weights: term → its weight (IDF times the code weight), every term of the question held by some chunk.
        identifiers: the identifiers among the terms.
        k: how many to return.

    Returns:
        Up to ``k`` hits with a BM25 score > 0 (rounded to 6 decimals), best first; ties keep the order of ``rows``.
    """
    counts = _packed_counts_of(weights)
    counted = []
    for hit, packed in rows:
        found = {term: n for term, count in counts.findall(packed) if (n := int(count))}
        counted.append((hit, found, packed_length(packed)))
    if identifiers:
        holding = [row for row in counted if any(t in row[1] for t in identifiers)]
        if holding:  # only chunks with the E-4711 asked about get a keyword vote in fusion
            counted = holding
    average = sum(length for _, _, length in counted) / len(counted) if counted else 1.0
    scored = [
        (round(bm25_score(found, weights, average_length=average, length=length), 6), hit) for hit, found, length in counted
    ]
    best = sorted((pair for pair in scored if pair[0] > 0), key=lambda pair: -pair[0])[:k]  # stable: ties keep RediSearch's order
    return [replace(hit, score=score) for score, hit in best]


def bm25_idf(total: int, matching: int) -> float:
    """BM25 inverse document frequency ``ln(1 + (N - n + 0.5) / (n + 0.5))``: > 0 even for a term in every chunk.

    Args:
        total: chunks in the index (N).
        matching: chunks holding the term (n, ``0 < n <= N``).
    """
    return math.log(1.0 + (total - matching + 0.5) / (matching + 0.5))


def chunk_terms(file_name: str, text: str, keywords: Iterable[str]) -> Counter[str]:
    """Term frequencies of a chunk for BM25: its file's name and text counted
    (:func:`~ragtopics.text.keywords.term_counts`), then each keyword of its keyword field that they
    lack (a model's enrichment keyword) once.

    Args:
        file_name: the chunk's file name (its stem is counted: ``Leland.txt`` → ``leland``).
        text: the chunk's text.
        keywords: the words of its keyword field.
    """
    counts = term_counts(f"{file_stem(file_name)}\n{text}")
    for keyword in keywords:
        if keyword not in counts:
            counts[keyword] = 1
    return counts


def pack_term_counts(counts: Mapping[str, int]) -> str:
    """A chunk's term frequencies as stored in its hash (:data:`TERM_COUNTS_FIELD`): its length, then
    ``term:count`` pairs, space separated, with a space at the end (``"3 pump:2 p7:1 "``).

    The length is the sum of every count; a term holding ``:`` (only a model's enrichment keyword can)
    counts in the length but is not listed, as no query term can hold one. A keyword search reads the counts of a
    question's terms with one regular-expression scan (:func:`bm25_rank`), which costs less than splitting the field.

    Args:
        counts: term → occurrences (> 0), as :func:`chunk_terms` gives them.
    """
    return f"{sum(counts.values())}" + "".join(f" {t}:{c}" for t, c in counts.items() if ":" not in t) + " "


def packed_count(packed: str, term: str) -> int:
    """How often ``term`` (no space or ``:``) occurs in a chunk, from its packed counts (:func:`pack_term_counts`); 0 when not.

    One substring search: for a single term; :func:`bm25_rank` reads every term of a question at once.
    """
    needle = f" {term}:"
    at = packed.find(needle)
    if at < 0:
        return 0
    start = at + len(needle)
    return int(packed[start : packed.index(" ", start)])


def _packed_counts_of(terms: Iterable[str]) -> re.Pattern[str]:
    """A pattern whose ``findall`` over packed counts gives ``(term, count)`` for each of ``terms`` the chunk holds.

    Each term is matched whole: it follows a space and is followed by ``:`` (a term never holds either), so
    ``film`` does not match inside ``films:2``.
    """
    return re.compile(" (" + "|".join(re.escape(t) for t in terms) + r"):(\d+)")


def packed_length(packed: str) -> int:
    """A chunk's length in terms (the sum of its counts) from its packed counts (:func:`pack_term_counts`)."""
    return int(packed[: packed.index(" ")])


def chunk_term_counts(hit: ChunkHit, keywords: list[str]) -> Counter[str]:
    """:func:`chunk_terms` of a hit, for a chunk stored before its counts were (:data:`TERM_COUNTS_FIELD`).

    Kept for the :data:`_TERM_CACHE_SIZE` chunks used last: a chunk id is a hash of its document (Topic
    and file name) and text, so an id always has the same counts (the keywords, set at upload, are part
    of the key as well).
    """
    key = (hit.chunk_id, len(keywords))
    with _TERM_CACHE_LOCK:
        cached = _TERM_CACHE.get(key)
        if cached is not None:
            _TERM_CACHE.move_to_end(key)
            return cached
    counts = chunk_terms(hit.file_name, hit.text, keywords)
    with _TERM_CACHE_LOCK:
        _TERM_CACHE[key] = counts
        if len(_TERM_CACHE) > _TERM_CACHE_SIZE:
            _TERM_CACHE.popitem(last=False)
    return counts


#: Chunks whose term frequencies :func:`chunk_term_counts` keeps (about 2 KB each).
_TERM_CACHE_SIZE = 20_000
_TERM_CACHE: OrderedDict[tuple[str, int], Counter[str]] = OrderedDict()
_TERM_CACHE_LOCK = threading.Lock()


def bm25_score(
    counts: Mapping[str, int],
    weights: Mapping[str, float],
    *,
    average_length: float,
    k1: float = BM25_K1,
    b: float = BM25_B,
    length: int | None = None,
) -> float:
    """Okapi BM25 of one chunk for query terms with weights (IDF × term weight).

    Args:
        counts: the chunk's term frequencies (term → occurrences; at least those of the query terms).
        weights: query term → its weight (``bm25_idf`` times the code weight).
        average_length: mean length of the scored chunks (> 0).
        k1, b: term-frequency saturation and length normalisation.
        length: the chunk's length in terms; ``None``: the sum of ``counts`` (then every term's count).

    Returns:
        ``Σ_t w_t · tf (k1 + 1) / (tf + k1 (1 - b + b · len / avg))``, 0 when no term occurs.
    """
    norm = k1 * (1 - b + b * (sum(counts.values()) if length is None else length) / max(average_length, 1e-9))
    score = 0.0
    for term, weight in weights.items():
        tf = counts.get(term, 0)
        if tf:
            score += weight * tf * (k1 + 1) / (tf + norm)
    return score


#: The stored fields of a chunk that make a :class:`ChunkHit`.
_HIT_FIELDS = ("chunk_id", "document_id", "file_name", "position", "text", "context", "pictures", "pages", "version")
#: The fields of a chunk read to rank it among many (its cosine comes from the embedding): all but the texts.
_SCORING_FIELDS = ("chunk_id", "document_id", "file_name", "position", "pages", "version")


def _hit(row: dict, score: float) -> ChunkHit:
    """A search row (:func:`_search_rows`) as a hit; a field the row lacks is empty (position 0)."""
    return ChunkHit(
        chunk_id=row["chunk_id"],
        document_id=row.get("document_id", ""),
        file_name=row.get("file_name", ""),
        position=int(row.get("position") or 0),
        text=row.get("text", ""),
        context=row.get("context", ""),
        pictures=row.get("pictures", "") or "",
        pages=parse_pages(row.get("pages", "") or ""),
        version=row.get("version", "") or "",
        score=score,
    )


def _vector_hits(reply, prefix: str) -> list[ChunkHit]:
    """The hits of a KNN reply (:meth:`ChunkIndex._knn_command`), nearest first.

    RediSearch's COSINE metric returns a distance, 1 - cosine similarity; the score is the
    similarity, clipped at 1 (half-precision vectors put a chunk's similarity to itself a hair
    above 1). Hits are ordered by the unclipped distance, then chunk id, so the order never
    depends on the reply's (unsorted) order. A RESP2 reply is read without decoding its field
    names (:func:`_hit_from_bytes`), which takes about a third off the reading of ten rows.
    """
    if isinstance(reply, dict):
        ranked = sorted((float(row["vector_distance"]), row["chunk_id"], row) for row in _search_rows(reply, prefix))
        return [_hit(row, min(1.0, 1.0 - distance)) for distance, _, row in ranked]
    skip = len(prefix) + 1
    rows = []
    for key, fields in zip(reply[1::2], reply[2::2], strict=False):
        row = dict(zip(fields[::2], fields[1::2], strict=False))
        rows.append((float(row[b"vector_distance"]), _decode(key)[skip:], row))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [_hit_from_bytes(chunk_id, row, min(1.0, 1.0 - distance)) for distance, chunk_id, row in rows]


def _hit_from_bytes(chunk_id: str, row: dict, score: float) -> ChunkHit:
    """A RESP2 search row (field name → value, both bytes) as a hit; a field the row lacks is empty (position 0)."""
    get = row.get
    pages = get(b"pages")
    return ChunkHit(
        chunk_id=chunk_id,
        document_id=_decode(get(b"document_id", b"")),
        file_name=_decode(get(b"file_name", b"")),
        position=int(get(b"position") or 0),
        text=_decode(get(b"text", b"")),
        score=score,
        context=_decode(get(b"context", b"")),
        pictures=_decode(get(b"pictures", b"")),
        pages=parse_pages(_decode(pages)) if pages else (),
        version=_decode(get(b"version", b"")),
    )


def decode_vector(raw: bytes, dims: int) -> np.ndarray:
    """A stored embedding as a float32 array of shape ``(dims,)``, whichever type its index stores
    (told apart by size: 2 bytes a value for FLOAT16, 4 for FLOAT32).

    Raises:
        ValueError: when ``raw`` holds neither ``dims`` half nor ``dims`` single floats.
    """
    if len(raw) == 2 * dims:
        return np.frombuffer(raw, dtype=np.float16).astype(np.float32)
    if len(raw) == 4 * dims:
        return np.frombuffer(raw, dtype=np.float32)
    raise ValueError(f"a stored embedding of {len(raw)} bytes is not {dims} float16 or float32 values")


def _record_profile(record: Mapping) -> tuple[str, int]:
    """``(vector type, EF_RUNTIME)`` from an index record as HGETALL returns it (bytes keys and values)."""
    ef = record.get(b"ef_runtime")
    return _decode(record.get(b"datatype", b"")), int(ef) if ef else EF_RUNTIME_BEFORE


def _record_built(record: Mapping) -> tuple[str, int]:
    """``(model, dims)`` from an embedder record as HGETALL returns it (bytes or str keys and values)."""
    fields = {_decode(k): _decode(v) for k, v in record.items()}
    return fields.get("embedding_model", ""), int(fields.get("dims", 0))


def _search_rows(reply, prefix: str = "") -> list[dict[str, str]]:
    """The documents of a raw ``FT.SEARCH`` reply as ``{field: value}``, in reply order.

    Reads both protocols: RESP3 (a map with ``results``, each with ``id`` and ``extra_attributes``)
    and RESP2 (``[total, id, [field, value, ...], id, [...], ...]``). With ``prefix`` (the chunk key
    prefix), each row's ``chunk_id`` is its key without ``prefix:``.
    """
    if isinstance(reply, dict):
        pairs = [
            (result.get(b"id", result.get("id", b"")), result.get(b"extra_attributes", result.get("extra_attributes", {})))
            for result in reply.get(b"results") or reply.get("results") or []
        ]
        rows = [(key, {_decode(k): _decode(v) for k, v in attributes.items()}) for key, attributes in pairs]
    else:
        rows = [
            (key, {_decode(k): _decode(v) for k, v in zip(fields[::2], fields[1::2], strict=False)})
            for key, fields in zip(reply[1::2], reply[2::2], strict=False)
        ]
    if prefix:
        skip = len(prefix) + 1
        for key, row in rows:
            row["chunk_id"] = _decode(key)[skip:]
    return [row for _, row in rows]


def _search_total(reply) -> int:
    """The match count of a raw ``FT.SEARCH`` reply (either protocol); 0 for an error."""
    if isinstance(reply, Exception):
        return 0
    if isinstance(reply, dict):
        return int(reply.get(b"total_results") or reply.get("total_results") or 0)
    return int(reply[0])


def _raiser(exc: Exception) -> Callable[[], list]:
    """A callable that raises ``exc`` (for :func:`_unless_missing` on an error a pipeline returned)."""

    def raise_it() -> list:
        raise exc

    return raise_it


def _unless_missing(query: Callable[[], T], default: T) -> T:
    """``query()``, or ``default`` when RediSearch says the index does not exist: it was dropped behind
    its embedder record's back, which the existence check before each search no longer asks for
    (its wording differs between versions; redisvl wraps it in ``RedisSearchError``)."""
    try:
        return query()
    except (redis.ResponseError, RedisSearchError) as exc:
        text = str(exc).lower()
        if "no such index" in text or "unknown index" in text:
            return default
        raise


def parse_pages(stored: str) -> tuple[int, ...]:
    """The pages of a stored chunk from their text (``"3 4"`` → ``(3, 4)``); anything not a page number is ignored."""
    return tuple(int(p) for p in stored.split() if p.isdigit() and int(p) > 0)


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _escape_term(term: str) -> str:
    """Escape a keyword for a RediSearch query (every non-alphanumeric character)."""
    return "".join(ch if ch.isalnum() else f"\\{ch}" for ch in term)


def _by_document(rows: list[dict]) -> dict[str, dict[str, str]]:
    """Group query rows as ``{document id: {chunk id: file name}}``."""
    out: dict[str, dict[str, str]] = {}
    for row in rows:
        out.setdefault(row["document_id"], {})[row["chunk_id"]] = row.get("file_name", "")
    return out
