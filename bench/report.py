"""How the benchmark prints and keeps its figures: one line per figure, and ``bench/results.json``.

Every figure printed with :func:`figure` is also kept under its section's title; every
figure that has a reference measured in the same run is printed with :func:`versus`, which
keeps it in the ``ratios`` list with the reference and the ratio. :func:`write` saves both
with the machine's description.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

#: Where ``make bench`` writes its figures.
RESULTS_PATH = Path(__file__).resolve().parent / "results.json"

_results: dict = {"sections": {}, "ratios": []}
_current = ["header"]


def section(title: str) -> None:
    """Print a section heading; the figures after it are kept under ``title``."""
    _current[0] = title
    _results["sections"].setdefault(title, {})
    print(f"\n== {title}", flush=True)


def _text(value: object) -> str:
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)


def figure(label: str, value: object, unit: str = "") -> None:
    """Print one figure on its own line (``label .......... value unit``) and keep it."""
    print(f"  {label:<38} {_text(value)}{(' ' + unit) if unit else ''}", flush=True)
    keep(label, value, unit)


def keep(label: str, value: object, unit: str = "") -> None:
    """Keep a figure for ``bench/results.json`` without printing it (it is shown in a table).

    A label kept twice in one section (the same measurement on other data) is kept as
    ``label (2)``, ``label (3)``, ... in the order printed, so no figure overwrites another.
    """
    kept = round(value, 4) if isinstance(value, float) else value if isinstance(value, int) else str(value)
    figures = _results["sections"].setdefault(_current[0], {})
    key, n = label.strip(), 1
    while key in figures:
        n += 1
        key = f"{label.strip()} ({n})"
    figures[key] = {"value": kept, "unit": unit}


def versus(
    label: str,
    value: float,
    unit: str,
    reference: str,
    reference_value: float,
    *,
    higher_is_better: bool,
    goal: float | None = None,
) -> float:
    """Print a figure next to its reference and keep both with their ratio.

    Args:
        label: what was measured.
        value / reference_value: the figure and its reference, in ``unit``.
        reference: what the reference is (measured in the same run, on the same data).
        higher_is_better: True for throughputs (ratio = value / reference), False for latencies
            (ratio = reference / value); either way a ratio above 1 means better than the reference.
        goal: the ratio aimed at, if there is one.

    Returns:
        The ratio (0.0 when the denominator is 0).
    """
    num, den = (value, reference_value) if higher_is_better else (reference_value, value)
    ratio = num / den if den else 0.0
    aim = f", goal >= {goal:g}x" if goal is not None else ""
    print(
        f"  {label:<38} {_text(float(value))} {unit}  vs {reference} {_text(float(reference_value))} {unit}: {ratio:,.2f}x{aim}",
        flush=True,
    )
    _results["ratios"].append(
        {
            "section": _current[0],
            "figure": label,
            "value": round(float(value), 4),
            "unit": unit,
            "reference": reference,
            "reference_value": round(float(reference_value), 4),
            "ratio": round(ratio, 3),
            "higher_is_better": higher_is_better,
            "goal": goal,
        }
    )
    return ratio


def machine() -> dict:
    """The machine the figures come from: CPU model, cores, memory, Python and torch threads."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    memory_gb = 0.0
    try:
        kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        memory_gb = round(kb / 2**20, 1)
    except (OSError, StopIteration):
        pass
    try:
        import torch

        threads = torch.get_num_threads()
    except ImportError:  # pragma: no cover - torch ships with the product
        threads = 0
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 0,
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0,
        "memory_gb": memory_gb,
        "python": platform.python_version(),
        "torch_threads": threads,
        "system": f"{platform.system()} {platform.release()}",
    }


def write(path: Path = RESULTS_PATH, **extra) -> Path:
    """Save every figure kept, the ratios and the machine to ``path`` (JSON); returns the path."""
    payload = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(), **extra, **_results}
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return path


def print_ratios() -> None:
    """The ratios table: each figure, its reference and the ratio (above 1: better than the reference)."""
    print(f"\n  {'figure':<44} {'value':>12} {'reference':>36} {'ratio':>8}  goal", flush=True)
    for r in _results["ratios"]:
        value = f"{r['value']:,.2f} {r['unit']}"
        ref = f"{r['reference']} {r['reference_value']:,.2f}"
        goal = f">= {r['goal']:g}x" if r["goal"] is not None else ""
        print(f"  {r['figure'][:44]:<44} {value:>12} {ref[-36:]:>36} {r['ratio']:>7.2f}x  {goal}", flush=True)


def markdown(path: Path = RESULTS_PATH) -> str:
    """The ratios of a saved ``results.json`` as a Markdown table, with the date and the machine (for BENCHMARKS.md)."""
    data = json.loads(path.read_text())
    m = data["machine"]
    lines = [
        (
            f"Measured {data['date']} on {m['cpu']}, {m['cores_usable']} of {m['cores']} cores usable, "
            f"{m['memory_gb']} GB, Python {m['python']}, {m['torch_threads']} torch threads."
        ),
        "",
        "| figure | value | reference (same run) | ratio | goal |",
        "|---|---|---|---|---|",
    ]
    for r in data["ratios"]:
        goal = f"≥ {r['goal']:g}×" if r["goal"] is not None else ""
        lines.append(
            f"| {r['figure']} | {r['value']:,.2f} {r['unit']} | {r['reference']}: {r['reference_value']:,.2f} "
            f"{r['unit']} | {r['ratio']:,.2f}× | {goal} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
