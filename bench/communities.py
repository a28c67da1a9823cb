"""Community benchmark: Leiden on large synthetic graphs, and model calls of incremental rebuilds.

Figures, one per line, never asserted:

1. :func:`detect_communities` on 10,000 and 100,000 entities with planted communities
   (groups of 50, about 5 relationships per entity, 90 % of them inside the group, strengths
   1-2): seconds (igraph graph built from the entities and relationships, plus Leiden),
   communities found, modularity, agreement with the planted groups (NMI), and the peak
   resident memory of the run over the process's size before it (each size runs in a fresh
   process). For comparison, on the same graphs: leidenalg 0.12's
   ``RBConfigurationVertexPartition`` (the same objective) and igraph's Leiden run to
   convergence instead of :data:`LEIDEN_ITERATIONS` passes. The goal is under 10 s at 100,000.
2. :func:`rebuild` against a throwaway embedded Redis (FalkorDB + RediSearch) and the scripted
   model server (tests/scripted_llm.py; embeddings from it too): 300 groups of 5 entities; a
   first rebuild, a second with nothing changed, then one after descriptions changed in 7
   groups; for each: model calls, reports written / kept / deleted, seconds. Then the same
   graph with the Community Report role on the bundled model's name (graph-only reports).

``python -m bench.communities`` runs it (``--quick``: 10,000 only in part 1, no comparison).
"""

from __future__ import annotations

import multiprocessing
import random
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

from bench.report import figure, section

GROUP_SIZE = 50
TIES_PER_ENTITY = 5
INSIDE_SHARE = 0.9


