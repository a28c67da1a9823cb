"""What keeping graph provenance true costs: a delete that rebuilds the descriptions of many entities.

Every passage of ``shared/eval/hotpotqa`` (994 passages, one ``<title>.txt`` file each) is ingested
in-process into one GraphRAG Topic (NLP extraction), as ``bench.graph_recall`` does. Then the
passage that shares entities with the most other passages is deleted through the product's own
delete (:func:`~ragtopics.documents.delete.delete_document`), timed. A delete removes the file's
chunks from every entity's and relationship's provenance and rebuilds the description, aliases and
strength of each one that stays from what the chunks left say (no model call); the figures are the
delete's time, the time spent rebuilding entity descriptions
(:meth:`~ragtopics.graph.store.GraphStore.rebuild_entities`), and how many entities and relationships
were rebuilt, removed and changed. The passage is then uploaded again and that upload timed too (it
rebuilds the entities it touches the same way). Last, the rebuild of the :data:`HUBS` entities with
the most chunks is timed on its own: what a delete touching them would add at most.

Figures only, never asserted. ``python -m bench.provenance [--data-dir DIR]``: with a folder, the
Redis data and the Topic stay there and a second run skips the ingest but for passages not indexed
there (the measured passage is uploaded again at the end, so the kept graph is whole; should that
upload fail, the next run indexes it again first).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import receive_upload
from ragtopics.errors import NotFoundError
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.store import GraphStore
from ragtopics.ingest.pipeline import ingest_document
from ragtopics.runtime import Runtime
from ragtopics.storage.documents import topic_documents
from ragtopics.topics.topics import Topic, create_topic, get_topic

TOPIC = "provenance-graph"
#: Entities with the most chunks whose rebuild is timed on its own (the worst case of one delete's rebuild).
HUBS = 10


def ingest(rt: Runtime, corpus: dict[str, list[str]]) -> Topic:
    """The GraphRAG (NLP) Topic with every passage, one file per passage; kept from a data folder when there
    (a passage not indexed there, such as one whose upload failed in an earlier run, is indexed again)."""
    try:
        topic = get_topic(rt, TOPIC)
        indexed = {row.file_name for row in topic_documents(rt.metadata, topic.id) if row.status in ("indexed", "empty")}
        corpus = {title: sentences for title, sentences in corpus.items() if f"{title}.txt" not in indexed}
        print(f"  {TOPIC}: kept from the data folder; {len(corpus)} passages to index again", flush=True)
        if not corpus:
            return topic
    except NotFoundError:
        topic = create_topic(rt, TOPIC, kind="graphrag", settings={"graph_extraction_method": "NLP"})
    started = time.perf_counter()
    for i, (title, sentences) in enumerate(corpus.items()):
        ingest_document(rt, receive_upload(rt, topic, f"{title}.txt", "".join(sentences).encode()).id)
        if (i + 1) % 100 == 0:
            print(f"  {i + 1} passages in {time.perf_counter() - started:.0f} s", flush=True)
    print(f"  {len(corpus)} passages ingested in {time.perf_counter() - started:.1f} s", flush=True)
    rt.redis.bgrewriteaof()  # a kept folder then loads from one snapshot
    return topic


def most_shared_document(store: GraphStore) -> tuple[str, int, int]:
    """The document whose entities other documents mention most: ``(document id, other documents, entities)``.

    Counted over the whole graph: for each document, the distinct other documents that mention one
    of its entities, and how many of its entities another document also mentions.
    """
    doc_of = dict(store.graph.ro_query("MATCH (c:Chunk) RETURN c.id, c.document_id").result_set)
    chunks_of = store.chunks_of([e.id for e in store.all_entities()], None)  # every mention (an entity keeps a sample)
    docs_of_entity = [{doc_of[c] for c in cids if c in doc_of} for cids in chunks_of.values()]
    others: dict[str, set[str]] = {}
    shared: Counter[str] = Counter()
    for docs in docs_of_entity:
        if len(docs) < 2:
            continue
        for doc in docs:
            others.setdefault(doc, set()).update(docs - {doc})
            shared[doc] += 1
    best = max(others, key=lambda d: (len(others[d]), shared[d], d))
    return best, len(others[best]), shared[best]


def timed_rebuilds() -> tuple[list[float], list[int], Callable[[], None]]:
    """Wrap :meth:`GraphStore.rebuild_entities` to record each call's seconds and entity count; returns the
    lists and a function that restores the method."""
    seconds: list[float] = []
    counts: list[int] = []
    original = GraphStore.rebuild_entities

    def rebuild(self, entity_ids, *, also=None):  # ``also``: rows an upsert computed already, written in the same query
        ids = list(entity_ids)
        t0 = time.perf_counter()
        try:
            return original(self, ids, also=also)
        finally:
            seconds.append(time.perf_counter() - t0)
            counts.append(len(ids) + len(also or []))

    GraphStore.rebuild_entities = rebuild
    return seconds, counts, lambda: setattr(GraphStore, "rebuild_entities", original)


def measure(rt: Runtime, topic: Topic, corpus: dict[str, list[str]]) -> None:
    """Delete the most shared passage, then upload it again; print what each rebuilt and how long it took."""
    store = graph_store(rt, topic)
    t0 = time.perf_counter()
    doc_id, other_docs, shared = most_shared_document(store)
    [(file_name,)] = store.graph.ro_query("MATCH (d:Document {id: $d}) RETURN d.file_name", {"d": doc_id}).result_set
    title = file_name.removesuffix(".txt")
    print(f"  graph: {store.stats()}", flush=True)
    print(
        f"  most shared passage: {file_name!r}: {shared} of its entities are also in {other_docs} other "
        f"passages (found in {time.perf_counter() - t0:.1f} s)",
        flush=True,
    )

    seconds, counts, restore = timed_rebuilds()
    removals = []
    original_remove = GraphStore.remove_chunks

    def remove_chunks(self, chunk_ids):
        report = original_remove(self, chunk_ids)
        removals.append(report)
        return report

    GraphStore.remove_chunks = remove_chunks
    try:
        t0 = time.perf_counter()
        removed = delete_document(rt, topic, file_name)
        took = time.perf_counter() - t0
        [report] = removals
        print(f"  delete: {took:.3f} s in all (chunk index, files, rows and graph); {removed}", flush=True)
        print(
            f"    entities rebuilt {report.entities_kept} (descriptions changed {len(report.rebuilt)}), "
            f"removed {report.entities_removed}",
            flush=True,
        )
        print(f"    relationships rebuilt {report.relationships_kept}, removed {report.relationships_removed}", flush=True)
        print(f"    entity description rebuild: {sum(seconds):.3f} s for {sum(counts)} entities", flush=True)

        for recorded in (seconds, counts, removals):
            recorded.clear()
        t0 = time.perf_counter()
        ingest_document(rt, receive_upload(rt, get_topic(rt, topic.id), file_name, "".join(corpus[title]).encode()).id)
        took = time.perf_counter() - t0
        print(
            f"  upload again: {took:.3f} s in all; entity description rebuild {sum(seconds):.3f} s for {sum(counts)} entities",
            flush=True,
        )
    finally:
        GraphStore.remove_chunks = original_remove
        restore()
    hubs = sorted(store.all_entities(), key=lambda e: (-e.mentions, e.id))[:HUBS]
    t0 = time.perf_counter()
    store.rebuild_entities(e.id for e in hubs)  # unchanged graph: the same descriptions are written again
    took = time.perf_counter() - t0
    largest = ", ".join(f"{e.name} {e.mentions}" for e in hubs[:3])
    print(
        f"  rebuilding the {len(hubs)} entities with the most chunks ({largest}, ...; "
        f"{sum(e.mentions for e in hubs)} chunks): {took:.3f} s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Start a throwaway Redis (or reuse ``--data-dir``), ingest the passages, measure the delete, stop Redis."""
    from bench.run import eval_dir, load_eval_data, shown_path, throwaway_runtime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="keep the Redis data and the Topic here (a second run reuses them)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    folder = eval_dir()
    data = load_eval_data(folder)
    print(f"#### {shown_path(folder)}: {len(data.corpus)} passages", flush=True)
    with throwaway_runtime(args.data_dir, prefix="ragtopics-provenance-") as rt:
        topic = ingest(rt, data.corpus)
        measure(rt, topic, data.corpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
