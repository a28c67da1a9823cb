"""Phase A for a GraphRAG Topic: from a document's chunks to its share of the knowledge graph.

The upload pipeline (:mod:`ragtopics.ingest.pipeline`) reads, chunks and embeds a file
as for a RAG Topic; for a GraphRAG Topic it then calls :func:`plan_graph` (slow, no
writes: extraction per chunk, deduplication against the graph, entity embeddings)
and, inside the document's lock before the row and the chunk swap, :func:`apply_graph`
(removes the provenance of chunks the new version no longer has, writes the rest).

What each chunk says about an entity or relationship is written with the chunk's
mention (:attr:`GraphPlan.mentions`), so the graph rebuilds a description from the
chunks that support it now: a re-upload or a delete leaves nothing of what only the
removed chunks said (:meth:`~ragtopics.graph.store.GraphStore.remove_chunks`), at no
model call. An entity's type is part of its identity (entities of different types never
merge), so no chunk can leave a stale type behind; its vector is made of its name, so a
description rebuilt needs no new embedding.

Chunk ids are content hashes, so a re-upload with one edited paragraph keeps the ids
of the unchanged chunks; their extraction results come from a cache keyed by chunk
text, extraction method and prompt version (:class:`ExtractionCache`), so only the
changed chunks are extracted again. The cache also makes an extraction resumable: a
job killed half-way finds its finished chunks there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import redis

from ragtopics.graph.corrections import load_rules
from ragtopics.graph.databases import graph_client
from ragtopics.graph.dedup import DedupResult, ask_model, deduplicate, partner_keys
from ragtopics.graph.extract import choose_method, extract_chunk, extraction_version, looks_like_toc_or_index
from ragtopics.graph.model import (
    ChunkExtraction,
    Entity,
    MergeRecord,
    Relationship,
    entity_id_for,
    graph_settings,
    normalize_name,
)
from ragtopics.graph.store import GraphStore, RemovalReport
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.storage.chunk_index import ChunkRecord
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: ``progress(phase, done, total)``, as in the upload pipeline.
ProgressFn = Callable[[str, int, int], None]

#: How long an extraction result stays cached, in seconds (30 days; refreshed on every hit).
CACHE_TTL_S = 30 * 24 * 3600


def graph_store(rt: Runtime, topic) -> GraphStore:
    """The graph store of a GraphRAG Topic: on its Graph Database, named by its Collection Name (else its id).

    Raises:
        StoreUnavailableError: when its Graph Database is no longer registered.
    """

    cfg = topic.settings
    database, collection = (cfg.graph_database, cfg.collection_name) if isinstance(cfg, GraphRagTopicSettings) else ("", "")
    return GraphStore(graph_client(rt, database or ""), topic.id, collection or "")


class ExtractionCache:
    """Extraction results of a Topic in Redis, keyed by chunk text, method and prompt version.

    One hash per Topic (``rt:{topic_id}:xcache``, one of the Topic's keys of one name,
    :data:`ragtopics.topics.keys.TOPIC_KEYS`), a field per extraction; each field expires
    :data:`CACHE_TTL_S` after its last use (``HEXPIRE``, Redis 7.4 or later), so the cache of a large
    Topic is one key, removed at once by a Topic delete, and no walk of the keyspace is needed.

    Entries of earlier versions, one string key each (``rt:{topic_id}:xcache:<sha1>``, same TTL), are
    still read, and moved into the hash when found.
    """

    def __init__(self, client: redis.Redis, topic_id: str):
        self.client = client
        self.hash_key = f"rt:{topic_id}:xcache"
        self.prefix = self.hash_key + ":"  # the string keys of earlier versions

    def key(self, text: str, method: str, version: str) -> str:
        """The cache key of one chunk's extraction (its field in the Topic's hash)."""
        return hashlib.sha1(f"{method}\0{version}\0{text}".encode()).hexdigest()

    def get(self, key: str) -> ChunkExtraction | None:
        """The cached extraction, or None (see :meth:`get_many`)."""
        return self.get_many([key])[key]

    def get_many(self, keys: list[str]) -> dict[str, ChunkExtraction | None]:
        """The cached extraction of each key (None: not cached), read in one round trip (two when some are
        missing: the string keys of earlier versions); each one found lives :data:`CACHE_TTL_S` longer.

        Returns:
            ``{key: extraction or None}`` for every key given.
        """
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.hash_key, keys)
        pipe.hexpire(self.hash_key, CACHE_TTL_S, *keys)
        raws, _ = pipe.execute()
        found = dict(zip(keys, raws, strict=True))
        missing = [key for key, raw in found.items() if raw is None]
        if missing:
            older = dict(zip(missing, self.client.mget([self.prefix + key for key in missing]), strict=True))
            moved = {key: raw for key, raw in older.items() if raw is not None}
            if moved:
                self._store(moved)
                self.client.delete(*[self.prefix + key for key in moved])
                found.update(moved)
        return {key: None if raw is None else ChunkExtraction.model_validate_json(raw) for key, raw in found.items()}

    def put(self, key: str, extraction: ChunkExtraction) -> None:
        """Cache an extraction."""
        self._store({key: extraction.model_dump_json()})

    def _store(self, entries: Mapping[str, bytes | str]) -> None:
        """Write fields of the hash, each expiring :data:`CACHE_TTL_S` from now (one round trip)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.hash_key, mapping=dict(entries.items()))
        pipe.hexpire(self.hash_key, CACHE_TTL_S, *entries)
        pipe.execute()


