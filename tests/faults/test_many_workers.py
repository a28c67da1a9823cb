"""Fault injection: three workers share one Redis while a worker is killed (SIGKILL) every few seconds.

Uploads go into a RAG Topic and a GraphRAG Topic while the workers index them (real ``ragtopics worker``
processes, as ``docker compose up --scale worker=3`` runs them). At the end every document must have been
indexed exactly once: it says ``indexed``, the index holds exactly its chunks, one stored version
(one upload trace) per document, nothing left queued or processing, no entity stored twice, and the
GraphRAG Topic's graph is the one a sequential ingest of the same files builds.

What a kill is: every ``FAULT_KILL_EVERY_S`` seconds the test picks, among the worker processes that rq
says are running a job, one at random and SIGKILLs it in the middle of that job. ``ragtopics worker`` is a
launcher that forks the worker process rq lists (:mod:`ragtopics.worker.launcher`). Four kills in five are
warm: the worker process alone is killed (as the out-of-memory killer would kill it) and its launcher forks
a new one at once, which starts in about a second. Every fifth (``FAULT_COLD_EVERY``) is cold: the worker's
whole session is killed (launcher, worker process and rq's scheduler, as a container or machine going down)
and the test starts a new ``ragtopics worker``, which imports its libraries again (seconds to tens of
seconds on a loaded host). In both cases the killed job is abandoned in rq's terms and queued again by the
recoveries.

Sizes come from the environment; the defaults are the full size, which CI runs (about 160 s on a quiet 2-core
host; BENCHMARKS.md, "Several workers on several machines, killed"):

- ``FAULT_RAG_UPLOADS`` (default 500) and ``FAULT_GRAPH_UPLOADS`` (default 100): files uploaded;
- ``FAULT_KILL_EVERY_S`` (default 10): seconds between two kills;
- ``FAULT_MAX_KILLS`` (default 100000): no kill after this many;
- ``FAULT_COLD_EVERY`` (default 5): every this many kills, one is cold (0: none);
- ``FAULT_WORKERS`` (default 3): workers (launchers);
- ``FAULT_DEADLINE_S`` (default 600 + 3 s per upload): how long the run may take before the test gives up
  (pytest's own timeout is raised to match).

A quick run for development: ``FAULT_RAG_UPLOADS=12 FAULT_GRAPH_UPLOADS=4 FAULT_KILL_EVERY_S=3 FAULT_MAX_KILLS=5``
(see BENCHMARKS.md, "Several workers on several machines, killed").

Nothing is shared on disk, as between machines: every worker has a data folder of its own, the test (the
console's side) another; the files go to an S3-compatible object store (SeaweedFS), the metadata to a
PostgreSQL cluster, and all share one Redis (search and graph). :func:`worker_env` is the one place that
says where a worker keeps things. The test is skipped, saying why, where PostgreSQL or SeaweedFS is missing.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from rq.worker import Worker
from sqlmodel import select

from ragtopics.documents.uploads import upload_file
from ragtopics.graph.ingest import graph_store
from ragtopics.ingest.pipeline import ingest_document
from ragtopics.settings.env import Settings
from ragtopics.storage.metadata import TraceRow
from ragtopics.topics.topics import Topic, create_topic
from tests.conftest import active_runtime
from tests.faults.processes import document_rows, kill, start_worker, worker_processes
from tests.services import S3_ACCESS_KEY, S3_SECRET_KEY, PostgresCluster, SeaweedS3, running

RAG_UPLOADS = int(os.environ.get("FAULT_RAG_UPLOADS", "500"))
GRAPH_UPLOADS = int(os.environ.get("FAULT_GRAPH_UPLOADS", "100"))
KILL_EVERY_S = float(os.environ.get("FAULT_KILL_EVERY_S", "10"))
MAX_KILLS = int(os.environ.get("FAULT_MAX_KILLS", "100000"))
#: Every this many kills, one is cold (the whole worker: launcher and all; 0: none); the others are warm (``FAULT_COLD_EVERY``).
COLD_EVERY = int(os.environ.get("FAULT_COLD_EVERY", "5"))
WORKERS = int(os.environ.get("FAULT_WORKERS", "3"))
#: Seconds the whole run may take before the test gives up on what is not indexed yet (``FAULT_DEADLINE_S``).
DEADLINE_S = float(os.environ.get("FAULT_DEADLINE_S", 600 + 3 * (RAG_UPLOADS + GRAPH_UPLOADS)))

SITES = ["Leeds", "Dover", "Bergen", "Aarhus", "Lyon", "Porto", "Ghent", "Turku"]
OWNERS = [("International Business Machines", "IBM"), ("European Space Agency", "ESA"), ("World Health Organization", "WHO")]


def rag_text(n: int) -> bytes:
    """Two or three short paragraphs about one pump, different for every ``n``."""
    rng = random.Random(n)
    return "\n\n".join(
        f"Pump P-{n}-{p} at the {rng.choice(SITES)} plant is inspected every {rng.randint(10, 90)} days; "
        f"valve V-{n}-{p} feeds it."
        for p in range(rng.randint(2, 3))
    ).encode()


def graph_text(n: int) -> bytes:
    """Two paragraphs naming sites, people and an organisation, by its long name in even files and its short one in odd."""
    rng = random.Random(1000 + n)
    owner = OWNERS[n % len(OWNERS)][n % 2]
    return (
        f"{owner} runs the {rng.choice(SITES)} plant, where Engineer {rng.choice(['Ada', 'Ben', 'Cleo'])} Novak "
        f"inspects pump P-{n}.\n\nThe {rng.choice(SITES)} line of {owner} feeds valve V-{n}."
    ).encode()


@pytest.fixture(scope="module")
def postgres():
    yield from running(PostgresCluster, "ragtopics-pg-")


@pytest.fixture(scope="module")
def s3_server():
    yield from running(SeaweedS3, "ragtopics-s3-")


@pytest.fixture
def shared_stores(tmp_path, postgres, s3_server) -> dict[str, str]:
    """The settings every machine of the test shares: a database of its own on the PostgreSQL cluster and
    the object store (one key prefix per test)."""
    database = postgres.create_database(f"t_{tmp_path.name.lower().replace('-', '_')}"[:60])
    return {
        "DATABASE_URL": database,
        "FILE_STORE": "s3",
        "S3_ENDPOINT_URL": s3_server.endpoint_url,
        "S3_BUCKET": "ragtopics-faults",
        "S3_PREFIX": tmp_path.name,
        "S3_ACCESS_KEY_ID": S3_ACCESS_KEY,
        "S3_SECRET_ACCESS_KEY": S3_SECRET_KEY,
    }


@pytest.fixture
def console(settings, shared_stores, embedder, scripted_llm, tmp_path):
    """The console's runtime (uploads and checks): its own data folder, the shared database and object store."""
    mine = Settings(
        **{**settings.model_dump(by_alias=True), **shared_stores, "RAGTOPICS_DATA_DIR": tmp_path / "console"}, _env_file=None
    )
    with active_runtime(mine, embedder, scripted_llm) as runtime:
        yield runtime


