"""Fault injection: the worker is killed with SIGKILL in the middle of a community rebuild, ten times.

A GraphRAG Topic's graph is imported (12 groups of 10 entities) and its communities built; then the
graph is imported again regrouped (8 groups of 15), which makes a rebuild due. A real worker process
runs the rebuild and is killed a random 0-0.3 s after the job reached a working phase (detecting
communities, writing reports, storing them); the next worker finds the job its dead predecessor
started and queues it again (:func:`ragtopics.worker.recovery.recover_rebuilds`). After every kill the
stored communities must be the old set or the new one, never a mix; at the end, the new one, with its
summaries, one per community, and the run recorded. The community report model answers slowly
(0.05 s a call) so that the kills land inside the run.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC

import pytest
from rq.job import Job

from ragtopics.graph.communities import last_run
from ragtopics.graph.community_index import CommunityIndex
from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.refresh import enqueue_rebuild, run_rebuild
from ragtopics.jobs.queue import job_progress
from ragtopics.topics.topics import create_topic
from tests.faults.processes import kill, start_worker, wait_for

KILLS = 10
NODES = 120


def plant_graph(group_size: int) -> bytes:
    """``NODES`` machines in groups of ``group_size``: a chain of strong ties inside each group, one weak tie between groups."""
    nodes = [
        {"id": f"m{n}", "name": f"Machine M-{n}", "type": "Machine", "description": f"Machine M-{n} of line {n // group_size}."}
        for n in range(NODES)
    ]
    edges = []
    for n in range(NODES):
        if (n + 1) % group_size and n + 1 < NODES:
            edges.append({"source": f"m{n}", "target": f"m{n + 1}", "description": "feeds", "strength": 5})
        if n % group_size == 0 and n + group_size < NODES:
            edges.append({"source": f"m{n}", "target": f"m{n + group_size}", "description": "backs up", "strength": 0.2})
    return json.dumps({"nodes": nodes, "edges": edges}).encode()


def memberships(index: CommunityIndex) -> frozenset[frozenset[str]]:
    """The stored communities as sets of entity ids."""
    return frozenset(frozenset(hit.entity_ids) for hit in index.get(sorted(index.get_hashes())))


@pytest.mark.faults
def test_killing_the_worker_mid_rebuild_keeps_whole_communities(rt, settings, scripted_llm):
    def slow_report(body: dict) -> str:
        time.sleep(0.05)
        return json.dumps({"title": "A production line", "summary": "Machines that feed each other."})

    scripted_llm.replies["community_report"] = slow_report
    topic = create_topic(
        rt, "Rebuild faults", kind="graphrag", settings={"graph_extraction_method": "LLM", "refresh_cycle": "off"}
    )
    ingest_graph(rt, topic, "plant.json", parse_nodes_edges_json(plant_graph(10)))
    run_rebuild(rt, topic.id)
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims)
    before = memberships(index)
    assert len(before) >= 12
    ingest_graph(rt, topic, "plant.json", parse_nodes_edges_json(plant_graph(15)))  # regrouped: a rebuild is due
    job_id = enqueue_rebuild(rt, topic)

    rng = random.Random(20261201)
    snapshots, mid_run = [], 0

    def running_since(t0: float) -> bool:
        """The rebuild runs in a worker started after ``t0`` (not a dead run's leftover state) and is at work."""
        job = Job.fetch(job_id, connection=rt.redis)
        started = job.started_at and job.started_at.replace(tzinfo=job.started_at.tzinfo or UTC).timestamp()
        return (
            job.get_status(refresh=False) == "started"
            and bool(started and started >= t0)
            and job.meta.get("phase") in ("detect", "reports", "write")
        )

    for _ in range(KILLS):
        t0 = time.time()
        worker = start_worker(settings, scripted_llm.base_url)
        busy = wait_for(lambda: running_since(t0), 90)
        time.sleep(rng.uniform(0.0, 0.3))
        finished = job_progress(rt, job_id).status == "finished"
        kill(worker)
        mid_run += busy and not finished
        snapshots.append(memberships(index))
        if finished:
            break

    worker = start_worker(settings, scripted_llm.base_url)
    try:
        done = wait_for(lambda: job_progress(rt, job_id).status == "finished", 300)
    finally:
        kill(worker)
    assert done, job_progress(rt, job_id)
    after = memberships(index)
    entity_ids = {e.id for e in graph_store(rt, topic).all_entities()}
    assert after != before and set().union(*after) == entity_ids  # every entity in the new communities
    assert all(s in (before, after) for s in snapshots), "a kill left a mix of the old and the new communities"
    run = last_run(rt.redis, topic.id)
    assert run is not None and run.communities == len(after) == index.count()
    print(
        f"\n[communities] kills {len(snapshots)}, {mid_run} inside the run; communities {len(before)} -> {len(after)}, "
        f"summaries {index.count()}; lost or mixed 0"
    )
    assert mid_run >= len(snapshots) // 2, f"only {mid_run} of {len(snapshots)} kills landed inside the run"
