"""The benchmark's figures: ratios oriented so that above 1 is better, saved with the machine, shown as Markdown."""

from __future__ import annotations

import json
import time

import numpy as np

from bench import report
from bench.latency import derive, exact_top_k, keep_embeddings, kept_embeddings, recall_at_k, timed_rounds


def test_ratios_are_better_than_reference_above_one_and_saved(tmp_path, capsys):
    report.section("test section")
    report.figure("chunks", 12)
    report.figure("share of the time in embedding", 0.93)
    report.figure("share of the time in embedding", 0.97)  # the same figure of a second run: kept beside the first
    assert report.versus("ingest", 45.0, "chunks/s", "raw embedding", 90.0, higher_is_better=True, goal=0.9) == 0.5
    assert report.versus("KNN p95", 0.5, "ms", "brute force p95", 4.0, higher_is_better=False) == 8.0
    assert "ingest" in capsys.readouterr().out
    saved = json.loads(report.write(tmp_path / "results.json").read_text())
    assert saved["machine"]["cores"] >= 1 and saved["sections"]["test section"]["chunks"] == {"value": 12, "unit": ""}
    shares = {k: v["value"] for k, v in saved["sections"]["test section"].items() if k.startswith("share")}
    assert shares == {"share of the time in embedding": 0.93, "share of the time in embedding (2)": 0.97}
    knn = next(r for r in saved["ratios"] if r["figure"] == "KNN p95")
    assert (knn["ratio"], knn["higher_is_better"], knn["reference_value"]) == (8.0, False, 4.0)
    table = report.markdown(tmp_path / "results.json")
    assert "| ingest | 45.00 chunks/s | raw embedding: 90.00 chunks/s | 0.50× | ≥ 0.9× |" in table


def test_derived_vectors_are_unit_mixes_of_real_ones_and_exact_top_k_is_exact():
    rng = np.random.default_rng(3)
    real = rng.standard_normal((50, 8)).astype(np.float32)
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    vectors, texts = derive(real, [f"t{i}" for i in range(50)], 200)
    assert vectors.shape == (200, 8) and len(texts) == 200 and np.allclose(vectors[:50], real)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5) and texts[120].count(" ") == 1
    query = vectors[7]
    top = exact_top_k(vectors, query, 5)
    assert top[0] == 7 and list(top) == list(np.argsort(-(vectors @ query))[:5])
    assert recall_at_k([["a", "b"], ["c", "x"]], [["a", "b"], ["c", "d"]]) == 0.75


def test_searches_are_timed_round_by_round_and_keep_the_first_rounds_results():
    calls = []

    def search(name):
        def run(i):
            calls.append((name, i))
            if name == "slow":
                time.sleep(0.002)
            return f"{name}-{i}-{len(calls) - 1}"

        return run

    timings = timed_rounds({"fast": search("fast"), "slow": search("slow")}, count=4, rounds=3, warm_up=range(4, 6))
    # per round: "fast" warmed up on other queries (4, 5), then timed on 0..3; then "slow" the same way
    block = lambda name: [(name, 4), (name, 5)] + [(name, i) for i in range(4)]  # noqa: E731
    assert calls == (block("fast") + block("slow")) * 3
    fast, slow = timings["fast"], timings["slow"]
    assert fast[0] == ["fast-0-2", "fast-1-3", "fast-2-4", "fast-3-5"] and len(slow[0]) == 4  # the first round's timed answers
    assert 0 < fast[1].p50_ms <= fast[1].p95_ms and fast[1].p50_ms < slow[1].p50_ms and slow[1].p50_ms >= 2.0


def test_kept_embeddings_are_read_back_for_the_same_model_and_texts_only(tmp_path):
    texts = ["a pump", "a valve", "Leland"]
    vectors = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    path = tmp_path / "latency.npz"
    assert kept_embeddings(path, "m", texts) is None  # nothing kept yet
    keep_embeddings(path, "m", texts, vectors)
    assert np.array_equal(kept_embeddings(path, "m", texts), vectors)
    assert kept_embeddings(path, "other-model", texts) is None
    assert kept_embeddings(path, "m", [*texts[:2], "Leland, NC"]) is None