def worker_env(shared: dict[str, str], folder: Path) -> dict[str, str]:
    """What a worker of this test gets besides :func:`~tests.faults.processes.start_worker`'s (the test's Redis and
    queue, an rq heartbeat every second): a data folder of its own, the shared database and object store."""
    return {**shared, "RAGTOPICS_DATA_DIR": str(folder)}


class Fleet:
    """The workers (``ragtopics worker`` launchers, see :mod:`ragtopics.worker.launcher`), each logging to its own file.

    A kill is a SIGKILL of a worker process that rq says is running a job: a warm kill takes the worker
    process alone (as the out-of-memory killer would), and its launcher forks a new one; every
    ``COLD_EVERY``-th kill takes the worker's whole session instead (launcher, worker process, rq's scheduler,
    as a container or machine going down would), and the test starts a new launcher: a cold start.
    """

    def __init__(self, settings, llm_base_url: str, size: int, logs: Path, shared: dict[str, str], folders: Path):
        self.settings, self.llm_base_url, self.logs, self.shared, self.folders = settings, llm_base_url, logs, shared, folders
        self.launchers = [self._start(n) for n in range(size)]
        self.warm_kills = self.cold_kills = 0

    @property
    def kills(self) -> int:
        return self.warm_kills + self.cold_kills

    def _start(self, n: int):
        env = worker_env(self.shared, self.folders / f"worker-{n}")
        return start_worker(self.settings, self.llm_base_url, self.logs / f"worker-{n}.log", env)

    def busy(self, rt) -> list[tuple[int, int]]:
        """The worker processes that rq says are running a job now, as (launcher number, process id)."""
        running = {w.pid for w in Worker.all(connection=rt.redis) if w.get_state() == "busy"}
        return [(n, pid) for n, launcher in enumerate(self.launchers) for pid in worker_processes(rt, launcher) if pid in running]

    def kill_one(self, n: int, pid: int) -> None:
        """SIGKILL worker process ``pid`` of launcher ``n`` (warm), or, every ``COLD_EVERY``-th kill, all of
        launcher ``n``'s session, then start a new launcher (cold)."""
        if COLD_EVERY > 0 and (self.kills + 1) % COLD_EVERY == 0:
            kill(self.launchers[n])
            self.cold_kills += 1
            self.launchers[n] = self._start(n)
        else:
            with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
                os.kill(pid, signal.SIGKILL)
            self.warm_kills += 1

    def stop(self) -> None:
        for launcher in self.launchers:
            kill(launcher)

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in sorted(self.logs.glob("*.log")))


def stored_traces(rt, topic: Topic) -> Counter:
    """How many times each document of the Topic had a version stored (one upload trace with a ``store`` step each)."""
    with rt.metadata.session() as s:
        rows = s.exec(select(TraceRow).where(TraceRow.kind == "upload", TraceRow.topic_id == topic.id)).all()
    return Counter(row.owner.split(":")[1] for row in rows if any(ev.get("step") == "store" for ev in row.events))


