"""Evaluation runs started from the console: queued, run by the worker, saved, listed and reopened.

A run lives in the file store (``FILE_STORE``: the data dir's ``files/`` folder or the object store,
so that a worker on another machine reads what the console saved) under ``evals/<run id>/``:
``request.json`` (what was asked: Topic, questions, settings changed for the run, forced way,
retrieval only), then the files of :func:`~ragtopics.quality.evaluate.write_results`
(``summary.json``, ``questions.json``, ``questions.csv``) once the worker has finished it. The
job's progress (questions done) is in its ``job.meta``, as an upload's is. Runs saved by an
earlier version in ``<data dir>/evals/`` are moved into the file store when runs are next listed.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ragtopics.answer.routing import routes_for
from ragtopics.errors import NotFoundError, RagTopicsError
from ragtopics.jobs.queue import queue_for
from ragtopics.quality import evaluate as ev
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import parse_assignments
from ragtopics.topics.topics import get_topic

log = logging.getLogger(__name__)

#: Most questions one console run takes (a bigger file belongs to ``ragtopics eval``).
MAX_QUESTIONS = 2000
#: The file a failed run leaves in its folder: ``{"error": message}``.
ERROR_FILE = "error.json"
#: The folder of the file store that holds every run.
RUNS = "evals"
_RUN_ID = re.compile(r"^eval-\d{8}-\d{6}-[0-9a-f]{6}$")


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One saved run, as the run list shows it.

    Attributes:
        run_id: ``eval-YYYYMMDD-HHMMSS-xxxxxx`` (also the RQ job id).
        topic: the Topic's name.
        created: when it was queued, ``YYYY-MM-DD HH:MM:SS`` UTC.
        questions: how many questions.
        route: the forced way, or ``routed``.
        retrieval_only: whether answers were skipped.
        settings_changed: ``{key: value}`` changed for this run only.
        summary: the summary once finished, else None.
        error: why the run failed ("" unless it did).
    """

    run_id: str
    topic: str
    created: str
    questions: int
    route: str
    retrieval_only: bool
    settings_changed: dict[str, str]
    summary: dict[str, Any] | None
    error: str = ""

    @property
    def label(self) -> str:
        """One line naming the run in a dropdown."""
        changed = ", ".join(f"{k}={v}" for k, v in self.settings_changed.items())
        mode = "retrieval only" if self.retrieval_only else "answers"
        failed = " · failed" if self.error else ""
        return (
            f"{self.created} · {self.topic} · {self.route} · {mode}{' · ' + changed if changed else ''}{failed} · {self.run_id}"
        )


def run_path(run_id: str, name: str) -> str:
    """Where a run's file ``name`` is kept in the file store: ``evals/<run id>/<name>``.

    Raises:
        NotFoundError: for an id that is not a run id (nothing outside the run's folder is reachable).
    """
    if not _RUN_ID.match(run_id or ""):
        raise NotFoundError(f"no evaluation run {run_id!r}")
    return f"{RUNS}/{run_id}/{name}"


def _read(rt: Runtime, run_id: str, name: str) -> bytes | None:
    """A run's file, or None when it is not stored."""
    try:
        return rt.blobs.read(run_path(run_id, name))
    except FileNotFoundError:
        return None


def _write_json(rt: Runtime, run_id: str, name: str, value: Any) -> None:
    rt.blobs.write(run_path(run_id, name), json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8"))


def start_run(
    rt: Runtime,
    topic_name: str,
    questions_text: str,
    *,
    assignments: Sequence[str] = (),
    route: str | None = None,
    retrieval_only: bool = True,
) -> str:
    """Check a run's inputs, save its request and queue it; returns the run id.

    Args:
        topic_name: the Topic evaluated.
        questions_text: the questions as JSON (:func:`~ragtopics.quality.evaluate.parse_questions`).
        assignments: ``key=value`` settings changed for this run only.
        route: force this way for every question (None: routed as in a chat).
        retrieval_only: skip writing answers.

    Raises:
        RagTopicsError: unknown Topic, unreadable questions, more than :data:`MAX_QUESTIONS`, an unknown
            setting or a bad value (naming the key), a way the Topic does not have.
        StoreUnavailableError: when the job cannot be queued.
    """
    topic = get_topic(rt, topic_name)
    questions = ev.parse_questions(questions_text, "the questions")
    if len(questions) > MAX_QUESTIONS:
        raise RagTopicsError(
            f"{len(questions):,} questions: a console run takes at most {MAX_QUESTIONS:,}; use `ragtopics eval` for more"
        )
    changes = parse_assignments(list(assignments))
    ev.with_settings(topic, changes)  # validates every key and value now, not in the worker
    if route:
        ways = [r.value for r in routes_for(topic.kind)]
        if route.upper() not in ways:
            raise RagTopicsError(f"way {route!r}: a {topic.kind} Topic has {', '.join(ways)}")
        route = route.upper()
    run_id = f"eval-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    request = {
        "run_id": run_id,
        "topic": topic.name,
        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "questions": [asdict(q) for q in questions],
        "settings_changed": changes,
        "route": route,
        "retrieval_only": retrieval_only,
    }
    _write_json(rt, run_id, "request.json", request)

    queue_for(rt).enqueue_call(
        "ragtopics.worker.jobs.evaluate_run",
        args=(run_id,),
        job_id=run_id,
        description=f"evaluate {topic.name}",
        result_ttl=24 * 3600,
        failure_ttl=7 * 24 * 3600,
        meta={"phase": "queued", "done": 0, "total": len(questions)},
    )
    return run_id