@dataclass
class GraphPlan:
    """What a document version adds to the graph, computed before anything is written.

    Attributes:
        chunks: ``(chunk_id, position)`` of every chunk of the version.
        entities, relationships: after deduplication, with provenance in this version's chunks.
        mentions: what each chunk of the version says about each entity: one entity per (entity, chunk),
            under the kept id and name, with that chunk's description and the names it used (what
            the graph stores, so that a description can be rebuilt from the chunks left).
        embeddings: entity id → L2-normalised vector of its name, for the entities new to the graph.
        subjects: ``(entity_id, chunk_id)``: the chunk is about the entity (its heading names it, :func:`subject_keys`).
        merges: the deduplication decisions (for the DEV report).
        method: ``NLP`` or ``LLM``.
        extracted, cached, skipped: chunks extracted now, taken from the cache, skipped as a
            table of contents or index.
        failed: chunk id → why its extraction failed (the chunk is stored without entities).
        checked_indexes: the graph's indexes (``db.indexes()`` rows) as read when planning checked them and the
            conversions of earlier versions' graphs, under the Topic's graph write lock that the write holds too
            (:meth:`~ragtopics.graph.store.GraphStore.checked_indexes`); None: the write checks them again.
        embeddings_are_new: every entity of ``embeddings`` had no vector when planned under that lock (none is
            replaced; a graph import's plan embeds stored entities too).
    """

    chunks: list[tuple[str, int]]
    entities: list[Entity] = field(default_factory=list)
    relationships: list[Relationship] = field(default_factory=list)
    mentions: list[Entity] = field(default_factory=list)
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    subjects: set[tuple[str, str]] = field(default_factory=set)
    merges: list[MergeRecord] = field(default_factory=list)
    method: str = ""
    extracted: int = 0
    cached: int = 0
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    checked_indexes: list | None = field(default=None, repr=False, compare=False)
    embeddings_are_new: bool = False

    def summary(self) -> dict:
        """Counts for the Indexed Documents list (``indexed_with["graph"]``)."""
        return {
            "method": self.method,
            "entities": len(self.entities),
            "relationships": len(self.relationships),
            "chunks_extracted": self.extracted,
            "chunks_cached": self.cached,
            "chunks_skipped": len(self.skipped),
            "chunks_failed": len(self.failed),
            "merges": len(self.merges),
            "new_entities": len(self.embeddings),
        }


@dataclass(frozen=True)
class ExtractionSetup:
    """How a Topic's chunks are extracted now: method, prompt, their version, and the cache.

    Attributes:
        method: ``NLP`` or ``LLM`` (:func:`~ragtopics.graph.extract.choose_method`).
        prompt: the Topic's graph extraction prompt (LLM).
        version: what the cache key holds besides the text (method, model, prompt).
        cache: the Topic's extraction cache.
    """

    method: str
    prompt: PromptTemplate
    version: str
    cache: ExtractionCache


def extraction_setup(rt: Runtime, topic) -> ExtractionSetup:
    """The extraction method, prompt, version and cache of a Topic, as the next extraction would use them."""
    method = choose_method(topic.settings, rt.gateway)
    prompt = resolve_prompts(rt, topic.id)["graph_extraction"]  # the Prompts tab's override, or the default
    return ExtractionSetup(method, prompt, extraction_version(method, rt, prompt), ExtractionCache(rt.redis, topic.id))


