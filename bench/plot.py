"""The plot of ``BENCHMARKS.md``: search latency against index size, from the latency section of ``make bench``."""

from __future__ import annotations

from pathlib import Path

#: Where the plot is written (shown in ``BENCHMARKS.md``).
PLOT_PATH = Path(__file__).resolve().parents[1] / "docs" / "bench-latency.svg"

#: The searches drawn, with their line style.
_SERIES = {
    "brute force (numpy, exact)": "k--",
    "KNN FLAT (RediSearch, exact)": "C3:",
    "product search_vector": "C0-",
    "product HYBRID (KNN + BM25 + RRF)": "C2-",
}


def plot_latency(rows: dict, path: Path = PLOT_PATH) -> Path:
    """Draw p50 (thin) and p95 (thick) latency in ms against chunks in the index (log-log); returns the path.

    Args:
        rows: ``{size: {search name: Timing}}`` as :func:`bench.latency.bench_latency` returns it.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    sizes = sorted(rows)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, style in _SERIES.items():
        if not all(name in rows[s] for s in sizes):
            continue
        ax.plot(sizes, [rows[s][name].p95_ms for s in sizes], style, linewidth=2.2, marker="o", label=f"{name} p95")
        ax.plot(sizes, [rows[s][name].p50_ms for s in sizes], style, linewidth=0.8, alpha=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
    ax.set_xlabel("chunks in the index")
    ax.set_ylabel("latency per query, ms (thick p95, thin p50)")
    ax.set_title("Search latency against index size (top 10)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg")
    plt.close(fig)
    return path