def execute_run(rt: Runtime, run_id: str, progress=None) -> dict[str, Any]:
    """Run a saved request (the worker's job) and write its results into the run's folder; returns the summary.

    A run that fails keeps its error in the folder (``error.json``), so the QA page shows why
    also after the job's record has expired; a retried run starts without it.

    Raises:
        NotFoundError: when the run or its Topic is gone.
        Whatever stopped the evaluation (every question failing, say; see :func:`~ragtopics.quality.evaluate.evaluate`).
    """
    data = _read(rt, run_id, "request.json")
    if data is None:
        raise NotFoundError(f"no evaluation run {run_id!r}")
    request = json.loads(data)
    rt.blobs.remove(run_path(run_id, ERROR_FILE))
    try:
        return _execute(rt, run_id, request, progress)
    except Exception as exc:
        _write_json(rt, run_id, ERROR_FILE, {"error": str(exc)})
        raise


def _execute(rt: Runtime, run_id: str, request: dict[str, Any], progress) -> dict[str, Any]:
    """:func:`execute_run` once its request is read."""
    topic = ev.with_settings(get_topic(rt, request["topic"]), request["settings_changed"])
    questions = [
        ev.EvalQuestion(
            q["question"],
            q["answer"],
            tuple(q["gold_sources"]),
            q["expected_way"],
            q["type"],
            tuple(q.get("answer_aliases") or ()),
        )  # runs saved before aliases have none
        for q in request["questions"]
    ]
    summary, results = ev.evaluate(
        rt, topic, questions, route=request["route"], retrieval_only=request["retrieval_only"], progress=progress
    )
    summary = ev.run_summary(
        summary,
        topic=topic.name,
        route=request["route"],
        retrieval_only=request["retrieval_only"],
        settings_changed=request["settings_changed"],
        run_id=run_id,
    )
    with tempfile.TemporaryDirectory(prefix="ragtopics-eval-") as tmp:
        paths = ev.write_results(Path(tmp), summary, results)
        for path in paths[1:] + paths[:1]:  # the summary last: a run with a summary has all its files
            rt.blobs.write(run_path(run_id, path.name), path.read_bytes())
    return summary


def result_files(rt: Runtime, run_id: str) -> list[Path]:
    """The files a finished run wrote (``summary.json``, ``questions.json``, ``questions.csv``), for download: copies
    on this machine, under ``<data dir>/cache/evals/<run id>/`` (fetched from the file store each time)."""
    run_path(run_id, "summary.json")  # an id that is no run id names no folder
    folder = Path(rt.settings.data_dir) / "cache" / RUNS / run_id
    out = []
    for name in ev.RESULT_FILES:
        data = _read(rt, run_id, name)
        if data is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
            out.append(folder / name)
    return out


def list_runs(rt: Runtime, limit: int = 200) -> list[RunInfo]:
    """Saved runs, newest first."""
    _adopt_local_runs(rt)
    run_ids = sorted({path.split("/")[1] for path in rt.blobs.list(RUNS) if path.count("/") == 2}, reverse=True)
    out = []
    for run_id in run_ids[:limit]:
        try:
            out.append(_info(rt, run_id))
        except (OSError, ValueError, KeyError, RagTopicsError):
            continue  # a run being written, or damaged: left out of the list
    return out


def load_run(rt: Runtime, run_id: str) -> tuple[RunInfo, list[dict[str, Any]]]:
    """A run's description and its per-question results (empty until it has finished).

    Raises:
        NotFoundError: for an unknown run.
    """
    run_path(run_id, "request.json")  # an id that is no run id is refused before the store is asked
    _adopt_local_runs(rt)
    try:
        info = _info(rt, run_id)
    except (OSError, ValueError, KeyError) as exc:
        raise NotFoundError(f"no evaluation run {run_id!r}") from exc
    questions = _read(rt, run_id, "questions.json")
    return info, json.loads(questions) if questions is not None else []


def _info(rt: Runtime, run_id: str) -> RunInfo:
    data = _read(rt, run_id, "request.json")
    if data is None:
        raise NotFoundError(f"no evaluation run {run_id!r}")
    request = json.loads(data)
    summary_data = _read(rt, run_id, "summary.json")
    summary = json.loads(summary_data) if summary_data is not None else None
    error_data = _read(rt, run_id, ERROR_FILE) if summary is None else None
    error = json.loads(error_data).get("error", "failed") if error_data is not None else ""
    return RunInfo(
        request["run_id"],
        request["topic"],
        request["created"],
        len(request["questions"]),
        request["route"] or "routed",
        bool(request["retrieval_only"]),
        request["settings_changed"],
        summary,
        error,
    )


def _adopt_local_runs(rt: Runtime) -> int:
    """Move the runs an earlier version kept in ``<data dir>/evals/`` into the file store; returns how many moved."""
    legacy = Path(rt.settings.data_dir) / RUNS
    if not legacy.is_dir():
        return 0
    moved = 0
    for folder in sorted(legacy.iterdir()):
        if not (folder.is_dir() and _RUN_ID.match(folder.name)):
            continue
        for path in sorted(folder.iterdir()):
            if path.is_file():
                rt.blobs.write(run_path(folder.name, path.name), path.read_bytes())
        shutil.rmtree(folder, ignore_errors=True)
        moved += 1
    try:
        legacy.rmdir()
    except OSError:
        pass  # something else is in it: left where it is
    if moved:
        log.info("moved %d evaluation run(s) from %s into the file store", moved, legacy)
    return moved