def extract_cached(
    rt: Runtime, setup: ExtractionSetup, record: ChunkRecord, trace: Trace
) -> tuple[ChunkExtraction | None, bool, str]:
    """One chunk's extraction, from the cache or extracted now (and cached).

    Returns:
        ``(extraction, extracted_now, error)``: ``extraction`` is None when the extraction
        failed (``error`` says why; nothing is cached, so a later upload tries again).
    """
    key = setup.cache.key(extraction_text(record), setup.method, setup.version)
    cached = setup.cache.get(key)
    if cached is not None:
        return cached, False, ""
    outcome = extract_chunk(extraction_text(record), setup.method, rt.gateway, trace=trace, prompt=setup.prompt)
    if outcome.failed:
        log.warning("graph extraction failed for a chunk of %s: %s", record.file_name, outcome.error)
        return None, True, outcome.error
    setup.cache.put(key, outcome.extraction)
    return outcome.extraction, True, ""


#: Entities embedded per call while planning a document's graph; the job checks between calls whether it was stopped.
ENTITY_EMBED_BATCH = 256


def plan_graph(
    rt: Runtime,
    topic,
    records: list[ChunkRecord],
    report: ProgressFn,
    trace: Trace,
    *,
    known_failures: dict[str, str] | None = None,
    extracted_elsewhere: set[str] | None = None,
) -> GraphPlan:
    """Extract, deduplicate and embed the entities of a document version's chunks (no writes but the cache).

    :func:`extract_graph` then :func:`complete_plan`; an upload that writes the plan runs the second
    under the Topic's graph write lock (:func:`~ragtopics.storage.locks.graph_write_lock`).

    Args:
        records: the chunks of the version, as they will be stored.
        report: progress per chunk (phase ``extracting``), then per batch of entities embedded (phase
            ``embedding entities``); it raises when the job was superseded or the document deleted.
        known_failures: chunk id → error of extractions that already failed in an extraction job
            (not tried again: the chunk is stored without entities).
        extracted_elsewhere: chunk ids extracted by extraction jobs of this upload; their cache
            hits count as extracted, not cached, in the plan's summary.

    Returns:
        The plan to apply with :func:`apply_graph`.
    """
    extracted = extract_graph(
        rt, topic, records, report, trace, known_failures=known_failures, extracted_elsewhere=extracted_elsewhere
    )
    return complete_plan(rt, topic, records, extracted, report, trace)


class NameEmbedding:
    """Entity texts embedded in a thread of their own while the upload goes on (started by :func:`extract_graph`).

    The bundled model embeds short texts with one torch thread (:data:`~ragtopics.llm.embedding.SHORT_TEXT_THREADS`),
    and what follows the extraction (waiting for the Topic's graph write lock, reading the deduplication partners
    from the graph server, deduplication) mostly waits for the server: on a host of two cores the two overlap.
    The vectors are those :func:`_embed_names` gives (same texts, same batches of :data:`ENTITY_EMBED_BATCH`).
    The model calls are recorded on a trace of the thread's own and moved into the upload's trace by :meth:`vectors`,
    in one ``embed_entities`` step marked ``overlapped`` whose duration is the thread's. Progress is reported before
    each batch, the first by the caller; a report that raises (the upload was superseded or its document deleted)
    stops the embedding there, and :meth:`vectors` raises its error.

    Args:
        rt: the runtime (its gateway embeds).
        texts: the entity texts (:func:`entity_text`) to embed, distinct.
        trace: the upload's trace (only read here: its kind, subject and LLM Overrides).
        report: progress (phase ``embedding entities``), called from the thread before each batch after the first.
        stored: how many of the upload's entities already had a vector (recorded on the step).
    """

    def __init__(self, rt: Runtime, texts: list[str], trace: Trace, report: ProgressFn, *, stored: int):
        self.texts = texts
        self._report = report
        self.stored = stored
        self._trace = trace.child(trace.kind, trace.subject)  # Trace is not thread-safe: merged back in vectors()
        self._stop = threading.Event()
        self._found: dict[str, np.ndarray] = {}
        self._error: BaseException | None = None
        self._ms = 0.0
        self._thread = threading.Thread(target=self._run, args=(rt,), name="entity-names", daemon=True)
        self._thread.start()

    def _run(self, rt: Runtime) -> None:
        t0 = time.perf_counter()
        try:
            for start in range(0, len(self.texts), ENTITY_EMBED_BATCH):
                if self._stop.is_set():
                    return
                if start:
                    self._report("embedding entities", start, len(self.texts))
                batch = self.texts[start : start + ENTITY_EMBED_BATCH]
                vectors = rt.gateway.embed_short(batch, trace=self._trace, purpose="entity embedding")
                self._found.update(zip(batch, vectors, strict=True))
        except BaseException as exc:  # handed to the upload by vectors()
            self._error = exc
        finally:
            self._ms = (time.perf_counter() - t0) * 1000

    def vectors(self, trace: Trace) -> dict[str, np.ndarray]:
        """Wait for the thread; its model calls go into ``trace`` under an ``embed_entities`` step.

        Returns:
            Entity text → L2-normalised vector, for every text given.

        Raises:
            Whatever the embedding raised (ModelUnavailableError), or RuntimeError after :meth:`cancel`.
        """
        with trace.step("wait_entity_names"):  # what the thread still had to do when the upload needed the vectors
            self._thread.join()
        with trace.step("embed_entities", count=len(self.texts), stored=self.stored, overlapped=True) as event:
            for done in self._trace.events:
                trace.add(done.step, **done.data).duration_ms = done.duration_ms
            self._trace.events.clear()
        event.duration_ms = round(self._ms, 3)
        if self._error is not None:
            raise self._error
        if len(self._found) != len(self.texts):
            raise RuntimeError("the entity names were not embedded: the embedding was cancelled")
        return dict(self._found)

    def cancel(self) -> None:
        """Stop after the batch under way (the upload failed or was stopped); does not wait."""
        self._stop.set()


