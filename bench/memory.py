"""Peak resident memory of the worker and of the console, each measured in a process of its own.

* **worker**: uploads are queued (``upload_file``: the real upload path and queue), then the
  product's worker (:func:`ragtopics.worker.main.run_worker`, burst mode: it stops when the queue
  is empty) indexes them in a child process; its peak resident size (``VmHWM``) is the figure.
* **worker, one large GraphRAG upload**: one file of :data:`GRAPH_UPLOAD_CHUNKS` short paragraphs (one
  chunk each) uploaded into a GraphRAG Topic with NLP extraction (the defaults otherwise), indexed by a
  burst worker as above: the ingest job, its extraction jobs and the job that finishes it, all in one
  process, whose peak is the figure (``python -m bench.memory`` runs this one alone).
* **console**: a child process builds and launches the Gradio console
  (:func:`ragtopics.ui.app.launch_console`), loads what its first chat turn loads (the embedding model
  and the router's exemplars), and reports its peak resident size (``VmHWM``).

Both children get the benchmark's Redis and data folder through the environment, as
``ragtopics up`` hands them to its worker.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import create_topic

_CHILD = r"""
import json, socket, sys
mode = sys.argv[1]
if mode == "worker":
    from ragtopics.worker.main import run_worker
    run_worker(burst=True)
else:
    from ragtopics.answer.routing import warm_router
    from ragtopics.runtime import get_runtime
    from ragtopics.ui.app import launch_console
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    rt = get_runtime()
    app, url, _ = launch_console(rt, host="127.0.0.1", port=port, mcp=True)
    warm_router(rt.gateway)
    app.close()
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's peak.
hwm_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print("PEAK_RSS_MB", json.dumps(hwm_kb / 1024))
"""


def _child_peak_mb(rt: Runtime, mode: str, timeout_s: float = 900) -> float:
    """Run the child in ``mode`` with the runtime's Redis and data folder (at most ``timeout_s`` seconds); its peak
    RSS in MB."""
    env = {
        **os.environ,
        "REDIS_URL": rt.settings.redis_url,
        "RAGTOPICS_DATA_DIR": str(rt.settings.data_dir),
        "RQ_QUEUE": rt.settings.queue_name,
        "LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=Path(__file__).resolve().parents[1],
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("PEAK_RSS_MB")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"the {mode} process failed ({done.returncode}): {done.stderr[-2000:]}")
    return float(json.loads(line.split(" ", 1)[1]))


def bench_memory(rt: Runtime, corpus: dict[str, list[str]], figure, section, files: int = 200) -> dict[str, float]:
    """Queue ``files`` passages as uploads, index them with a burst worker; launch the console; print both peaks.

    Returns:
        ``{"worker_peak_mb", "console_peak_mb"}``.
    """
    section(f"11. peak memory ({files} queued uploads through the worker; the console launched)")
    topic = create_topic(rt, "bench-memory")
    for title, sentences in list(corpus.items())[:files]:
        upload_file(rt, topic, f"{title}.txt", "".join(sentences).encode())
    worker = _child_peak_mb(rt, "worker")
    figure("worker peak RSS (VmHWM)", worker, "MB")
    figure("chunks indexed by the worker", rt.chunk_index(topic.id).count())
    console = _child_peak_mb(rt, "console")
    figure("console peak RSS (VmHWM)", console, "MB")
    figure("this benchmark process peak RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "MB")
    return {"worker_peak_mb": worker, "console_peak_mb": console}


#: Chunks of the one GraphRAG upload whose worker peak is measured.
GRAPH_UPLOAD_CHUNKS = 5000
#: The longest the worker may take over it, in seconds (a busy 2-core host needs most of it).
GRAPH_UPLOAD_TIMEOUT_S = 3600
_STATIONS = ["Aberdeen", "Bergen", "Cork", "Dundee", "Esbjerg", "Flotta", "Galway", "Hull", "Inverness", "Kiel"]
_CREWS = ["Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf"]


def graph_upload_text(chunks: int = GRAPH_UPLOAD_CHUNKS) -> bytes:
    """A file of ``chunks`` short paragraphs, each naming a pump, a station and a crew (about 80 characters)."""
    return "\n\n".join(
        f"Pump P-{n} at {_STATIONS[n % len(_STATIONS)]} Station is serviced by {_CREWS[n % len(_CREWS)]} Crew."
        for n in range(chunks)
    ).encode()


def bench_graph_upload_memory(rt: Runtime, figure, chunks: int = GRAPH_UPLOAD_CHUNKS) -> float:
    """Upload one file of ``chunks`` short paragraphs into a GraphRAG Topic (NLP extraction), index it with a burst
    worker in a child process, and print the worker's peak RSS, the chunks indexed and how long it took.

    Returns:
        The worker's peak RSS in MB.
    """
    import time

    topic = create_topic(
        rt,
        "bench-graph-memory",
        kind="graphrag",
        settings={"graph_extraction_method": "NLP", "chunk_size": 100, "chunk_overlap": 0},
    )
    doc = upload_file(rt, topic, "pumps.txt", graph_upload_text(chunks))
    t0 = time.perf_counter()
    peak = _child_peak_mb(rt, "worker", timeout_s=GRAPH_UPLOAD_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    row = get_document(rt, doc.id)
    figure(f"worker peak RSS (VmHWM), one {chunks:,}-chunk GraphRAG upload (NLP)", peak, "MB")
    figure("  chunks indexed / status", f"{row.chunk_count:,} / {row.status}" + (f" ({row.error})" if row.error else ""))
    figure(
        "  its graph: entities, relationships",
        f"{row.indexed_with.get('graph', {}).get('entities', 0):,}, "
        f"{row.indexed_with.get('graph', {}).get('relationships', 0):,}",
    )
    figure("  worker run (reading to graph stored)", seconds, "s")
    return peak


def main(argv: list[str]) -> float:
    """Run the one-GraphRAG-upload figure alone on an embedded Redis of its own (``argv``: optional chunk count)."""
    import tempfile

    from bench.report import figure, section
    from bench.run import build_runtime, free_port
    from ragtopics.ops.redis_server import EmbeddedRedis
    from ragtopics.runtime import set_runtime

    chunks = int(argv[0]) if argv else GRAPH_UPLOAD_CHUNKS
    section(f"11. peak memory of the worker through one {chunks:,}-chunk GraphRAG upload (bench.memory)")
    with tempfile.TemporaryDirectory(prefix="ragtopics-bench-memory-") as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis", free_port()).start()
        try:
            return bench_graph_upload_memory(build_runtime(Path(tmp), server), figure, chunks)
        finally:
            set_runtime(None)
            server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
