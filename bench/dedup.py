"""Deduplication benchmark: blocked :func:`deduplicate` against a naive all-pairs rapidfuzz loop.

Names are synthetic: the HotpotQA titles of ``shared/eval/hotpotqa/corpus.json`` (real entity
names; ``RAGTOPICS_EVAL_DIR`` overrides the folder) and random distinct names made of
syllables (each at least two edits from every other), plus perturbed copies of them (case,
punctuation, one typo). All names get one type, the hardest case (no type guard helps), and no
descriptions; nothing is in the graph yet (``existing=[]``), so every pair is a candidate.

Figures, one per line, never asserted:

* the HotpotQA check: 500 titles and a perturbed copy of each; precision and recall of the
  merged pairs (a pair is right when both names come from the same title);
* dedup time (best of five on 10,000, garbage collection off while timing, as timeit does),
  merges by rule, unclear pairs and precision/recall on 10,000 and 100,000 names;
* the naive loop (every pair through ``fuzz.ratio`` in Python, then the same verdicts) on the
  10,000 names: its time (measured on all 50M pairs, or with ``--quick`` on a 2,000-name
  subset and extrapolated quadratically, which the output says), the speed ratio, and
  whether both found the same groups;
* peak memory of dedup: Python allocations (tracemalloc, a second run) and the process's
  peak resident size;
* what an upload reads of the graph to deduplicate against it, at 10,000 and 50,000 stored
  entities (the synthetic names, upserted into an embedded FalkorDB): the stored partners
  looked up by blocking key (``GraphStore.dedup_partners``) against every stored entity
  (``GraphStore.all_entities``, what an upload read before), for a file's worth of
  :data:`UPLOAD_ENTITIES` names (half perturbed copies of stored names, half new): median
  milliseconds over :data:`UPLOADS` uploads, entities read, and whether ``deduplicate`` made
  the same merges and unclear pairs from both.

``python -m bench.dedup`` runs it (``--quick`` for the extrapolated naive loop).
"""

from __future__ import annotations

import gc
import json
import os
import random
import resource
import string
import sys
import time
import tracemalloc
from collections import Counter
from dataclasses import replace
from pathlib import Path

from rapidfuzz import fuzz

from ragtopics.graph.dedup import FUZZY_GREY_MIN, FUZZY_THRESHOLD, DedupResult, deduplicate, fuzzy_verdict, name_form
from ragtopics.graph.model import Entity, entity_id_for, normalize_name

TYPE = "ENTITY"
SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"] + ["ar", "en", "or", "ul", "is", "an"]
NAIVE_SUBSET = 2_000
#: Stored graph sizes of the partner look-up, names of one upload, uploads timed.
STORED_SIZES = (10_000, 50_000)
UPLOAD_ENTITIES = 30
UPLOADS = 15


def eval_dir() -> Path:
    env = os.environ.get("RAGTOPICS_EVAL_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[1]
    for candidate in (here.parent / "shared" / "eval" / "hotpotqa", here / "shared" / "eval" / "hotpotqa"):
        if candidate.exists():
            return candidate
    raise SystemExit("HotpotQA eval set not found; set RAGTOPICS_EVAL_DIR")


def titles() -> list[str]:
    return list(json.loads((eval_dir() / "corpus.json").read_text()))


def perturb(name: str, rng: random.Random) -> str:
    """One perturbed copy: case, punctuation or one typo (letters only, so numbers stay)."""
    kind = rng.choice(["case", "punctuation", "typo", "typo"])
    if kind == "case":
        return rng.choice([name.lower(), name.upper(), name.swapcase()])
    if kind == "punctuation":
        stripped = "".join(ch for ch in name if ch.isalnum() or ch.isspace())
        return stripped if stripped != name else name.replace(" ", "-", 1) if " " in name else name + "."
    return typo(name, rng)


def typo(name: str, rng: random.Random) -> str:
    """One substitution, deletion, insertion or swap of neighbours at a letter."""
    at = rng.choice([i for i, ch in enumerate(name) if ch.isalpha()] or [0])
    kind = rng.choice("sdit")
    letter = rng.choice([c for c in string.ascii_lowercase if c != name[at].lower()])
    if kind == "s":
        return name[:at] + letter + name[at + 1 :]
    if kind == "d" and len(name) > 1:
        return name[:at] + name[at + 1 :]
    if kind == "t" and at + 1 < len(name) and name[at + 1].isalpha() and name[at + 1] != name[at]:
        return name[:at] + name[at + 1] + name[at] + name[at + 2 :]
    return name[:at] + letter + name[at:]


def one_deletion_keys(name: str) -> set[str]:
    compact = normalize_name(name)
    return {compact} | {compact[:k] + compact[k + 1 :] for k in range(len(compact))}


def random_name(rng: random.Random) -> str:
    words = rng.choice([1, 2, 2, 3])
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 3, 3, 4]))).capitalize() for _ in range(words))