@dataclass
class ExtractedGraph:
    """The slow half of a plan (:func:`extract_graph`): what the chunks say, before deduplication against the graph.

    Attributes:
        plan: the plan with its chunks and extraction counts filled in.
        entities, relationships: what the chunks say, each with its chunk as provenance.
        names: the embedding of the entity texts (:func:`entity_text`) of the extracted entities the graph had no
            vector for, running (:class:`NameEmbedding`); None when there were none.
    """

    plan: GraphPlan
    entities: list[Entity]
    relationships: list[Relationship]
    names: NameEmbedding | None = None

    def name_vectors(self, trace: Trace) -> dict[str, np.ndarray]:
        """Entity text → vector of the names embedded since :func:`extract_graph` (waits for them)."""
        return self.names.vectors(trace) if self.names is not None else {}

    def cancel(self) -> None:
        """Stop the names' embedding (the upload does not go on to :func:`complete_plan`)."""
        if self.names is not None:
            self.names.cancel()


def extract_graph(
    rt: Runtime,
    topic,
    records: list[ChunkRecord],
    report: ProgressFn,
    trace: Trace,
    *,
    known_failures: dict[str, str] | None = None,
    extracted_elsewhere: set[str] | None = None,
) -> ExtractedGraph:
    """The slow half of :func:`plan_graph`, which needs no lock: extraction per chunk, then the vectors of the
    names found that the graph has none for, started in a thread (:class:`NameEmbedding`) that
    :func:`complete_plan` waits for (arguments as there)."""
    setup = extraction_setup(rt, topic)
    failures = known_failures or {}
    fresh = extracted_elsewhere or set()
    plan = GraphPlan(chunks=[(r.chunk_id, r.position) for r in records], method=setup.method)
    per_chunk: list[tuple[str, ChunkExtraction]] = []
    with trace.step("extract_graph", method=setup.method, chunks=len(records)) as ev:
        for i, record in enumerate(records):
            report("extracting", i, len(records))
            if looks_like_toc_or_index(record.text):
                plan.skipped.append(record.chunk_id)
                continue
            if record.chunk_id in failures:
                plan.failed[record.chunk_id] = failures[record.chunk_id]
                continue
            extraction, now, error = extract_cached(rt, setup, record, trace)
            if extraction is None:
                plan.failed[record.chunk_id] = error
                continue
            if now or record.chunk_id in fresh:
                plan.extracted += 1
            else:
                plan.cached += 1
            per_chunk.append((record.chunk_id, extraction))
        read = {cid for cid, _ in per_chunk}  # characters of the chunks with an extraction, for the cost estimate
        ev.data.update(
            extracted=plan.extracted,
            cached=plan.cached,
            skipped=len(plan.skipped),
            failed=plan.failed,
            chars=sum(len(r.text) for r in records if r.chunk_id in read),
        )
    with trace.step("start_entity_names") as ev:  # which names the graph has no vector for; their embedding starts
        entities, relationships = graph_items(per_chunk)
        extracted = ExtractedGraph(plan, entities, relationships)
        if entities:
            store = graph_store(rt, topic)
            new = store.vectors.missing(e.id for e in entities)
            texts = sorted({entity_text(e) for e in entities if e.id in new})
            ev.data.update(entities=len(entities), new=len(texts))
            if texts:
                report("embedding entities", 0, len(texts))
                extracted.names = NameEmbedding(rt, texts, trace, report, stored=len(entities) - len(texts))
    return extracted


