"""Graph ingestion: a GraphRAG Topic takes entities and relationships straight from an existing graph.

Three sources, no extraction: one JSON file ``{"nodes": [...], "edges": [...]}``, two CSV
files (nodes and edges), or a graph in a FalkorDB server. Each source becomes a
pseudo-document named ``<source> (graph ingestion)`` with no stored file (so no download),
its document row marked ``indexed_with["origin"] = "graph ingestion"``:

- every node becomes one chunk, ``"name: description"`` plus a line per outgoing edge
  (so the chunk mentions what its relationships point at), embedded and stored in the
  Topic's chunk index like any chunk, hence searchable and citable;
- every node becomes an entity with its chunk as provenance, deduplicated against the
  graph like an upload's entities (:func:`~ragtopics.graph.dedup.deduplicate`), then
  embedded; every edge a relationship with its source node's chunk as provenance.

Importing the same source again replaces its previous share (as a re-upload does), and
deleting ``<source> (graph ingestion)`` through the normal document delete removes it,
keeping what uploads also support. Everything is parsed, checked and its chunks embedded before any lock
is taken; the operator's corrections, the deduplication against the graph, the entity vectors and the
writes then run under the Topic's graph write lock (as an upload's do, so an import and concurrent uploads
or imports into one Topic converge to the graph a sequential run builds), the writes also under the
document's lock, fenced with both locks' tokens, through the one owner of storing a version
(:mod:`ragtopics.documents.versions`), so a failure at any step leaves the previous import whole.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
from falkordb import FalkorDB

from ragtopics.documents.uploads import clean_file_name, document_id_for
from ragtopics.documents.versions import Version, store_version
from ragtopics.errors import InvalidSettingError, NotFoundError, RefusedFileError, StoreUnavailableError
from ragtopics.graph.corrections import load_rules
from ragtopics.graph.ingest import (
    GraphPlan,
    chunk_mentions,
    deduplicate_against_graph,
    document_chunk_ids,
    entity_text,
    graph_store,
)
from ragtopics.graph.model import Entity, Relationship, entity_id_for, graph_settings, normalize_name
from ragtopics.ingest.pipeline import chunk_ids_for
from ragtopics.runtime import Runtime
from ragtopics.storage import documents
from ragtopics.storage.chunk_index import ChunkRecord
from ragtopics.storage.locks import WORKER_LOCK_WAIT_S, Fence, document_lock, graph_write_lock
from ragtopics.tracing.reports import record_trace
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

_Row = TypeVar("_Row")

#: The origin recorded in a graph-ingestion document's ``indexed_with`` and shown after its name.
ORIGIN = "graph ingestion"
#: What follows the source's name in the pseudo-document's file name.
SUFFIX = f" ({ORIGIN})"
#: Most nodes, and most edges, one import takes (each node is one chunk to embed).
MAX_NODES = 50_000
MAX_EDGES = 250_000
#: Type of a node that names none.
DEFAULT_TYPE = "CONCEPT"
#: Longest name, and the most characters of edge lines written into one node's chunk.
MAX_NAME_CHARS = 300
MAX_EDGE_TEXT_CHARS = 1500
#: How many problems a refusal lists before "and N more".
_SHOWN_PROBLEMS = 5


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A node as read from the source.

    Attributes:
        key: what edges name it by: its id, else its name.
        name, type, description, aliases: the entity it becomes (type upper-case).
        where: where it was read (``node #3``, ``line 4 of the nodes file``), for messages.
    """

    key: str
    name: str
    type: str = DEFAULT_TYPE
    description: str = ""
    aliases: tuple[str, ...] = ()
    where: str = ""


@dataclass(frozen=True, slots=True)
class GraphEdge:
    """An edge as read from the source: its ends are node ids or names."""

    source: str
    target: str
    description: str = ""
    strength: float = 1.0
    where: str = ""


@dataclass(frozen=True, slots=True)
class ImportedGraph:
    """Nodes and edges read from one source, not yet checked against each other.

    Attributes:
        nodes, edges: in the source's order.
        format: ``json``, ``csv`` or ``falkordb``.
        size_bytes: bytes read (files; 0 for FalkorDB).
        skipped_nodes: ``{"node", "reason"}`` of nodes left out while reading (FalkorDB nodes without a name).
        location: where it came from, kept in the document row (FalkorDB: url without password, graph).
    """

    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    format: str
    size_bytes: int = 0
    skipped_nodes: tuple[dict, ...] = ()
    location: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------- parsing