def synthetic(n: int, seed: int = 7) -> tuple[list[str], list[int]]:
    """``n`` names with their origin: the titles and random distinct names (70 %), then perturbed copies (30 %)."""
    rng = random.Random(seed)
    originals = titles()
    taken = {key for t in originals for key in one_deletion_keys(t)}
    target = max(len(originals), int(n * 0.7))
    while len(originals) < target:
        name = random_name(rng)
        keys = one_deletion_keys(name)
        if taken.isdisjoint(keys):  # at least two edits from every name so far: really distinct
            taken |= keys
            originals.append(name)
    names, origin = list(originals[:target]), list(range(target))
    while len(names) < n:
        k = rng.randrange(target)
        names.append(perturb(originals[k], rng))
        origin.append(k)
    order = list(range(n))
    rng.shuffle(order)
    return [names[i] for i in order], [origin[i] for i in order]


def entities(names: list[str]) -> list[Entity]:
    return [Entity(entity_id_for(n, TYPE), n, TYPE, chunk_ids=frozenset({f"chunk-{i}"})) for i, n in enumerate(names)]


def groups_of(result: DedupResult, ents: list[Entity]) -> list[int]:
    """The kept group of each name, as an index into the kept ids."""
    ids: dict[str, int] = {}
    return [ids.setdefault(result.mapping[e.id], len(ids)) for e in ents]


