"""Fault injection: the worker process is killed with SIGKILL at random moments while it indexes.

A Topic holds a first version of every document; new versions of some are uploaded whenever the
queue runs low, and a real worker process (``ragtopics worker``) is started and killed 20 times,
each a random 0-0.3 s after a document went ``processing`` (so in the middle of a job: reading,
chunking, embedding, extracting or storing). After every kill the stored state is checked; then a
worker runs to the end. Nothing may be lost, duplicated or orphaned, and each
document must stay searchable in one whole version (the old one until the new one is stored).

The worker that starts after a kill finds the job the dead one had started and queues it again
(:mod:`ragtopics.worker.recovery`); the test proves that end to end, for a RAG and a GraphRAG Topic.
The figures (kills, kills that landed mid-job, documents and chunks lost) are printed.
"""

from __future__ import annotations

import hashlib
import random
import time

import pytest

from ragtopics.documents.uploads import upload_file
from ragtopics.graph.ingest import graph_store
from ragtopics.topics.topics import Topic, create_topic
from tests.faults.processes import document_rows, kill, start_worker, wait_for

KILLS = 20
DOCUMENTS = 16


def document_text(n: int, version: int) -> bytes:
    """About six chunks (at chunk size 120) naming pumps, valves and sites, different per version."""
    rng = random.Random(n * 10 + version)
    sites = ["Leeds", "Dover", "Bergen", "Aarhus", "Lyon", "Porto", "Ghent", "Turku"]
    paragraphs = []
    for p in range(6):
        site = rng.choice(sites)
        paragraphs.append(
            f"Pump P-{n}{p} at the {site} plant is inspected every {rng.randint(10, 90)} days "
            f"(revision {version}). Valve V-{n}{p} feeds it from the {rng.choice(sites)} line, and "
            f"Engineer {rng.choice(['Ada', 'Ben', 'Cleo', 'Dev'])} Novak signs the record in version {version}."
        )
    return "\n\n".join(paragraphs).encode()


def stored_versions(rt, topic: Topic) -> dict[str, list[str]]:
    """``{document id: [version of each stored chunk]}`` read straight from the chunk hashes."""
    index = rt.chunk_index(topic.id)
    out: dict[str, list[str]] = {}
    for key in rt.redis.scan_iter(match=f"{index.prefix}:*", count=1000):
        doc_id, version = rt.redis.hmget(key, "document_id", "version")
        out.setdefault(doc_id.decode(), []).append(version.decode())
    return out


def check_state(rt, topic: Topic, allowed: dict[str, set[str]]) -> None:
    """Assert the invariants: every document has a row and exactly one whole version searchable, one it was
    uploaded in; an indexed row agrees with its chunks; no chunk without a row; (GraphRAG) no entity citing a
    chunk that is gone, none stored twice."""
    rows = {d.id: d for d in document_rows(rt, topic.id)}
    assert len(rows) == DOCUMENTS, "a document row was lost"
    versions = stored_versions(rt, topic)
    assert set(versions) <= set(rows), f"chunks of documents with no row: {set(versions) - set(rows)}"
    for doc_id, row in rows.items():
        stored = versions.get(doc_id, [])
        assert stored, f"{row.file_name} has no searchable chunk (status {row.status})"
        assert len(set(stored)) == 1, f"{row.file_name} mixes versions"
        assert stored[0] in allowed[row.file_name], f"{row.file_name} holds a version never uploaded"
        if row.status == "indexed":
            assert stored[0] == row.content_sha256 and row.chunk_count == len(stored), f"{row.file_name}: row and chunks disagree"
    assert rt.chunk_index(topic.id).count() == sum(len(v) for v in versions.values())
    if topic.kind == "graphrag":
        prefix = rt.chunk_index(topic.id).prefix
        chunk_ids = {k.decode().rsplit(":", 1)[-1] for k in rt.redis.scan_iter(match=f"{prefix}:*", count=1000)}
        entities = list(graph_store(rt, topic).all_entities())
        for entity in entities:
            assert entity.chunk_ids, f"entity {entity.name} has no chunk"
            assert entity.chunk_ids <= chunk_ids, f"entity {entity.name} cites chunks that are gone"
        assert len({e.id for e in entities}) == len(entities), "an entity is stored twice"


@pytest.mark.faults
@pytest.mark.parametrize("kind", ["rag", "graphrag"])
def test_killing_the_worker_twenty_times_mid_ingest_loses_nothing(rt, settings, scripted_llm, run_jobs, kind):
    config = {"chunk_size": 120, "chunk_overlap": 0}
    if kind == "graphrag":
        config["graph_extraction_method"] = "NLP"
    topic = create_topic(rt, f"Faults {kind}", kind=kind, settings=config)
    names = [f"plant-{n:02d}.txt" for n in range(DOCUMENTS)]
    allowed: dict[str, set[str]] = {name: set() for name in names}
    latest: dict[str, str] = {}

    def upload(n: int, version: int) -> None:
        data = document_text(n, version)
        upload_file(rt, topic, names[n], data)
        latest[names[n]] = hashlib.sha256(data).hexdigest()
        allowed[names[n]].add(latest[names[n]])

    for n in range(DOCUMENTS):
        upload(n, 1)
    run_jobs()
    check_state(rt, topic, allowed)

    rng = random.Random(20261201)
    mid_job = 0
    for kill_number in range(KILLS):
        waiting = [d for d in document_rows(rt, topic.id) if d.status in ("queued", "processing")]
        if len(waiting) < 4:  # keep the worker busy: new versions of some documents
            for n in rng.sample(range(DOCUMENTS), 6):
                upload(n, kill_number + 2)
        worker = start_worker(settings, scripted_llm.base_url)
        busy = wait_for(lambda: any(d.status == "processing" for d in document_rows(rt, topic.id)), 60)
        time.sleep(rng.uniform(0.0, 0.3))  # a random moment of the job (or of the next one)
        kill(worker)
        mid_job += busy
        check_state(rt, topic, allowed)

    worker = start_worker(settings, scripted_llm.base_url)
    try:
        done = wait_for(
            lambda: all(d.status == "indexed" and d.content_sha256 == latest[d.file_name] for d in document_rows(rt, topic.id)),
            300,
        )
    finally:
        kill(worker)
    rows = document_rows(rt, topic.id)
    assert done, [(d.file_name, d.status, d.error) for d in rows if d.status != "indexed"]
    check_state(rt, topic, {name: {sha} for name, sha in latest.items()})  # the latest version, everywhere
    chunks = rt.chunk_index(topic.id).count()
    assert chunks == sum(d.chunk_count for d in rows) > DOCUMENTS
    uploads = sum(len(v) for v in allowed.values())
    print(
        f"\n[{kind}] kills {KILLS}, {mid_job} while a document was being indexed; {uploads} uploads of {DOCUMENTS} "
        f"documents; documents lost 0, chunks {chunks} (latest versions only: none orphaned or duplicated)"
    )
    assert mid_job >= KILLS * 3 // 4, f"only {mid_job} kills landed while a document was being indexed"