def complete_plan(
    rt: Runtime, topic, records: list[ChunkRecord], extracted: ExtractedGraph, report: ProgressFn, trace: Trace
) -> GraphPlan:
    """The half of :func:`plan_graph` that reads the graph: deduplicate against the stored entities, keep
    this version's provenance, and give each entity new to the graph its vector (from
    ``extracted.name_vectors``, waited for at the end; a name not embedded there is embedded now).

    Two uploads into one Topic converge to the graph a sequential upload gives only when this and
    :func:`apply_graph` run under the Topic's graph write lock, with no other upload's between them.
    """
    try:
        return _complete_plan(rt, topic, records, extracted, report, trace)
    finally:
        extracted.cancel()  # a failure before the names were waited for leaves no thread embedding them


def _complete_plan(
    rt: Runtime, topic, records: list[ChunkRecord], extracted: ExtractedGraph, report: ProgressFn, trace: Trace
) -> GraphPlan:
    """:func:`complete_plan` (its arguments)."""
    plan, entities, relationships = extracted.plan, extracted.entities, extracted.relationships
    store = graph_store(rt, topic)
    ours = frozenset(cid for cid, _ in plan.chunks)
    with trace.step("graph_scope"):
        # What only the previous version's dropped chunks support is no partner: it is about to go.
        leaving = document_chunk_ids(rt, topic, store, records[0].document_id) - ours if records else set()
        rules = load_rules(rt, topic.id)  # the operator's corrections: renamed, retyped, merged, deleted, split names
        entities, relationships = rules.apply(entities, relationships, trace)
    result = deduplicate_against_graph(rt, store, entities, trace, leaving=leaving, apart=rules.apart_pairs())
    plan.checked_indexes = store.checked_indexes()  # the write, under the same graph write lock, need not check again
    with trace.step("provenance") as ev:
        plan.merges = list(result.merges)
        # A merge with a stored entity unions provenance; the plan carries only this version's chunks
        # (the store unions them with what it holds, and the previous version's chunks are removed first).
        plan.entities = [replace(e, chunk_ids=e.chunk_ids & ours) for e in result.entities if e.chunk_ids & ours]
        plan.mentions = chunk_mentions(entities, result, ours)
        plan.subjects = chunk_subjects(
            plan.mentions,
            {r.chunk_id: subject_keys(r.text) | subject_keys(extraction_text(r).split("\n\n", 1)[0] + "\n\n") for r in records},
        )  # the chunk's own headings, and the file's title
        plan.relationships = [
            replace(r, chunk_ids=r.chunk_ids & ours) for r in remapped(relationships, result.mapping) if r.chunk_ids & ours
        ]
        new = store.vectors.missing(e.id for e in plan.entities) if plan.entities else set()
        todo = [e for e in plan.entities if e.id in new]
        ev.data.update(entities=len(plan.entities), new=len(todo), relationships=len(plan.relationships))
    vectors = extracted.name_vectors(trace)
    if todo:
        late = sorted({entity_text(e) for e in todo} - set(vectors))
        if late:
            vectors.update(_embed_names(rt, late, trace, report, stored=len(plan.entities) - len(todo)))
        plan.embeddings = {e.id: vectors[entity_text(e)] for e in todo}
        plan.embeddings_are_new = True  # todo: the entities store.vectors.missing found, under the graph write lock
    return plan