def precision_recall(group: list[int], origin: list[int]) -> tuple[float, float, int]:
    """Pairwise precision and recall of the grouping against the origins, and the number of merged pairs."""
    by_group, by_origin, both = Counter(group), Counter(origin), Counter(zip(group, origin))
    merged = sum(c * (c - 1) // 2 for c in by_group.values())
    true = sum(c * (c - 1) // 2 for c in by_origin.values())
    right = sum(c * (c - 1) // 2 for c in both.values())
    return (right / merged if merged else 1.0), (right / true if true else 1.0), merged


def naive_groups(names: list[str]) -> tuple[list[int], tuple[float, float]]:
    """Every pair through fuzz.ratio in a Python loop, then the same verdicts; returns the groups and (wall, CPU) seconds."""
    return timed(lambda: _naive(names), 1)[::-1]


def _naive(names: list[str]) -> list[int]:
    forms = [name_form(n) for n in names]
    compact = [f.replace(" ", "") for f in forms]
    cutoff = FUZZY_GREY_MIN * 100
    hits = []
    for i in range(len(names)):
        fi, ci = forms[i], compact[i]
        for j in range(i + 1, len(names)):
            if ci == compact[j] or fuzz.ratio(fi, forms[j], score_cutoff=cutoff):
                hits.append((i, j))
    parent = list(range(len(names)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in hits:
        same = compact[i] == compact[j] or sorted(forms[i].split()) == sorted(forms[j].split())
        verdict = None if same else fuzzy_verdict(names[i], names[j], fuzz.ratio(forms[i], forms[j]) / 100)
        if same or (verdict and verdict[0] == "merge"):
            parent[find(i)] = find(j)
    return [find(i) for i in range(len(names))]


def partition(group: list[int]) -> set[frozenset[int]]:
    members: dict[int, list[int]] = {}
    for i, g in enumerate(group):
        members.setdefault(g, []).append(i)
    return {frozenset(m) for m in members.values() if len(m) > 1}


def timed(function, repeats: int):
    """Best wall and CPU seconds of ``repeats`` calls, garbage collection off while timing (as timeit does); the last result.

    Both figures are printed: on a shared machine the CPU time of this (single-threaded) work
    varies less than the wall time.
    """
    best, best_cpu, result = float("inf"), float("inf"), None
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            result = function()
            best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
        finally:
            gc.enable()
    return (best, best_cpu), result


def run_dedup(names: list[str], origin: list[int], label: str, repeats: int = 3) -> tuple[list[int], tuple[float, float]]:
    ents = entities(names)
    (seconds, cpu), result = timed(lambda: deduplicate(ents, []), repeats)
    group = groups_of(result, ents)
    precision, recall, merged = precision_recall(group, origin)
    rules = Counter(m.rule for m in result.merges)
    print(
        f"{label}: dedup {seconds:.3f} s wall, {cpu:.3f} s CPU (best of {repeats}), {len(result.entities)} entities kept, "
        f"merge records {dict(rules)}, unclear {len(result.unclear)}, merged pairs {merged}, "
        f"precision {precision:.4f}, recall {recall:.4f}"
    )
    return group, (seconds, cpu)


def peak_memory(names: list[str]) -> int:
    ents = entities(names)
    tracemalloc.start()
    deduplicate(ents, [])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def hotpot_check(seed: int = 11) -> None:
    rng = random.Random(seed)
    originals = titles()[:500]
    names = originals + [perturb(t, rng) for t in originals]
    origin = list(range(500)) * 2
    ents = entities(names)
    result = deduplicate(ents, [])
    group = groups_of(result, ents)
    precision, recall, merged = precision_recall(group, origin)
    originals_apart = len({group[i] for i in range(500)}) == 500
    print(
        f"hotpotqa 500 titles + 500 perturbed copies: merged pairs {merged}, precision {precision:.4f}, recall {recall:.4f}, "
        f"originals all distinct: {originals_apart}, unclear {len(result.unclear)}"
    )
    missed = [(names[i], names[i + 500]) for i in range(500) if group[i] != group[i + 500]]
    print(f"  missed ({len(missed)}): {missed[:8]}")
    for m in result.merges[:10]:
        print(f"  merge: {m.merged!r} -> {m.kept!r} ({m.rule}, {m.score:.3f})")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_stored_partners(sizes: tuple[int, ...] = STORED_SIZES) -> dict[str, float]:
    """The graph read of one upload's deduplication: key look-up of partners against reading every entity.

    Returns:
        ``{"partners_<n>_ms", "all_<n>_ms"}`` per size: medians over :data:`UPLOADS` uploads.
    """
    import statistics
    import tempfile

    import redis

    from ragtopics.graph.dedup import partner_keys
    from ragtopics.graph.store import GraphStore
    from ragtopics.ops.redis_server import EmbeddedRedis

    out: dict[str, float] = {}
    names, _ = synthetic(max(sizes), seed=3)
    rng = random.Random(9)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis", _free_port()).start()
        try:
            store = GraphStore(redis.Redis.from_url(server.url, socket_timeout=300), "bench-partners")
            stored = 0
            for size in sizes:
                t0 = time.perf_counter()
                for start in range(stored, size, 2_000):
                    part = names[start : min(start + 2_000, size)]
                    store.upsert(
                        f"doc-{start}",
                        f"part-{start}.txt",
                        [(f"c{start}", 0)],
                        [replace(e, chunk_ids=frozenset({f"c{start}"})) for e in entities(part)],
                        [],
                    )
                stored = size
                print(f"stored {size:,} entities in {time.perf_counter() - t0:.1f} s", flush=True)
                partner_ms, all_ms, read, same = [], [], [], True
                for _ in range(UPLOADS):
                    upload = [perturb(n, rng) for n in rng.sample(names[:size], UPLOAD_ENTITIES // 2)]
                    upload += [random_name(rng) for _ in range(UPLOAD_ENTITIES - len(upload))]
                    incoming = [Entity(entity_id_for(n, TYPE), n, TYPE, chunk_ids=frozenset({"new"})) for n in upload]
                    t0 = time.perf_counter()
                    partners = store.dedup_partners(partner_keys(incoming))
                    partner_ms.append((time.perf_counter() - t0) * 1000)
                    t0 = time.perf_counter()
                    everything = list(store.all_entities())
                    all_ms.append((time.perf_counter() - t0) * 1000)
                    read.append(len(partners.entities))
                    a = deduplicate(incoming, partners.entities, common_words=partners.common_words)
                    b = deduplicate(incoming, everything)
                    same &= sorted(map(repr, a.merges)) == sorted(map(repr, b.merges)) and sorted(a.unclear) == sorted(b.unclear)
                p, w = statistics.median(partner_ms), statistics.median(all_ms)
                print(
                    f"upload of {UPLOAD_ENTITIES} names against {size:,} stored: partners by key {p:.1f} ms "
                    f"(median {statistics.median(read):.0f} entities read), every entity {w:.1f} ms ({size:,} read), "
                    f"{w / p:.0f}x; same merges and unclear pairs: {same}",
                    flush=True,
                )
                out[f"partners_{size}_ms"], out[f"all_{size}_ms"] = p, w
        finally:
            server.stop()
    return out


def main(argv: list[str]) -> dict[str, float]:
    """Run the dedup benchmark (``--quick``: the naive loop on a subset, extrapolated).

    Returns:
        ``{"dedup_10k_s", "naive_10k_s", "dedup_100k_s"}``: wall seconds (best of the repeats).
    """
    quick = "--quick" in argv
    print(f"thresholds: fuzzy {FUZZY_THRESHOLD}, grey band from {FUZZY_GREY_MIN}")
    hotpot_check()
    names10, origin10 = synthetic(10_000)
    group10, dedup10 = run_dedup(names10, origin10, "10,000 names", repeats=5)
    if quick:
        _, (subset_s, subset_cpu) = naive_groups(names10[:NAIVE_SUBSET])
        scale = (len(names10) / NAIVE_SUBSET) ** 2
        naive_s, naive_cpu = subset_s * scale, subset_cpu * scale
        print(
            f"naive loop on {NAIVE_SUBSET:,} names: {subset_s:.2f} s wall, {subset_cpu:.2f} s CPU; "
            f"extrapolated quadratically to 10,000: {naive_s:.1f} s wall, {naive_cpu:.1f} s CPU"
        )
        print("  (merges of the naive loop not computed with --quick)")
    else:
        naive_group, (naive_s, naive_cpu) = naive_groups(names10)
        naive_p, naive_r, naive_merged = precision_recall(naive_group, origin10)
        same = partition(naive_group) == partition(group10)
        pairs = len(names10) * (len(names10) - 1) // 2
        print(
            f"naive loop on 10,000 names (all {pairs:,} pairs, measured): {naive_s:.1f} s wall, "
            f"{naive_cpu:.1f} s CPU, merged pairs {naive_merged}, precision {naive_p:.4f}, recall {naive_r:.4f}"
        )
        print(f"  same groups as dedup: {same}")
        if not same:
            only_naive = partition(naive_group) - partition(group10)
            only_dedup = partition(group10) - partition(naive_group)
            print(f"  groups only naive: {[sorted(names10[i] for i in g) for g in list(only_naive)[:5]]}")
            print(f"  groups only dedup: {[sorted(names10[i] for i in g) for g in list(only_dedup)[:5]]}")
    print(f"speed ratio naive / dedup on 10,000: {naive_s / dedup10[0]:.0f}x wall, {naive_cpu / dedup10[1]:.0f}x CPU")
    names100, origin100 = synthetic(100_000)
    _, dedup100 = run_dedup(names100, origin100, "100,000 names", repeats=1)
    print(
        f"peak Python memory of dedup (tracemalloc): 10,000 names {peak_memory(names10) / 2**20:.1f} MiB, "
        f"100,000 names {peak_memory(names100) / 2**20:.1f} MiB"
    )
    print(f"peak resident size of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    partners = bench_stored_partners()
    return {"dedup_10k_s": dedup10[0], "naive_10k_s": naive_s, "dedup_100k_s": dedup100[0], **partners}


if __name__ == "__main__":
    main(sys.argv[1:])