def planted_graph(n: int, seed: int = 1):
    """``(entities, relationships, planted labels)`` of ``n`` entities in groups of :data:`GROUP_SIZE`."""
    from ragtopics.graph.model import Entity, Relationship

    rng = random.Random(seed)
    chunk = frozenset({"c"})
    entities = [Entity(f"ent-{i:08d}", f"E{i}", "THING", "", (), chunk) for i in range(n)]
    rels = []
    for i in range(n):
        for _ in range(TIES_PER_ENTITY):
            j = (i // GROUP_SIZE) * GROUP_SIZE + rng.randrange(GROUP_SIZE) if rng.random() < INSIDE_SHARE else rng.randrange(n)
            if j != i:
                rels.append(Relationship(entities[i].id, entities[j].id, "", 1.0 + rng.random(), chunk))
    return entities, rels, [i // GROUP_SIZE for i in range(n)]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mib() -> float:
    """Peak resident size of this process (VmHWM; ``ru_maxrss`` would carry the parent's peak across exec)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _leiden_run(n: int, compare: bool) -> list[tuple[str, object, str]]:
    """One size, in a fresh process: the figures as ``(label, value, unit)``."""
    import igraph

    from ragtopics.graph.communities import detect_communities

    entities, rels, planted = planted_graph(n)
    before = _rss_mib()
    t0 = time.perf_counter()
    communities = detect_communities(entities, rels, resolution=1.0)
    seconds = time.perf_counter() - t0
    peak = _peak_mib()
    found = {eid: k for k, c in enumerate(communities) for eid in c.entity_ids}
    membership = [found[e.id] for e in entities]
    graph = igraph.Graph(n=n, edges=[(int(r.source_id[4:]), int(r.target_id[4:])) for r in rels])
    graph.es["weight"] = [r.strength for r in rels]
    out = [
        (f"{n:,} entities, {len(rels):,} relationships: detect_communities", seconds, "s"),
        ("  communities found / planted", f"{len(communities)} / {n // GROUP_SIZE}", ""),
        ("  modularity", round(graph.modularity(membership, weights="weight"), 4), ""),
        ("  NMI with the planted groups", round(igraph.compare_communities(membership, planted, method="nmi"), 4), ""),
        ("  peak resident memory over the size before (inputs built)", f"{peak - before:.0f} (peak {peak:.0f})", "MiB"),
    ]
    if compare:
        out += _compare(graph)
    return out


def _compare(graph) -> list[tuple[str, object, str]]:
    import igraph
    import leidenalg

    from ragtopics.graph.communities import LEIDEN_ITERATIONS

    graph = graph.copy()
    graph.simplify(combine_edges="sum")
    t0 = time.perf_counter()
    partition = leidenalg.find_partition(
        graph, leidenalg.RBConfigurationVertexPartition, weights="weight", resolution_parameter=1.0, seed=42
    )
    la_s = time.perf_counter() - t0
    out = [
        (
            "  leidenalg RBConfigurationVertexPartition (same objective)",
            f"{la_s:.3f} s, {len(partition)} communities, modularity {partition.modularity:.4f}",
            "",
        )
    ]
    for iterations in (LEIDEN_ITERATIONS, -1):
        igraph.set_random_number_generator(random.Random(42))
        t0 = time.perf_counter()
        clustering = graph.community_leiden(
            objective_function="modularity", weights="weight", resolution=1.0, n_iterations=iterations
        )
        took = time.perf_counter() - t0
        out.append(
            (
                f"  igraph Leiden alone, n_iterations={iterations}",
                (
                    f"{took:.3f} s, {len(clustering)} communities, modularity "
                    f"{graph.modularity(clustering.membership, weights='weight'):.4f}"
                ),
                "",
            )
        )
    igraph.set_random_number_generator(random)
    return out


def bench_leiden(sizes: list[int], compare: bool) -> None:
    section(
        f"1. Leiden (igraph, modularity, resolution 1.0) on planted graphs (groups of {GROUP_SIZE}, "
        f"~{TIES_PER_ENTITY} ties per entity, {INSIDE_SHARE:.0%} inside)"
    )
    context = multiprocessing.get_context("spawn")
    for n in sizes:
        with context.Pool(1) as pool:
            for label, value, unit in pool.apply(_leiden_run, (n, compare)):
                figure(label, value, unit)


# ----------------------------------------------------------------------------- rebuild


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _groups_graph(store, groups: int, size: int, changed: set[int] = frozenset()) -> None:
    from ragtopics.graph.model import Entity, Relationship, entity_id_for

    entities, rels = [], []
    for g in range(groups):
        names = [f"Part {g}-{i}" for i in range(size)]
        suffix = " It was revised." if g in changed else ""
        chunk = frozenset({f"c{g}"})
        entities += [
            Entity(entity_id_for(n, "PART"), n, "PART", f"{n} belongs to assembly {g}.{suffix}", (), chunk) for n in names
        ]
        rels += [
            Relationship(entity_id_for(a, "PART"), entity_id_for(b, "PART"), f"{a} is fitted to {b}.", 2.0, chunk)
            for k, a in enumerate(names)
            for b in names[k + 1 :]
        ]
    store.upsert("doc", "parts.txt", [(f"c{g}", g) for g in range(groups)], entities, rels)


def bench_rebuild(groups: int = 300, size: int = 5, changed_groups: int = 7) -> None:
    import json

    import redis

    from ragtopics.graph.communities import rebuild
    from ragtopics.graph.community_index import CommunityIndex
    from ragtopics.graph.store import GraphStore
    from ragtopics.llm.gateway import ModelGateway
    from ragtopics.ops.redis_server import EmbeddedRedis
    from ragtopics.settings.env import Settings
    from tests.scripted_llm import ScriptedLLM

    section(f"2. rebuild: {groups} groups of {size} entities, embedded Redis, scripted model")
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis", _free_port()).start()
        llm = ScriptedLLM().start()
        llm.replies["community_report"] = lambda body: json.dumps({"title": "An assembly", "summary": "Parts fitted together."})
        try:
            client = redis.Redis.from_url(server.url)
            store = GraphStore(client, "bench")
            _groups_graph(store, groups, size)

            def run(label: str, **env) -> None:
                settings = Settings(
                    RAGTOPICS_DATA_DIR=Path(tmp) / "var",
                    REDIS_URL=server.url,
                    LLM_BASE_URL=llm.base_url,
                    EMBEDDING_BASE_URL=llm.base_url,
                    EMBEDDING_MODEL="scripted-embeddings",
                    **{"LLM_MODEL": "scripted", **env},
                    _env_file=None,
                )
                gateway = ModelGateway(settings)
                index = CommunityIndex(client, "bench", dims=gateway.embedder.dims, embedding_model=gateway.embedder.model)
                llm.requests.clear()
                result = rebuild("bench", store, index, gateway, resolution=1.0)
                calls = len(llm.prompts("community_report"))
                figure(
                    label,
                    f"{calls} model calls, written {result.written}, kept {result.kept}, deleted {result.deleted}, "
                    f"{result.communities} communities, {result.seconds:.2f} s",
                )

            run("first rebuild")
            run("second rebuild, nothing changed")
            _groups_graph(store, groups, size, changed=set(range(changed_groups)))
            run(f"after descriptions changed in {changed_groups} groups")
            client.delete(*client.scan_iter(match="rt:bench:community:*"))
            run("graph-only (bundled model's name), every report written", LLM_MODEL="SmolLM2-135M-Instruct")
        finally:
            llm.stop()
            server.stop()


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    bench_leiden([10_000] if quick else [10_000, 100_000], compare=not quick)
    bench_rebuild()


if __name__ == "__main__":
    main(sys.argv[1:])