def _embed_names(rt: Runtime, texts: list[str], trace: Trace, report: ProgressFn, *, stored: int) -> dict[str, np.ndarray]:
    """Vectors of entity texts, in batches of ``ENTITY_EMBED_BATCH`` (a delete or newer upload stops it between them)."""
    vectors: list[np.ndarray] = []
    with trace.step("embed_entities", count=len(texts), stored=stored):
        for start in range(0, len(texts), ENTITY_EMBED_BATCH):
            report("embedding entities", start, len(texts))
            vectors.extend(
                rt.gateway.embed_short(texts[start : start + ENTITY_EMBED_BATCH], trace=trace, purpose="entity embedding")
            )
    return dict(zip(texts, vectors, strict=True))


def chunk_mentions(extracted: list[Entity], result: DedupResult, chunks: frozenset[str]) -> list[Entity]:
    """What each chunk says about each entity after deduplication: one entity per extracted entity and chunk.

    Args:
        extracted: the entities as extracted, each with the chunk it came from, in the order found.
        result: deduplication of ``extracted`` (its mapping and kept entities).
        chunks: the version's chunk ids; chunks outside are left out.

    Returns:
        Entities under the kept id, name and type, with the extracted description and the extracted
        name and aliases as aliases (a name that differs from the kept one stays findable).
    """
    kept = {e.id: e for e in result.entities}
    out = []
    for entity in extracted:
        head = kept.get(result.mapping.get(entity.id, entity.id))
        own = entity.chunk_ids & chunks
        if head is None or not own:
            continue
        names = tuple(n for n in dict.fromkeys((entity.name, *entity.aliases)) if n and n != head.name)
        out.append(Entity(head.id, head.name, head.type, entity.description, names, own))
    return out


