"""The benchmark's figures: ratios oriented so that above 1 is better, saved with the machine, shown as Markdown."""

from __future__ import annotations

import json

import numpy as np

from bench import report
from bench.latency import derive, exact_top_k, recall_at_k


def test_ratios_are_better_than_reference_above_one_and_saved(tmp_path, capsys):
    report.section("test section")
    report.figure("chunks", 12)
    assert report.versus("ingest", 45.0, "chunks/s", "raw embedding", 90.0, higher_is_better=True, goal=0.9) == 0.5
    assert report.versus("KNN p95", 0.5, "ms", "brute force p95", 4.0, higher_is_better=False) == 8.0
    assert "ingest" in capsys.readouterr().out
    saved = json.loads(report.write(tmp_path / "results.json").read_text())
    assert saved["machine"]["cores"] >= 1 and saved["sections"]["test section"]["chunks"] == {"value": 12, "unit": ""}
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