def parse_nodes_edges_json(data: bytes) -> ImportedGraph:
    """Nodes and edges from one JSON object ``{"nodes": [...], "edges": [...]}`` (``links`` for ``edges`` also works).

    A node: ``name`` (required), ``id``, ``type``, ``description``, ``aliases`` (a list, or
    names separated by ``;`` or ``|``). An edge: ``source`` and ``target`` (node ids or
    names, required), ``description``, ``strength`` (a number >= 0, default 1).

    Raises:
        RefusedFileError: naming every bad node or edge (first few), or why the file is not such an object.
    """
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise RefusedFileError(f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise RefusedFileError(f"the file is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise RefusedFileError('the file must hold one JSON object with a list "nodes" (and a list "edges")')
    edges = doc.get("edges", doc.get("links", []))
    if not isinstance(edges, list):
        raise RefusedFileError('"edges" must be a list of objects with "source" and "target"')
    problems: list[str] = []
    nodes = [_node(row, f"node #{i}", problems) for i, row in enumerate(doc["nodes"], 1)]
    parsed = [_edge(row, f"edge #{i}", problems) for i, row in enumerate(edges, 1)]
    _refuse_if(problems)
    return ImportedGraph(_kept(nodes), _kept(parsed), "json", size_bytes=len(data))


def parse_nodes_edges_csv(nodes: bytes, edges: bytes | None = None) -> ImportedGraph:
    """Nodes and edges from two CSV files with a header row (edges optional).

    Nodes file columns: ``name`` (required), ``id``, ``type``, ``description``, ``aliases``
    (separated by ``;`` or ``|``). Edges file: ``source``, ``target`` (required),
    ``description``, ``strength``. Other columns are ignored.

    Raises:
        RefusedFileError: naming the missing column, or the line of every bad row (first few).
    """
    problems: list[str] = []
    node_rows = _csv_rows(nodes, "nodes file", {"name"})
    parsed = [_node(row, f"line {line} of the nodes file", problems) for line, row in node_rows]
    edge_rows = _csv_rows(edges, "edges file", {"source", "target"}) if edges is not None else []
    links = [_edge(row, f"line {line} of the edges file", problems) for line, row in edge_rows]
    _refuse_if(problems)
    return ImportedGraph(_kept(parsed), _kept(links), "csv", size_bytes=len(nodes) + len(edges or b""))


def _kept(rows: list[_Row | None]) -> tuple[_Row, ...]:
    """The parsed rows as a tuple; :func:`_refuse_if` has already refused a file with a bad (None) row."""
    return tuple(row for row in rows if row is not None)


def _csv_rows(data: bytes, what: str, required: set[str]) -> list[tuple[int, dict]]:
    """``(line number, row)`` of a CSV file with a header; blank rows skipped."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RefusedFileError(f"the {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [(h or "").strip().lower() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        missing = sorted(required - set(header))
        if missing:
            raise RefusedFileError(
                f"the {what} has no column {', '.join(map(repr, missing))} in its header row "
                f"(found: {', '.join(h for h in header if h) or 'nothing'})"
            )
        return [(reader.line_num, row) for row in reader if any((v or "").strip() for v in row.values() if isinstance(v, str))]
    except csv.Error as exc:
        raise RefusedFileError(f"the {what} is not valid CSV at line {reader.line_num}: {exc}") from exc


def _node(row: Any, where: str, problems: list[str]) -> GraphNode | None:
    """A node from a JSON object or CSV row; a problem is recorded (and None returned) when it is bad."""
    if not isinstance(row, dict):
        problems.append(f"{where} is not an object with a name")
        return None
    fields = {k: _scalar(row.get(k)) for k in ("name", "id", "type", "description")}
    bad = [k for k, v in fields.items() if v is None]
    if bad or not fields["name"]:
        problems.append(f"{where}: {bad[0]} must be text" if bad else f"{where} has no name")
        return None
    text = {k: v for k, v in fields.items() if v is not None}  # all of them: none is bad
    name = text["name"]
    if len(name) > MAX_NAME_CHARS:
        problems.append(f"{where}: the name is longer than {MAX_NAME_CHARS} characters")
        return None
    aliases = _aliases(row.get("aliases"), name)
    if aliases is None:
        problems.append(f"{where}: aliases must be a list of names or names separated by ';'")
        return None
    return GraphNode(text["id"] or name, name, _type_name(text["type"]), text["description"], aliases, where)


def _edge(row: Any, where: str, problems: list[str]) -> GraphEdge | None:
    """An edge from a JSON object or CSV row; a problem is recorded (and None returned) when it is bad."""
    if not isinstance(row, dict):
        problems.append(f"{where} is not an object with a source and a target")
        return None
    source, target = _scalar(row.get("source")), _scalar(row.get("target"))
    if not source or not target:
        problems.append(f"{where} has no {'source' if not source else 'target'}")
        return None
    strength = _strength(row.get("strength"))
    if strength is None:
        problems.append(f"{where}: strength {row.get('strength')!r} is not a number >= 0")
        return None
    return GraphEdge(source, target, _scalar(row.get("description")) or "", strength, where)


def _aliases(value: Any, name: str) -> tuple[str, ...] | None:
    """Other names from a list, or from text separated by ``;`` or ``|``; None when neither."""
    names = (value or "").replace("|", ";").split(";") if isinstance(value, str) or value is None else value
    if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
        return None
    return tuple(dict.fromkeys(a.strip() for a in names if a.strip() and a.strip() != name))


def _type_name(value: str | None) -> str:
    """An entity type as extraction writes them: upper case, words joined by ``_`` (``"power plant"`` → ``POWER_PLANT``)."""
    return "_".join((value or DEFAULT_TYPE).upper().split())


def _scalar(value: Any) -> str | None:
    """Text of a field: "" when absent, None when it is not text or a number."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    return " ".join(str(value).split())


def _strength(value: Any) -> float | None:
    """A strength: 1.0 when absent, None when not a finite number >= 0."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return 1.0
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _refuse_if(problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - _SHOWN_PROBLEMS} more)" if len(problems) > _SHOWN_PROBLEMS else ""
        raise RefusedFileError("; ".join(problems[:_SHOWN_PROBLEMS]) + more)


# ---------------------------------------------------------------------------- FalkorDB

_FALKOR_NODES = "MATCH (n) RETURN id(n), labels(n), properties(n) ORDER BY id(n) LIMIT $n"
_FALKOR_EDGES = "MATCH (a)-[r]->(b) RETURN id(a), id(b), type(r), properties(r) ORDER BY id(r) LIMIT $n"
#: Node properties that are not written into a description made from the others.
_NAMED = {"name", "title", "description", "aliases", "type", "embedding"}


def read_falkordb_graph(url: str, graph_name: str, *, limit: int = MAX_NODES, timeout_s: float = 10.0) -> ImportedGraph:
    """Nodes and edges of a graph in a FalkorDB server, read with two read-only Cypher queries.

    A node's name is its ``name`` (else ``title``) property, its type its first label, its
    description its ``description`` property (else its other properties as ``key: value``);
    a node without a name is left out (listed in ``skipped_nodes``). An edge's description
    is its ``description`` property, else its relationship type ("WORKS_AT" → "works at");
    its strength its ``strength`` or ``weight`` property (default 1).

    Args:
        url: ``redis://``, ``rediss://``, ``falkor://`` or ``falkors://`` URL of the server.
        graph_name: the graph (its key on that server).
        limit: most nodes, and most edges, read (<= :data:`MAX_NODES`, :data:`MAX_EDGES`).
        timeout_s: connect timeout in seconds.

    Raises:
        InvalidSettingError: for a URL that is not one, or a graph with more than ``limit`` nodes or edges.
        NotFoundError: when the server has no graph of that name.
        StoreUnavailableError: when the server cannot be reached or refuses the read.
    """
    shown = safe_url(url)
    try:
        db = FalkorDB.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=120)
    except ValueError as exc:
        raise InvalidSettingError(f"{shown!r} is not a Redis URL (redis://host:port or falkor://host:port): {exc}") from exc
    try:
        if db.connection.type(graph_name) != "graphdata":
            graphs = sorted(db.list_graphs())
            raise NotFoundError(
                f"FalkorDB at {shown} has no graph {graph_name!r}; its graphs: {', '.join(graphs[:20]) or 'none'}"
            )
        graph = db.select_graph(graph_name)
        nodes = graph.ro_query(_FALKOR_NODES, {"n": min(limit, MAX_NODES) + 1}).result_set
        edges = graph.ro_query(_FALKOR_EDGES, {"n": min(limit, MAX_EDGES) + 1}).result_set
    except redis.ConnectionError as exc:
        raise StoreUnavailableError(f"FalkorDB at {shown} is not reachable: {exc}") from exc
    except redis.ResponseError as exc:
        raise StoreUnavailableError(f"FalkorDB at {shown} refused to read graph {graph_name!r}: {exc}") from exc
    finally:
        db.connection.close()
    for what, rows, most in (("nodes", nodes, min(limit, MAX_NODES)), ("edges", edges, min(limit, MAX_EDGES))):
        if len(rows) > most:
            raise InvalidSettingError(f"graph {graph_name!r} has more than {most} {what}; an import takes at most {most}")
    parsed, skipped = [], []
    for node_id, labels, props in nodes:
        node = _falkordb_node(node_id, labels, props or {})
        if node is None:
            skipped.append({"node": f"#{node_id}", "reason": "no name or title property"})
        else:
            parsed.append(node)
    links = [_falkordb_edge(a, b, rel, props or {}) for a, b, rel, props in edges]
    return ImportedGraph(
        tuple(parsed), tuple(links), "falkordb", skipped_nodes=tuple(skipped), location={"url": shown, "graph": graph_name}
    )


def _falkordb_node(node_id: int, labels: list[str], props: dict) -> GraphNode | None:
    name = _scalar(props.get("name")) or _scalar(props.get("title"))
    if not name:
        return None
    description = _scalar(props.get("description"))
    if not description:
        rest = [f"{k}: {_scalar(v)}" for k, v in sorted(props.items()) if k not in _NAMED and _scalar(v)]
        description = "; ".join(rest)
    aliases = props.get("aliases")
    aliases = _aliases([a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else aliases, name) or ()
    return GraphNode(
        f"#{node_id}", name[:MAX_NAME_CHARS], _type_name(labels[0] if labels else ""), description, aliases, f"node #{node_id}"
    )


def _falkordb_edge(source_id: int, target_id: int, rel_type: str, props: dict) -> GraphEdge:
    description = _scalar(props.get("description")) or (rel_type or "related to").replace("_", " ").lower()
    strength = _strength(props.get("strength", props.get("weight")))
    return GraphEdge(
        f"#{source_id}",
        f"#{target_id}",
        description,
        1.0 if strength is None else strength,
        f"edge #{source_id}->#{target_id} ({rel_type})",
    )


def safe_url(url: str) -> str:
    """A URL without its password, to show and to store (``redis://user:***@host:6379``)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "(unreadable URL)"


# ---------------------------------------------------------------------------- plan and write


@dataclass
class ImportPlan:
    """One source's share of a Topic, computed before anything is written.

    Attributes:
        document_id, file_name: the pseudo-document (``<source> (graph ingestion)``).
        records: one chunk per node, embedded.
        graph: entities (deduplicated, embedded) and relationships with provenance in ``records``; filled in
            by :func:`deduplicate_import`, under the Topic's graph write lock.
        skipped_edges: ``{"edge", "source", "target", "reason"}`` of edges left out.
        unclear: name pairs deduplication left apart without a decision.
        sha256: hash of the imported nodes and edges (the row's content hash).
        entities, relationships: each node's entity and each edge's relationship as imported, before deduplication.
        edges: the resolved edges, ``(source index, target index, edge)``, in the order of ``relationships``.
    """

    document_id: str
    file_name: str
    records: list[ChunkRecord]
    graph: GraphPlan
    skipped_edges: list[dict]
    unclear: list[dict]
    sha256: str
    entities: list[Entity] = field(default_factory=list)
    relationships: list[Relationship] = field(default_factory=list)
    edges: list[tuple[int, int, GraphEdge]] = field(default_factory=list)


def ingest_graph(rt: Runtime, topic, source_name: str, imported: ImportedGraph) -> dict[str, Any]:
    """Import nodes and edges into a GraphRAG Topic as the pseudo-document ``<source_name> (graph ingestion)``.

    Importing a source again replaces its previous share. Nothing is written when a check fails.

    Args:
        topic: a GraphRAG Topic.
        source_name: the source's name (a file name, or the FalkorDB graph's name).
        imported: what :func:`parse_nodes_edges_json`, :func:`parse_nodes_edges_csv` or
            :func:`read_falkordb_graph` read.

    Returns:
        The report: ``topic``, ``source``, ``document_id``, ``format``, counts of ``nodes``, ``edges``,
        ``chunks``, ``entities``, ``relationships``; ``merges`` (kept, merged, rule, score),
        ``unclear``, ``skipped_nodes`` and ``skipped_edges`` (with reasons), ``removed`` (the previous share).

    Raises:
        InvalidSettingError: for a Topic that is not a GraphRAG Topic.
        RefusedFileError: no nodes, too many, over the Topic's size limit, conflicting node ids, or a
            name taken by an uploaded file.
        EmbeddingMismatchError, ModelUnavailableError, StoreUnavailableError: as an upload would.
    """
    trace = Trace("upload", f"{source_name}{SUFFIX}", topic.settings.role_models)
    with trace.step("graph_ingestion", format=imported.format, nodes=len(imported.nodes), edges=len(imported.edges)) as ev:
        plan = plan_import(rt, topic, source_name, imported, trace)
        # One writer of the Topic's graph at a time, from the deduplication to the last write.
        with graph_write_lock(rt.redis, topic.id, wait_s=WORKER_LOCK_WAIT_S) as graph_fence:
            deduplicate_import(rt, topic, plan, trace)
            removal = write_import(rt, topic, plan, imported, trace, graph_fence=graph_fence)
        ev.data.update(
            entities=len(plan.graph.entities),
            relationships=len(plan.graph.relationships),
            skipped_edges=len(plan.skipped_edges),
            removed=asdict(removal),
        )
    record_trace(rt, trace, kind="upload", owner=f"document:{plan.document_id}", subject=plan.file_name, topic_id=topic.id)
    log.info(
        "graph ingestion of %s into Topic %s: %d entities, %d relationships",
        plan.file_name,
        topic.name,
        len(plan.graph.entities),
        len(plan.graph.relationships),
    )
    return {
        "topic": topic.name,
        "source": plan.file_name,
        "document_id": plan.document_id,
        "format": imported.format,
        "nodes": len(imported.nodes),
        "edges": len(imported.edges),
        "chunks": len(plan.records),
        "entities": len(plan.graph.entities),
        "relationships": len(plan.graph.relationships),
        "merges": [{"kept": m.kept, "merged": m.merged, "rule": m.rule, "score": round(m.score, 3)} for m in plan.graph.merges],
        "unclear": plan.unclear,
        "skipped_nodes": list(imported.skipped_nodes),
        "skipped_edges": plan.skipped_edges,
        "removed": asdict(removal),
    }


def plan_import(rt: Runtime, topic, source_name: str, imported: ImportedGraph, trace: Trace) -> ImportPlan:
    """Check an import and embed its chunks (no writes, no lock); :func:`deduplicate_import` completes the plan.

    Raises:
        see :func:`ingest_graph`.
    """

    graph_settings(topic, "graph ingestion needs a GraphRAG Topic", InvalidSettingError)
    name = clean_file_name(source_name)
    file_name = name + SUFFIX
    document_id = document_id_for(topic.id, file_name)
    _check_name_free(rt, document_id, file_name)
    _check_size(topic, imported, name)
    try:
        nodes, edges, skipped = resolve_edges(imported)
    except RefusedFileError as exc:
        raise RefusedFileError(f"{name} was refused: {exc}") from exc
    outgoing: dict[int, list[tuple[int, GraphEdge]]] = {}
    for s, t, e in edges:
        outgoing.setdefault(s, []).append((t, e))
    texts = [node_text(n, [(nodes[t].name, e.description) for t, e in outgoing.get(i, [])]) for i, n in enumerate(nodes)]
    fingerprints = [
        json.dumps([n.type, text, [[nodes[t].type, e.strength] for t, e in outgoing.get(i, [])]])
        for i, (n, text) in enumerate(zip(nodes, texts))
    ]
    chunk_ids = chunk_ids_for(document_id, fingerprints)
    index = rt.chunk_index(topic.id)
    index.check_embedder()
    with trace.step("embed", chunks=len(texts)):
        vectors = rt.gateway.embed(texts, trace=trace)
    records = [
        ChunkRecord(cid, document_id, file_name, i, text, vectors[i], 0, len(text))
        for i, (cid, text) in enumerate(zip(chunk_ids, texts))
    ]
    plan = GraphPlan(chunks=[(r.chunk_id, r.position) for r in records], method="GRAPH INGESTION")
    ent_ids = [entity_id_for(n.name, n.type) for n in nodes]
    entities = [
        Entity(ent_ids[i], n.name, n.type, n.description, n.aliases, frozenset({chunk_ids[i]})) for i, n in enumerate(nodes)
    ]
    relationships = [
        Relationship(ent_ids[s], ent_ids[t], e.description, e.strength, frozenset({chunk_ids[s]})) for s, t, e in edges
    ]
    digest = hashlib.sha256(json.dumps([[asdict(n) for n in nodes], [asdict(e) for _, _, e in edges]]).encode()).hexdigest()
    return ImportPlan(document_id, file_name, records, plan, skipped, [], digest, entities, relationships, edges)


def deduplicate_import(rt: Runtime, topic, plan: ImportPlan, trace: Trace) -> None:
    """Deduplicate a planned import against the graph and embed its entities: fills ``plan.graph`` (entities,
    relationships, merges, embeddings) and ``plan.unclear``, and adds the edges whose ends became one entity to
    ``plan.skipped_edges``.

    It reads the graph, so it runs under the Topic's graph write lock, right before :func:`write_import`:
    an upload or import that wrote meanwhile is one it plans against, never one it misses.
    """
    # Entities only the previous import supports go with it: matching them would bring back stale descriptions.
    old_ids = previous_chunk_ids(rt, topic, plan.document_id)
    unclear, loops, deleted = _deduplicate_into(rt, topic, plan.graph, plan.entities, plan.relationships, old_ids, trace)
    plan.unclear = unclear
    plan.skipped_edges += [_skip(plan.edges[i][2], "both ends are one entity after deduplication") for i in loops]
    plan.skipped_edges += [_skip(plan.edges[i][2], "an end is an entity the operator deleted") for i in deleted]


def _deduplicate_into(
    rt: Runtime,
    topic,
    plan: GraphPlan,
    entities: list[Entity],
    relationships: list[Relationship],
    old_ids: set[str],
    trace: Trace,
) -> tuple[list[dict], list[int], list[int]]:
    """Deduplicate against the graph as an upload does, then embed: fills the plan's entities, relationships,
    merges and embeddings.

    Returns:
        The pairs left unclear, the indices of ``relationships`` whose ends became one entity, and those
        of relationships with an end the operator deleted (:mod:`ragtopics.graph.corrections`).
    """
    # The operator's corrections first (renamed, retyped, merged, deleted, split names), as for an upload.
    rules = load_rules(rt, topic.id)
    extracted = len(entities)
    entities, ids, applied = rules.rewrite(entities)
    if rules:
        rules.record(trace, applied, dropped_mentions=extracted - len(entities))
    # Entities only the previous import supports go with it: matching them would bring back stale descriptions.
    result = deduplicate_against_graph(rt, graph_store(rt, topic), entities, trace, leaving=old_ids, apart=rules.apart_pairs())
    mapping = {old: result.mapping[new] for old, new in ids.items() if new is not None}
    result = replace(result, mapping={**result.mapping, **mapping})
    ours = frozenset(cid for cid, _ in plan.chunks)
    plan.merges = list(result.merges)
    plan.entities = [replace(e, chunk_ids=e.chunk_ids & ours) for e in result.entities if e.chunk_ids & ours]
    plan.mentions = chunk_mentions(entities, result, ours)  # each node's own description, not the partner's
    # Each node's chunk is about the node (LOCAL's entity bridging leads there from a mention elsewhere).
    plan.subjects = {(result.mapping.get(e.id, e.id), cid) for e in entities for cid in e.chunk_ids & ours}
    loops, deleted = [], []
    for i, r in enumerate(relationships):
        if ids.get(r.source_id, "") is None or ids.get(r.target_id, "") is None:
            deleted.append(i)
            continue
        source, target = result.mapping.get(r.source_id, r.source_id), result.mapping.get(r.target_id, r.target_id)
        if source == target:
            loops.append(i)
        else:
            plan.relationships.append(replace(r, source_id=source, target_id=target))
    with trace.step("embed_entities", count=len(plan.entities)):
        texts = [entity_text(e) for e in plan.entities]
        vectors = rt.gateway.embed(texts, trace=trace, purpose="entity embedding")
        plan.embeddings = {e.id: v for e, v in zip(plan.entities, vectors, strict=True)}
    return [u._asdict() for u in result.unclear], loops, deleted


def resolve_edges(imported: ImportedGraph) -> tuple[list[GraphNode], list[tuple[int, int, GraphEdge]], list[dict]]:
    """The nodes, and each edge with the positions of its ends (by node id, else name, else normalised name).

    Returns:
        ``(nodes, edges, skipped)``: ``edges`` as ``(source index, target index, edge)``; ``skipped``
        the edges left out (unknown end, or both ends one node) with the reason.

    Raises:
        RefusedFileError: no nodes, more than :data:`MAX_NODES` nodes or :data:`MAX_EDGES` edges,
            or one id given to two nodes with different names.
    """
    nodes = list(imported.nodes)
    if not nodes:
        raise RefusedFileError("there are no nodes to import (nodes need at least a name)")
    if len(nodes) > MAX_NODES or len(imported.edges) > MAX_EDGES:
        raise RefusedFileError(
            f"{len(nodes)} nodes and {len(imported.edges)} edges: an import takes at most {MAX_NODES} nodes and {MAX_EDGES} edges"
        )
    by_key: dict[str, int] = {}
    problems = []
    for i, node in enumerate(nodes):
        first = by_key.setdefault(node.key, i)
        if nodes[first].name != node.name:
            problems.append(f"{node.where} has the id {node.key!r} of {nodes[first].where} ({nodes[first].name!r})")
    _refuse_if(problems)
    by_name: dict[str, int] = {}
    by_form: dict[str, int] = {}
    for i, node in enumerate(nodes):
        by_name.setdefault(node.name, i)
        by_form.setdefault(normalize_name(node.name), i)

    def find(ref: str) -> int | None:
        for found in (by_key.get(ref), by_name.get(ref), by_form.get(normalize_name(ref))):
            if found is not None:
                return found
        return None

    edges, skipped = [], []
    for edge in imported.edges:
        source, target = find(edge.source), find(edge.target)
        if source is None or target is None:
            skipped.append(_skip(edge, f"no node {edge.source if source is None else edge.target!r}"))
        elif source == target:
            skipped.append(_skip(edge, "source and target are the same node"))
        else:
            edges.append((source, target, edge))
    return nodes, edges, skipped


def _skip(edge: GraphEdge, reason: str) -> dict:
    return {"edge": edge.where, "source": edge.source, "target": edge.target, "reason": reason}


def node_text(node: GraphNode, related: list[tuple[str, str]]) -> str:
    """A node's chunk text: ``"name: description"``, its other names, and one line per outgoing edge (bounded).

    Args:
        related: ``(target name, edge description)`` of its outgoing edges.
    """
    lines = [f"{node.name}: {node.description}" if node.description else node.name]
    if node.aliases:
        lines.append("Also called: " + ", ".join(node.aliases))
    used = 0
    for k, (target, description) in enumerate(related):
        line = f"- {target}: {description}" if description else f"- {target}"
        if used + len(line) > MAX_EDGE_TEXT_CHARS:
            lines.append(f"- and {len(related) - k} more")
            break
        lines.append(line)
        used += len(line)
    return "\n".join(lines)


def write_import(
    rt: Runtime, topic, plan: ImportPlan, imported: ImportedGraph, trace: Trace, *, graph_fence: Fence | None = None
):
    """Store a planned import under the document's lock: the row staged, then the version through its one
    owner (:func:`~ragtopics.documents.versions.store_version`: graph share, row and chunk swap, all or
    none), in the order an upload stores one.

    Args:
        graph_fence: the Topic's graph write lock the caller holds (see :func:`ingest_graph`); the chunk swap
            and the graph writes are fenced with it as well as with the document lock.

    Returns:
        What the removal of the previous import's chunks removed (:class:`~ragtopics.graph.store.RemovalReport`).

    Raises:
        RefusedFileError: when an uploaded file took the name meanwhile.
        SupersededError: when the pseudo-document is being deleted right now.
        Whatever storing failed with; the previous import is then whole (its row says ``failed``).
    """
    skipped = len(plan.skipped_edges) + len(imported.skipped_nodes)
    first = (plan.skipped_edges or list(imported.skipped_nodes) or [{}])[0].get("reason", "")
    warning = f"{skipped} node(s) or edge(s) left out: {first}" if skipped else ""
    indexed_with = {
        "origin": ORIGIN,
        "format": imported.format,
        **({"location": imported.location} if imported.location else {}),
        "nodes": len(imported.nodes),
        "edges": len(imported.edges),
        "embedding_model": rt.gateway.embedder.model,
        "graph": {**plan.graph.summary(), "skipped_edges": len(plan.skipped_edges), "skipped_nodes": len(imported.skipped_nodes)},
    }
    with (
        document_lock(rt.redis, plan.document_id, wait_s=WORKER_LOCK_WAIT_S) as fence,
        trace.step("store", chunks=len(plan.records)),
    ):
        if graph_fence is not None:
            fence = fence.joined(graph_fence)  # every write needs both locks still held
        _check_name_free(rt, plan.document_id, plan.file_name)
        row, _ = documents.stage_upload(
            rt.metadata,
            document_id=plan.document_id,
            topic_id=topic.id,
            file_name=plan.file_name,
            sha256=plan.sha256,
            blob_path="",
            size_bytes=imported.size_bytes,
        )
        documents.start_processing(rt.metadata, row.id, row.job_id)
        version = Version(
            plan.document_id,
            row.job_id,
            plan.file_name,
            plan.records,
            documents.DocumentStatus.INDEXED,
            warning,
            indexed_with,
            graph=plan.graph,
            change=f"{plan.file_name} was imported",
        )
        try:
            stored = store_version(rt, topic, version, fence=fence)
        except Exception as exc:
            documents.fail(rt.metadata, row.id, row.job_id, f"graph ingestion failed: {exc}", before_commit=fence.check)
            raise
    return stored.removal


def previous_chunk_ids(rt: Runtime, topic, document_id: str) -> set[str]:
    """The chunk ids an earlier import of a source left, in the chunk index or in the graph.

    Both, because a re-embed drops the chunk index without re-reading a graph ingestion
    (there is no file to read), while the graph keeps its chunks.
    """
    return document_chunk_ids(rt, topic, graph_store(rt, topic), document_id)


def _check_name_free(rt: Runtime, document_id: str, file_name: str) -> None:
    """Refuse when the pseudo-document's name belongs to an uploaded file (not an earlier graph ingestion)."""
    row = documents.get_document(rt.metadata, document_id)
    origin = (row.indexed_with or {}).get("origin", ORIGIN) if row is not None else ORIGIN
    if row is not None and (row.blob_path or row.pending_blob_path or origin != ORIGIN):
        raise RefusedFileError(f"{file_name!r} is the name of an uploaded file of this Topic; import under another name")


def _check_size(topic, imported: ImportedGraph, file_name: str) -> None:
    """Refuse files over the Topic's upload size limit (Max File Size)."""
    limit_mb = float(topic.settings.max_file_size_mb or 0)
    if limit_mb and imported.size_bytes > limit_mb * 1024 * 1024:
        raise RefusedFileError(
            f"{file_name} was refused: it is {imported.size_bytes / 1048576:.1f} MB, the limit of this Topic is {limit_mb:g} MB"
        )


def is_graph_ingestion(file_name: str) -> bool:
    """Whether a document or chunk file name is a graph-ingestion pseudo-document's (no file to download)."""
    return file_name.endswith(SUFFIX)


def source_name(file_name: str) -> str:
    """The source's own name of a graph-ingestion pseudo-document (``"people.json (graph ingestion)"`` → ``"people.json"``)."""
    return file_name[: -len(SUFFIX)] if is_graph_ingestion(file_name) else file_name