#: Longest heading, in words, read as the name of what a chunk is about.
SUBJECT_MAX_WORDS = 12
_MARKDOWN_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)[\s#]*$")
_SECTION_NUMBER = re.compile(r"^\d{1,2}(?:\.\d{1,3})*\.?\s+")


def subject_keys(text: str) -> set[str]:
    """The normalised names (:func:`~ragtopics.graph.model.normalize_name`) of what a chunk is about: its headings.

    A heading is a Markdown heading line, or the chunk's first line when it is set off by a blank line
    and ends without sentence punctuation (a title line: "Leland, North Carolina"). The ingest also reads
    the file title that :func:`extraction_text` puts above a file's first chunk. Section numbers are dropped; a heading of
    more than :data:`SUBJECT_MAX_WORDS` words names no entity.

    An entity the chunk mentions under such a name is the chunk's *subject*: where a mention of the
    entity elsewhere leads (LOCAL's entity bridging, :mod:`ragtopics.graph.local`).
    """
    lines = text.splitlines()
    heads = [m.group(1) for line in lines if (m := _MARKDOWN_HEADING.match(line))]
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and not _MARKDOWN_HEADING.match(lines[first]):
        line = lines[first].strip()
        below = lines[first + 1].strip() if first + 1 < len(lines) else ""
        if not below and not line.endswith(_SENTENCE_PUNCTUATION):
            heads.append(line)
    keys = set()
    for head in heads:
        head = _SECTION_NUMBER.sub("", head.strip())
        if 0 < len(head.split()) <= SUBJECT_MAX_WORDS and (key := normalize_name(head)):
            keys.add(key)
    return keys


_SENTENCE_PUNCTUATION = tuple(".!?:;,")


def chunk_subjects(mentions: list[Entity], keys: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The ``(entity_id, chunk_id)`` pairs where a chunk's heading names the entity it mentions.

    Args:
        mentions: one entity per (entity, chunk), as :func:`chunk_mentions` gives them (kept name, names used).
        keys: chunk id → :func:`subject_keys` of the chunk.
    """
    out: set[tuple[str, str]] = set()
    for m in mentions:
        names = {normalize_name(n) for n in (m.name, *m.aliases)}
        out.update((m.id, cid) for cid in m.chunk_ids if names & keys.get(cid, set()))
    return out


def document_chunk_ids(rt: Runtime, topic, store: GraphStore, document_id: str) -> set[str]:
    """The chunk ids a document has now, in the chunk index or in the graph.

    Both: a re-embed drops the chunk index before the documents are read again, while the graph
    keeps the previous version's chunks until the new version replaces them.
    """
    return set(rt.chunk_index(topic.id).document_chunk_ids(document_id)) | set(store.document_chunk_ids(document_id))


def deduplicate_against_graph(
    rt: Runtime,
    store: GraphStore,
    entities: list[Entity],
    trace: Trace,
    *,
    leaving: Iterable[str] = (),
    apart: Iterable[frozenset] = (),
) -> DedupResult:
    """Deduplicate an upload's entities among themselves and against the stored entities they may pair with.

    The stored partners come from :meth:`GraphStore.dedup_partners` (a ``find_partners`` trace step);
    unclear pairs go to the Deduplication model when a real endpoint serves that role, with the Topic's
    ``deduplication`` prompt (its override on the Prompts tab, else the shared one, else the default).

    Args:
        entities: the upload's entities, in the order found.
        leaving: chunk ids the upload is about to remove (a re-import's previous chunks): what only they
            support is left out, so it cannot bring stale descriptions back.
        apart: identity pairs an operator split (:meth:`~ragtopics.graph.corrections.RuleSet.apart_pairs`).
    """
    with trace.step("find_partners", incoming=len(entities)) as ev:
        partners = store.dedup_partners(partner_keys(entities), leaving=leaving)
        ev.data.update(
            stored=len(partners.entities), common_words=sorted(partners.common_words), graph_entities=store.entity_count()
        )  # the graph's size, for the cost estimate's pair rate
    model = None
    if not rt.settings.endpoint("deduplication").is_local:  # a real Deduplication endpoint decides unclear pairs
        template = resolve_prompts(rt, store.topic_id)["deduplication"]
        model = lambda pairs: ask_model(rt.gateway, pairs, trace, template=template)  # noqa: E731
    return deduplicate(
        entities,
        partners.entities,
        embed=lambda texts: rt.gateway.embed_short(texts, purpose="deduplication"),
        model=model,
        common_words=partners.common_words,
        apart=apart,
        trace=trace,
    )


def extraction_text(record: ChunkRecord) -> str:
    """The text the extractor reads for a chunk: the first chunk of a file is preceded by the file's title.

    A file's name is often the name of what it is about (``Marie Curie.txt``), and the
    text may call it otherwise ("Maria Skłodowska"); the title line lets the extractor
    find it (on the HotpotQA passages: 0.99 of titles found as entities, against 0.42
    from the text alone). A title that does not read as a name (``doc 0736``, ``report-2023-q3``) is
    left out: as an entity it would name nothing (:data:`_NAME_LIKE`).
    """
    return titled_text(record.file_name, record.position, record.text)


def titled_text(file_name: str, position: int, text: str) -> str:
    """:func:`extraction_text` of a chunk given by its file name, position in the file (0: first) and text."""
    if position != 0:
        return text
    title = file_name.rsplit(".", 1)[0].replace("_", " ").strip()
    if not title or text.startswith(title) or not _NAME_LIKE.search(title):
        return text
    return f"{title}\n\n{text}"


#: A file title that reads as a name: a capitalised word ("Leland, North Carolina", "Über uns"), not
#: ``doc 0736``, ``report-2023-q3`` or ``scan0001`` (those would become entities that name nothing).
_NAME_LIKE = re.compile(r"(?:^|[\s(\-])[^\W\d_a-z][^\W\d_A-Z]")


def apply_graph(
    rt: Runtime,
    topic,
    document_id: str,
    file_name: str,
    plan: GraphPlan,
    old_chunk_ids: list[str],
    images: list | None = None,
    *,
    fence=None,
) -> RemovalReport:
    """Write a plan: remove the provenance of chunks the version no longer has, then upsert the rest.

    ``images`` (:class:`~ragtopics.graph.pictures.GraphImage`) become Image nodes (Picture in the graph).

    The chunks dropped are those of ``old_chunk_ids`` the version does not have: the caller reads them under
    the same locks with :func:`document_chunk_ids` (the chunk index's and the graph's: after a re-embed the
    chunk index no longer knows the previous ones). The descriptions of what they and the version touch are
    rebuilt from the chunks that support them; an entity without a vector (new, or its vector dropped) is embedded.

    Called by the one owner of storing a version (:func:`ragtopics.documents.versions.store_version`) inside the
    document's lock, before the row and the chunk swap; when this or a later step fails, the owner writes the
    document's share back as it read it before (:mod:`ragtopics.graph.share`). With ``fence`` (the locks'
    :class:`~ragtopics.storage.locks.Fence`) every graph write is fenced
    (:meth:`~ragtopics.graph.store.GraphStore.fence_writes`): a holder that lost a lock stops with
    :class:`~ragtopics.storage.locks.LockLostError` at its next write.

    Returns:
        What the removal of the dropped chunks removed and kept.
    """
    store = graph_store(rt, topic).fence_writes(fence)
    if plan.checked_indexes is not None:
        store.assume_checked(plan.checked_indexes)
    store.ensure()
    indexes = store.checked_indexes()  # read under this graph write lock, here or when planning
    if graph_settings(topic).local_keyword_search:
        store.ensure_keyword_index(indexes)
    new_ids = {cid for cid, _ in plan.chunks}
    removed = store.remove_chunks(set(old_chunk_ids) - new_ids)
    store.upsert(document_id, file_name, plan.chunks, plan.mentions or plan.entities, plan.relationships, plan.subjects)
    if plan.embeddings:
        ids = list(plan.embeddings)
        # new to the graph when planned under this graph write lock (an upload's plan): no vector of theirs to replace
        store.set_embeddings(ids, np.vstack([plan.embeddings[i] for i in ids]), new=plan.embeddings_are_new, indexes=indexes)
    if store.vectors.drop_legacy(indexes):  # a graph written by an earlier version: every entity embedded again, by name
        embed_entities(rt, store, [e.id for e in store.all_entities()])
    else:
        embed_entities(rt, store, [e.id for e in plan.entities if e.id not in plan.embeddings])
    store.set_images(images or [])
    return removed


def entity_text(entity: Entity) -> str:
    """The text an entity's vector is made of: its name.

    A name, not ``"name: description"``: the question is matched to what it names (HippoRAG 2 embeds
    phrase nodes by their text alone), and a name never changes for an entity id, so a vector is made
    once, when the entity is new, however many chunks later add to its description. Embedding the
    descriptions made entity embedding most of a GraphRAG ingest (about 60 % on the HotpotQA passages:
    long texts, and every entity again each time a new chunk mentioned it).
    """
    return entity.name


def embed_entities(rt: Runtime, store: GraphStore, entity_ids: Iterable[str], trace: Trace | None = None) -> int:
    """Embed the stored entities among ``entity_ids`` that have no vector yet (unknown ids are skipped).

    Returns:
        How many entities were embedded.
    """
    missing = store.vectors.missing(entity_ids)
    stale = store.entities(missing) if missing else []
    if not stale:
        return 0
    vectors = rt.gateway.embed_short([entity_text(e) for e in stale], trace=trace, purpose="entity embedding")
    return store.set_embeddings([e.id for e in stale], np.asarray(vectors))


def graph_items(per_chunk: list[tuple[str, ChunkExtraction]]) -> tuple[list[Entity], list[Relationship]]:
    """Graph entities and relationships from the per-chunk extractions, each with its chunk as provenance.

    A relationship whose ends are not among its chunk's entities is dropped (the LLM
    method already re-asks for such replies; this guards the cache and the NLP method).
    """
    entities: list[Entity] = []
    relationships: list[Relationship] = []
    for chunk_id, extraction in per_chunk:
        ids: dict[str, str] = {}
        for e in extraction.entities:
            if not e.name.strip():
                continue
            entity = Entity(
                entity_id_for(e.name, e.type),
                e.name.strip(),
                e.type.upper(),
                e.description,
                tuple(a for a in e.aliases if a.strip()),
                frozenset({chunk_id}),
            )
            entities.append(entity)
            for name in (e.name, *e.aliases):
                ids.setdefault(normalize_name(name), entity.id)
        for r in extraction.relationships:
            source, target = ids.get(normalize_name(r.source)), ids.get(normalize_name(r.target))
            if source and target and source != target:
                relationships.append(Relationship(source, target, r.description, float(r.strength), frozenset({chunk_id})))
    return entities, relationships


def remapped(relationships: list[Relationship], mapping: dict[str, str]) -> list[Relationship]:
    """Relationships with their ends moved to the entities they were merged into (self-loops dropped)."""
    out = []
    for r in relationships:
        source, target = mapping.get(r.source_id, r.source_id), mapping.get(r.target_id, r.target_id)
        if source != target:
            out.append(Relationship(source, target, r.description, r.strength, r.chunk_ids))
    return out


def merges_json(plan: GraphPlan) -> str:
    """The merges of a plan as JSON lines (kept, merged, rule, score), for logs."""
    return "\n".join(json.dumps({"kept": m.kept, "merged": m.merged, "rule": m.rule, "score": m.score}) for m in plan.merges)
