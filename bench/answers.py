"""Answer quality of the two offline answer modes: extractive quotes against the bundled model's written answers.

For each evaluation set (``shared/eval/hotpotqa``, ``hotpotqa-opaque`` and ``musique-dev``) the
passages are ingested into one RAG Topic (one passage per file, named as the set names them),
then the questions are asked through the product's own chat path
(:func:`~ragtopics.quality.evaluate.evaluate`, the same as ``ragtopics eval``) twice:

* **EXTRACTIVE** (Answer Mode EXTRACTIVE, what a Topic answers by default while the Language
  Model role is the bundled model): quoted sentences ranked by the embedding model;
* **GENERATIVE** (Answer Mode GENERATIVE): the bundled SmolLM2-135M writes the answer on
  llama.cpp's server, with the repetition guard.

Printed per set and mode: **answer containment** (the share of questions whose gold answer, or
one of its ``answer_aliases``, stands in the answer once normalised as in the HotpotQA/SQuAD
evaluation), **token F1**, exact match, how many written answers the guard stopped and how many
the length limit cut, the time per question, and a few real question/answer pairs.

The bundled model writes about one answer per 5-20 s on two cores, so a run asks the first
``--questions`` questions of each set (default 25) in both modes; extractive answers of every
question are printed as well. ``--grid`` measures the bundled model's generation settings
(repeat penalty, temperature) on the HotpotQA questions instead.

``python -m bench.answers [--questions N] [--sets hotpotqa,musique-dev] [--grid]``; ``make bench``
runs it as its last section. It prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from bench.report import figure, section
from ragtopics.answer.repetition import STOPPED_NOTE
from ragtopics.documents.uploads import receive_upload
from ragtopics.ingest.pipeline import ingest_documents
from ragtopics.quality.evaluate import EvalQuestion, QuestionResult, evaluate, with_settings
from ragtopics.runtime import Runtime
from ragtopics.settings.env import Settings
from ragtopics.topics.topics import Topic, create_topic

SETS = ("hotpotqa", "hotpotqa-opaque", "musique-dev")
#: Questions asked in both modes per set (the bundled model's answers take seconds each).
QUESTIONS = 25
#: Files indexed per ingest job (as an upload of many small files is batched).
FILES_PER_JOB = 32
#: Question/answer pairs printed per set and mode.
EXAMPLES = 5
#: The generation settings ``--grid`` compares: (repeat penalty, temperature).
GRID = ((1.0, 0.2), (1.1, 0.2), (1.3, 0.2), (1.1, 0.7))


@dataclass(frozen=True, slots=True)
class AnswerSet:
    """One evaluation set: its passages as ``{file name: text}`` and its questions with answers."""

    name: str
    files: dict[str, str]
    questions: list[EvalQuestion]


def load_set(folder: Path) -> AnswerSet:
    """Read a set's ``corpus.json`` (title → sentences) and ``questions.json`` (HotpotQA or MuSiQue items).

    A passage becomes ``<title>.txt``; a question's gold sources are its supporting facts' titles.
    """
    corpus = json.loads((folder / "corpus.json").read_text())
    items = json.loads((folder / "questions.json").read_text())
    questions = [
        EvalQuestion(
            q["question"],
            q["answer"],
            tuple(dict.fromkeys(f"{t}.txt" for t, _ in q["supporting_facts"])),
            answer_aliases=tuple(q.get("answer_aliases") or ()),
        )
        for q in items
    ]
    return AnswerSet(folder.name, {f"{title}.txt": "".join(sentences) for title, sentences in corpus.items()}, questions)


def ingest_set(rt: Runtime, data: AnswerSet) -> tuple[Topic, float]:
    """A RAG Topic (defaults: HYBRID, Top-K 5) holding every passage; returns it and the indexing seconds."""
    topic = create_topic(rt, f"answers-{data.name}", kind="rag")
    names = list(data.files)
    t0 = time.perf_counter()
    for start in range(0, len(names), FILES_PER_JOB):
        rows = [receive_upload(rt, topic, n, data.files[n].encode()) for n in names[start : start + FILES_PER_JOB]]
        ingest_documents(rt, topic.id, [(r.id, r.job_id, r.pending_blob_path) for r in rows])
    return topic, time.perf_counter() - t0


def guard_counts(results: list[QuestionResult]) -> tuple[int, int]:
    """``(answers the repetition guard stopped, answers cut at the length limit)``."""
    stopped = sum(STOPPED_NOTE in r.answer for r in results)
    cut = sum("answer length limit" in r.answer for r in results)
    return stopped, cut


def report(label: str, summary: dict, results: list[QuestionResult]) -> None:
    """Print one mode's figures and its first :data:`EXAMPLES` question/answer pairs."""
    stopped, cut = guard_counts(results)
    figure(
        f"{label} containment / F1 / exact match",
        f"{summary.get('contains', 0):.3f} / {summary.get('f1', 0):.3f} / {summary.get('exact_match', 0):.3f} (n={summary['n']})",
    )
    figure(f"{label} stopped by the guard / cut at length", f"{stopped} / {cut}")
    figure(f"{label} time per question", summary["ms_per_question"], "ms")
    for r in results[:EXAMPLES]:
        print(
            f"    Q: {r.question}\n    gold: {r.expected_answer}  (contains {r.metrics.get('contains', 0):.0f})\n"
            f"    A: {r.answer.strip()[:600]!r}",
            flush=True,
        )