def graph_shape(rt, topic: Topic) -> tuple[frozenset, int, int]:
    """The graph as a sequential ingest would also build it: each entity as its type and every name it goes by
    (which of them is its name depends on which file came first), the entity count and the relationship count."""
    store = graph_store(rt, topic)
    entities = list(store.all_entities())
    return (
        frozenset((e.type, frozenset({e.name, *e.aliases})) for e in entities),
        len(entities),
        sum(1 for _ in store.all_relationships()),
    )


def settled(rt, topics: list[Topic], expected: int) -> bool:
    rows = [d for topic in topics for d in document_rows(rt, topic.id)]
    return len(rows) == expected and all(d.status == "indexed" for d in rows)


@pytest.mark.faults
@pytest.mark.timeout(DEADLINE_S + 900)  # the run's own deadline, then the checks and a sequential ingest of the graph files
def test_three_workers_one_killed_every_few_seconds_index_every_document_exactly_once(
    console, shared_stores, s3_server, postgres, scripted_llm, tmp_path
):
    rt, settings = console, console.settings
    rag = create_topic(rt, "Many workers RAG", settings={"chunk_size": 120, "chunk_overlap": 0})
    graph = create_topic(
        rt,
        "Many workers graph",
        kind="graphrag",
        settings={"graph_extraction_method": "NLP", "chunk_size": 120, "chunk_overlap": 0},
    )
    uploads = [(rag, f"pump-{n:04d}.txt", rag_text(n)) for n in range(RAG_UPLOADS)]
    uploads += [(graph, f"plant-{n:04d}.txt", graph_text(n)) for n in range(GRAPH_UPLOADS)]
    random.Random(7).shuffle(uploads)
    logs = tmp_path / "logs"
    logs.mkdir()

    started = time.monotonic()
    fleet = Fleet(settings, scripted_llm.base_url, WORKERS, logs, shared_stores, tmp_path)
    rng = random.Random(20261203)
    try:
        sent = 0
        next_kill = time.monotonic() + KILL_EVERY_S
        while not (sent == len(uploads) and settled(rt, [rag, graph], len(uploads))):
            assert time.monotonic() - started < DEADLINE_S, "not everything was indexed in time:\n" + fleet.log_tail()
            if sent < len(uploads):  # uploads keep arriving while the workers are killed
                for topic, name, data in uploads[sent : sent + max(1, len(uploads) // 20)]:
                    upload_file(rt, topic, name, data)
                    sent += 1
            if (
                fleet.kills < MAX_KILLS and time.monotonic() >= next_kill and (busy := fleet.busy(rt))
            ):  # a kill in the middle of a job
                fleet.kill_one(*rng.choice(busy))
                next_kill = time.monotonic() + KILL_EVERY_S
            time.sleep(0.2)
        took = time.monotonic() - started
    finally:
        fleet.stop()

    rows = {topic.id: document_rows(rt, topic.id) for topic in (rag, graph)}
    stuck = [d.file_name for r in rows.values() for d in r if d.status in ("queued", "processing")]
    lost = [d.file_name for r in rows.values() for d in r if d.status != "indexed"]
    duplicated = []
    for topic in (rag, graph):
        index = rt.chunk_index(topic.id)
        counts = index.chunk_counts()
        for d in rows[topic.id]:
            assert counts.get(d.id, 0) == d.chunk_count > 0, f"{d.file_name}: {counts.get(d.id, 0)} chunks for {d.chunk_count}"
        assert index.count() == sum(d.chunk_count for d in rows[topic.id]), "chunks that belong to no document"
        stores = stored_traces(rt, topic)
        duplicated += [d.file_name for d in rows[topic.id] if stores[d.id] > 1]
    entities = list(graph_store(rt, graph).all_entities())
    duplicated += [e.name for e in entities if sum(1 for f in entities if f.id == e.id) > 1]
    print(
        f"\n[{WORKERS} workers] uploads {len(uploads)} ({RAG_UPLOADS} RAG, {GRAPH_UPLOADS} GraphRAG), kills {fleet.kills} "
        f"({fleet.warm_kills} warm, {fleet.cold_kills} cold; one every {KILL_EVERY_S:g} s), lost {len(lost)}, duplicated {len(duplicated)}, stuck {len(stuck)}, "
        f"{took:.0f} s; {s3_server.version}; {postgres.version}"
    )
    assert not lost and not stuck and not duplicated, (lost, stuck, duplicated)
    assert len(rows[rag.id]) == RAG_UPLOADS and len(rows[graph.id]) == GRAPH_UPLOADS
    assert fleet.kills >= min(2, MAX_KILLS), "the run was too short to kill a worker mid-job"
    kept = [p for p in tmp_path.glob("*/files/**/*") if p.is_file()]
    assert kept == [], f"files kept on a machine's disk instead of the object store: {kept[:5]}"

    reference = create_topic(
        rt,
        "Sequential graph",
        kind="graphrag",
        settings={"graph_extraction_method": "NLP", "chunk_size": 120, "chunk_overlap": 0},
    )
    for topic, name, data in sorted(uploads, key=lambda u: u[1]):
        if topic.id == graph.id:
            assert ingest_document(rt, upload_file(rt, reference, name, data).id).status == "indexed"
    assert graph_shape(rt, graph) == graph_shape(rt, reference)