def ask_all(rt: Runtime, topic: Topic, questions: list[EvalQuestion], mode: str) -> tuple[dict, list[QuestionResult]]:
    """Every question through the chat path with Answer Mode ``mode`` (nothing saved)."""
    return evaluate(rt, with_settings(topic, {"answer_mode": mode}), questions)


def with_bundled_model(rt: Runtime, port: int, **changes) -> None:
    """Point the runtime's Language Model role at the bundled model server on ``port`` (with setting changes)."""
    from ragtopics.llm.gateway import ModelGateway

    values = {
        **rt.settings.model_dump(by_alias=True),
        "LLM_BASE_URL": None,
        "LOCAL_LLM_PORT": port,
        "LOCAL_LLM_CONTEXT_TOKENS": 4096,
        **changes,
    }
    rt.settings = Settings(**values, _env_file=None)
    rt._gateway = ModelGateway(rt.settings, embedder=rt.gateway.embedder)


def bench_answers(rt: Runtime, eval_root: Path, *, sets: tuple[str, ...] = SETS, n_questions: int = QUESTIONS, free_port) -> None:
    """Both answer modes on each set (see the module docstring); the bundled model server runs throughout."""
    from ragtopics.llm.local_server import LocalModelServer

    port = free_port()
    with_bundled_model(rt, port)
    try:
        server = LocalModelServer(rt.settings).start()
    except Exception as exc:
        figure("skipped", f"the bundled model server did not start: {exc}")
        return
    try:
        for name in sets:
            data = load_set(eval_root / name)
            section(f"answers: {name} ({len(data.files)} passages, RAG HYBRID, Top-K 5)")
            topic, seconds = ingest_set(rt, data)
            figure("ingest", seconds, "s")
            summary, results = ask_all(rt, topic, data.questions, "EXTRACTIVE")
            figure(
                f"EXTRACTIVE, all {len(results)} questions: containment / F1",
                f"{summary.get('contains', 0):.3f} / {summary.get('f1', 0):.3f}",
            )
            subset = data.questions[:n_questions]
            for mode in ("EXTRACTIVE", "GENERATIVE"):
                summary, results = ask_all(rt, topic, subset, mode)
                report(f"{mode}, first {len(subset)}", summary, results)
    finally:
        server.stop()


def bench_generation_grid(rt: Runtime, eval_root: Path, *, n_questions: int, free_port) -> None:
    """The bundled model's written answers on HotpotQA under each (repeat penalty, temperature) of :data:`GRID`."""
    from ragtopics.llm.local_server import LocalModelServer

    data = load_set(eval_root / "hotpotqa")
    section(f"bundled model generation settings (HotpotQA, first {n_questions} questions)")
    port = free_port()
    with_bundled_model(rt, port)
    server = LocalModelServer(rt.settings).start()
    try:
        topic, _ = ingest_set(rt, data)
        for penalty, temperature in GRID:
            with_bundled_model(rt, port, LOCAL_LLM_REPEAT_PENALTY=penalty, LOCAL_LLM_TEMPERATURE=temperature)
            summary, results = ask_all(rt, topic, data.questions[:n_questions], "GENERATIVE")
            stopped, cut = guard_counts(results)
            words = sum(len(r.answer.split()) for r in results) / max(len(results), 1)
            figure(
                f"repeat penalty {penalty}, temperature {temperature}",
                f"containment {summary.get('contains', 0):.3f}, F1 {summary.get('f1', 0):.3f}, stopped {stopped}, "
                f"cut {cut}, {words:.0f} words, {summary['ms_per_question']:.0f} ms/question",
            )
    finally:
        server.stop()


def main() -> int:
    from bench.run import eval_dir, free_port, throwaway_runtime

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=QUESTIONS, help="questions asked in both modes per set")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated set names under the eval folder")
    parser.add_argument("--grid", action="store_true", help="measure the bundled model's generation settings instead")
    args = parser.parse_args()
    root = eval_dir().parent
    with throwaway_runtime(prefix="ragtopics-answers-") as rt:
        if args.grid:
            bench_generation_grid(rt, root, n_questions=args.questions, free_port=free_port)
        else:
            bench_answers(
                rt, root, sets=tuple(s for s in args.sets.split(",") if s), n_questions=args.questions, free_port=free_port
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
