"""Evaluate a Topic on a question file: retrieval recall, ranking, answers and routing.

A question file is a JSON list of items::

    {"question": "...", "answer": "...", "answer_aliases": ["..."], "gold_sources": ["a.txt", "b.pdf"],
     "expected_way": "LOCAL", "type": "bridge"}

where only ``question`` is required. Each question goes through the product's own path:
:func:`~ragtopics.answer.turn.search_only` with ``retrieval_only`` (routing and search, no
model answer), else :func:`~ragtopics.answer.turn.ask` without saving. The files the way's
search returned, in rank order, are compared with the gold sources (with an answer, the files
it cited are kept apart, as ``cited``). A question that fails (an unreachable model, say) is
recorded with its error and scores as finding nothing; the run goes on.

Gold names that match no file of the Topic are listed in the summary (``missing_gold_files``): a
typo there would otherwise look like a retrieval failure.

Metrics (means over the questions that have gold sources, or answers, or ways):

* **recall@k** (k = 1, 5, 10): the share of a question's gold sources among its first k
  distinct files, as in HippoRAG's tables (Gutiérrez et al., 2024);
* **any_gold@k**: 1 when at least one gold source is among the first k files;
* **MRR**: 1 / the rank of the first gold file (0 when none is returned);
* **exact match** and **token F1** of the answer against ``answer``, normalised as in the
  SQuAD evaluation script (citations, punctuation and articles removed, lower case), the best
  over ``answer`` and its ``answer_aliases`` (as MuSiQue's evaluation does);
* **answer containment** (``contains``): 1 when the normalised ``answer`` (or an alias) stands in
  the normalised answer as whole words, the measure of HotpotQA-style evaluations of long answers
  (e.g. Trivedi et al., 2023, "Interleaving Retrieval with Chain-of-Thought Reasoning"). The
  product's own notes under an answer (cut off, stopped, quoted from the sources) are not scored;
* **way accuracy**: the share of questions whose way equals ``expected_way``;
* **judged correctness** (``--judge``): the share of answers a judge model (role ``judge``,
  ``JUDGE_BASE_URL`` / ``JUDGE_MODEL``, else the Language Model's endpoint; never the bundled
  model) grades correct against ``answer``.

A file counts as a gold source when its name matches, ignoring case, accents, a file-type
ending the product reads (``.txt``, ``.pdf``, ...) and everything but letters and digits of any
script (so ``Lilu (mythology)`` matches ``Lilu_mythology.md`` and ``Zurich`` matches ``Zürich.txt``).
"""

from __future__ import annotations

import csv
import json
import logging
import re
import string
import time
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ragtopics.answer.routing import Route
from ragtopics.answer.turn import MAX_QUESTION_CHARS, ask, ranked_files, search_only
from ragtopics.errors import ConfigurationError, ModelUnavailableError, RagTopicsError
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import validate_settings
from ragtopics.text.file_types import SUPPORTED_EXTENSIONS
from ragtopics.topics.topics import Topic

log = logging.getLogger(__name__)

#: What :func:`write_results` writes into a run's folder, in this order.
RESULT_FILES = ("summary.json", "questions.json", "questions.csv")
#: The cut-offs of recall@k.
KS = (1, 5, 10)
#: What a CSV cell may not start with, lest a spreadsheet run it as a formula (OWASP "CSV injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True, slots=True)
class EvalQuestion:
    """One item of a question file (see the module docstring)."""

    question: str
    answer: str = ""
    gold_sources: tuple[str, ...] = ()
    expected_way: str = ""
    type: str = ""
    answer_aliases: tuple[str, ...] = ()


@dataclass(slots=True)
class QuestionResult:
    """What one question got: the way, the files in rank order, the answer, the metrics and the timings (ms).

    ``files`` are the search's files in rank order (what the retrieval metrics score), ``cited`` the
    files the answer used; ``error`` says why the question failed ("" when it did not).
    """

    question: str
    way: str
    confidence: float | None
    files: list[str]
    gold_sources: list[str]
    answer: str = ""
    expected_answer: str = ""
    expected_way: str = ""
    judge_reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    cited: list[str] = field(default_factory=list)
    error: str = ""


def load_questions(path: Path) -> list[EvalQuestion]:
    """Read a question file (see :func:`parse_questions`).

    Raises:
        RagTopicsError: when the file cannot be read, is not a JSON list, or an item lacks a question;
            the message names the item.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as Windows Notepad writes, is fine
    except (OSError, UnicodeDecodeError) as exc:
        raise RagTopicsError(f"cannot read the question file {path}: {exc}") from exc
    return parse_questions(text, f"the question file {path}")


def parse_questions(text: str, source: str = "the questions") -> list[EvalQuestion]:
    """Parse questions given as JSON: a list of items (module docstring), or ``{"questions": [...]}``.

    Args:
        text: the JSON text (a leading byte-order mark is ignored).
        source: how error messages name it ("the question file q.json", "the questions").

    Raises:
        RagTopicsError: when it is not JSON, not a list, or an item lacks a question, has one longer
            than a chat accepts, bad ``gold_sources`` or an ``expected_way`` that is no way; the message
            names the item.
    """
    try:
        items = json.loads(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        raise RagTopicsError(f"cannot read {source} as JSON: {exc}") from exc
    if isinstance(items, dict) and isinstance(items.get("questions"), list):
        items = items["questions"]
    if not isinstance(items, list):
        raise RagTopicsError(f"{source}: expected a JSON list of questions, found {type(items).__name__}")
    out = []
    for n, item in enumerate(items, start=1):
        if not isinstance(item, dict) or not str(item.get("question") or "").strip():
            raise RagTopicsError(f"{source}: item {n} has no question")
        if len(str(item["question"]).strip()) > MAX_QUESTION_CHARS:
            raise RagTopicsError(
                f"{source}: item {n}: the question is {len(str(item['question']).strip())} characters "
                f"long; the limit is {MAX_QUESTION_CHARS}"
            )
        gold = item.get("gold_sources") or []
        if not isinstance(gold, list) or not all(isinstance(g, str) and g.strip() for g in gold):
            raise RagTopicsError(f"{source}: item {n}: gold_sources must be a list of file names (none empty)")
        way = str(item.get("expected_way") or "").strip().upper()
        if way and way not in {r.value for r in Route}:
            raise RagTopicsError(
                f"{source}: item {n}: expected_way {item['expected_way']!r} is not a way; the ways are "
                f"{', '.join(r.value for r in Route)}"
            )
        aliases = item.get("answer_aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise RagTopicsError(f"{source}: item {n}: answer_aliases must be a list of answers")
        out.append(
            EvalQuestion(
                str(item["question"]),
                str(item.get("answer") or ""),
                tuple(gold),
                way,
                str(item.get("type") or ""),
                tuple(a for a in aliases if a.strip()),
            )
        )
    if not out:
        raise RagTopicsError(f"{source}: the question file holds no questions")
    return out


def with_settings(topic: Topic, changes: dict[str, Any]) -> Topic:
    """The Topic with some settings changed for this evaluation only (nothing is stored).

    Raises:
        InvalidSettingError: for an unknown key or a bad value, naming the key.
    """
    if not changes:
        return topic
    settings = validate_settings(topic.kind, {**topic.settings.model_dump(mode="json"), **changes})
    return replace(topic, settings=settings)


def name_keys(name: str) -> tuple[str, str]:
    """A file or source name reduced for matching (see the module docstring): ``(whole, stem)``.

    ``whole`` is the name's key; ``stem`` the key without a file-type ending the product reads
    (``whole`` again when there is none). A key is what is left after removing accents (Unicode
    NFKD) and everything but letters and digits of any script, case-folded; a name with no letter
    or digit (``"--"``) keeps its case-folded text, so two such names never both become ``""``.
    """

    def key(text: str) -> str:
        folded = unicodedata.normalize("NFKD", text.strip()).casefold()
        return "".join(ch for ch in folded if ch.isalnum()) or folded

    stem, dot, ending = name.strip().rpartition(".")
    whole = key(name)
    if dot and any(ch.isalnum() for ch in stem) and ending.lower() in SUPPORTED_EXTENSIONS:
        return whole, key(stem)
    if dot and stem.strip() and ending.lower() in SUPPORTED_EXTENSIONS:  # "--.txt": the ending alone is no name
        return key(stem), key(stem)
    return whole, whole


def same_file(gold: tuple[str, str], file: tuple[str, str]) -> bool:
    """Whether a gold name and a file name (both :func:`name_keys`) name the same file.

    The whole names match, or one side names the other without its ending: gold ``Report`` is
    ``Report.pdf``, gold ``Node.js`` is ``Node.js.txt``. Two names that differ in their endings do
    not (``Report.pdf`` is not ``Report.docx``; ``Node.txt`` is not the gold ``Node.js``).
    """
    return gold[0] == file[0] or gold[0] == file[1] or gold[1] == file[0]


def retrieval_metrics(files: list[str], gold: list[str]) -> dict[str, float]:
    """recall@k, any_gold@k (k in :data:`KS`) and MRR of ranked ``files`` against ``gold`` file names; {} without gold.

    ``files`` are counted once each, in their first place; gold names written alike count once.
    """
    wanted = list(dict.fromkeys(name_keys(g) for g in gold))
    if not wanted:
        return {}
    ranked = list({keys[0]: keys for keys in map(name_keys, files)}.values())  # first place of each file
    places = [next((i for i, keys in enumerate(ranked, start=1) if same_file(want, keys)), None) for want in wanted]
    out: dict[str, float] = {}
    for k in KS:
        found = sum(1 for place in places if place is not None and place <= k)
        out[f"recall@{k}"] = found / len(wanted)
        out[f"any_gold@{k}"] = 1.0 if found else 0.0
    first = min((place for place in places if place is not None), default=None)
    out["mrr"] = 1.0 / first if first else 0.0
    return out


def normalize_answer(text: str) -> str:
    """Citations (``[file.txt]``) removed, then the SQuAD normalisation: lower case, no punctuation,
    no articles (a, an, the), single spaces."""
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


#: The product's own notes under an answer (cut off, stopped, quoted from the sources): not part of what it says.
_PRODUCT_NOTES = re.compile(r"\s*(?:…\s*)?\*(?:\((?:cut off|stopped)\b|Quoted from the sources)[^*]*\*\s*$")


def answer_metrics(answer: str, expected: str, aliases: tuple[str, ...] = ()) -> dict[str, float]:
    """``exact_match``, token ``f1`` and ``contains`` of an answer against the expected one and its aliases.

    Each is the best over ``expected`` and ``aliases`` (see the module docstring); {} without an expected answer.
    """
    if not expected:
        return {}
    answer = _PRODUCT_NOTES.sub("", answer)
    got = normalize_answer(answer).split()
    best = {"exact_match": 0.0, "f1": 0.0, "contains": 0.0}
    for gold in (expected, *aliases):
        want = normalize_answer(gold).split()
        common = sum((Counter(got) & Counter(want)).values())
        if not got or not want:  # as the SQuAD script: F1 is 1 when both are empty after normalising, else 0
            f1 = float(got == want)
        else:
            f1 = 0.0 if common == 0 else 2 * common / (len(got) + len(want))
        contains = bool(want) and f" {' '.join(want)} " in f" {' '.join(got)} "
        for key, value in (("exact_match", float(got == want)), ("f1", f1), ("contains", float(contains))):
            best[key] = max(best[key], value)
    return best


class Verdict(BaseModel):
    """The judge's typed reply on one answer."""

    correct: bool
    reason: str = ""


#: The judge's instructions (after the "LLM-as-a-judge" reference-guided grading of Zheng et al., 2023).
JUDGE_PROMPT = """You grade an answer to a question against the reference answer.
The answer is correct when it states what the reference states (other words, more detail or citations are fine);
it is wrong when it contradicts the reference, misses its point, or says it does not know.

Question: {question}
Reference answer: {reference}
Answer to grade: {answer}

Reply with JSON: {{"correct": true or false, "reason": "one short sentence"}}"""


def check_judge(rt: Runtime) -> None:
    """Refuse a judge that cannot judge.

    Raises:
        ConfigurationError: when the judge role is served by the bundled model (no ``JUDGE_BASE_URL``
            and no ``LLM_BASE_URL``): a 135M model's verdicts would be noise.
    """
    if rt.gateway.endpoint("judge").is_local:
        raise ConfigurationError(
            "--judge needs a real model: set JUDGE_BASE_URL and JUDGE_MODEL (or LLM_BASE_URL and LLM_MODEL); "
            "the bundled 135M model cannot judge answers"
        )


def judge_answer(rt: Runtime, question: str, reference: str, answer: str, trace=None) -> Verdict:
    """One judge call: is ``answer`` correct against ``reference``? A reply that cannot be parsed counts as
    not correct, with the reason saying so."""
    prompt = JUDGE_PROMPT.format(question=question, reference=reference, answer=answer)
    try:
        return rt.gateway.structured("judge", [{"role": "user", "content": prompt}], Verdict, prompt_name="judge", trace=trace)
    except ModelUnavailableError as exc:
        return Verdict(correct=False, reason=f"no usable verdict: {exc}")


def evaluate(
    rt: Runtime,
    topic: Topic,
    questions: list[EvalQuestion],
    *,
    route: str | None = None,
    retrieval_only: bool = False,
    judge: bool = False,
    progress=None,
) -> tuple[dict[str, Any], list[QuestionResult]]:
    """Ask every question and score it.

    Args:
        rt: the runtime.
        topic: the Topic (with any evaluation-only settings, see :func:`with_settings`).
        questions: from :func:`load_questions`.
        route: force this way for every question (None: route as a chat would).
        retrieval_only: route and search only; no answer is written (answer metrics are then absent).
        judge: also ask the judge model (role ``judge``) whether each answer is correct against the
            expected one (``judged_correct``, with the judge's reason in ``judge_reason``).
        progress: called as ``progress(done, total)`` after each question, or None.

    Returns:
        ``(summary, results)``: the summary holds ``n`` and the mean of each metric over the questions
        that have it (``way_accuracy`` over those with an expected way), plus ``ms_per_question``, and
        ``errors`` when questions failed (each scores as finding nothing; its result says why).

    Raises:
        ConfigurationError: ``judge`` with ``retrieval_only`` (nothing to judge), or with the bundled model
            as the judge (see :func:`check_judge`).
        RagTopicsError: when every question failed (the first question's error: an unreachable model,
            a way the Topic does not have); nothing would be worth writing.
    """
    if judge:
        if retrieval_only:
            raise ConfigurationError("--judge grades answers: it cannot be combined with --retrieval-only")
        check_judge(rt)

    results: list[QuestionResult] = []
    failures: list[RagTopicsError] = []
    started = time.perf_counter()
    for n, q in enumerate(questions, start=1):
        try:
            if retrieval_only:
                found = search_only(rt, topic, q.question, route=route)
                result = QuestionResult(
                    q.question,
                    found.route,
                    found.route_confidence,
                    ranked_files(found.context),
                    list(q.gold_sources),
                    timings_ms=found.timings_ms,
                )
            else:
                *_, final = ask(rt, topic, q.question, save=False, route=route)
                result = QuestionResult(
                    q.question,
                    final.route,
                    final.route_confidence,
                    list(final.retrieved),
                    list(q.gold_sources),
                    answer=final.text,
                    timings_ms=final.timings_ms,
                    cited=list(dict.fromkeys(s.file for s in final.sources)),
                )
        except RagTopicsError as exc:  # this question failed; the others still count
            failures.append(exc)
            result = QuestionResult(q.question, "", None, [], list(q.gold_sources), error=str(exc))
        result.expected_answer, result.expected_way = q.answer, q.expected_way
        result.metrics = retrieval_metrics(result.files, result.gold_sources)
        if not retrieval_only:
            result.metrics |= (
                answer_metrics(result.answer, q.answer, q.answer_aliases)
                if not result.error
                else ({"exact_match": 0.0, "f1": 0.0, "contains": 0.0} if q.answer else {})
            )  # a failed question answered nothing right
        if judge and q.answer and result.error:
            result.metrics["judged_correct"] = 0.0
        elif judge and q.answer:
            t0 = time.perf_counter()
            verdict = judge_answer(rt, q.question, q.answer, result.answer)
            result.metrics["judged_correct"] = float(verdict.correct)
            result.judge_reason = verdict.reason
            result.timings_ms["judge"] = round((time.perf_counter() - t0) * 1000, 1)
        if q.expected_way:
            result.metrics["way_correct"] = float(result.way == q.expected_way)
        results.append(result)
        if progress is not None:
            progress(n, len(questions))
    if failures and len(failures) == len(questions):
        raise failures[0]
    summary = summarize(results, time.perf_counter() - started)
    missing = missing_gold(rt, topic, questions)
    if missing:
        summary["missing_gold_files"] = missing
    return summary, results


def missing_gold(rt: Runtime, topic: Topic, questions: list[EvalQuestion]) -> list[str]:
    """Gold source names that match no file of the Topic (a typo scores like a retrieval failure), sorted."""
    try:
        known = [name_keys(name) for name in rt.chunk_index(topic.id).file_names().values()]
    except Exception as exc:
        log.warning("gold names not checked against the files of %s: %s", topic.name, exc)
        return []
    return sorted({g for q in questions for g in q.gold_sources if not any(same_file(name_keys(g), f) for f in known)})


def summarize(results: list[QuestionResult], seconds: float) -> dict[str, Any]:
    """Means of every metric over the questions that have it; ``way_correct`` is reported as ``way_accuracy``."""
    keys = list(dict.fromkeys(k for r in results for k in r.metrics))
    summary: dict[str, Any] = {"n": len(results)}
    for key in keys:
        values = [r.metrics[key] for r in results if key in r.metrics]
        summary["way_accuracy" if key == "way_correct" else key] = round(sum(values) / len(values), 4)
    summary["ways"] = dict(Counter(r.way or "failed" for r in results))
    summary["ms_per_question"] = round(seconds * 1000 / max(len(results), 1), 1)
    failed = [r for r in results if r.error]
    if failed:
        summary["errors"] = len(failed)
        summary["first_error"] = failed[0].error
    return summary


def check_out_folder(folder: Path) -> None:
    """Make sure results can be written into ``folder`` (created when missing), before a run starts.

    Raises:
        RagTopicsError: when ``folder`` is a file, cannot be created, or cannot be written to.
    """
    if folder.exists() and not folder.is_dir():
        raise RagTopicsError(f"--out {folder} is a file; give a folder for the results")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-check-{time.time_ns()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise RagTopicsError(f"--out {folder}: results cannot be written there: {exc.strerror or exc}") from exc


def write_results(folder: Path, summary: dict[str, Any], results: list[QuestionResult]) -> list[Path]:
    """Write ``summary.json``, ``questions.json`` and ``questions.csv`` into ``folder`` (created); returns the paths.

    CSV cells that would start a spreadsheet formula (``=``, ``+``, ``-``, ``@``) get a leading ``'``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in RESULT_FILES]
    paths[0].write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    paths[1].write_text(json.dumps([asdict(r) for r in results], indent=2, ensure_ascii=False), encoding="utf-8")
    metric_keys = list(dict.fromkeys(k for r in results for k in r.metrics))
    with paths[2].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["question", "way", "confidence", "files", "gold_sources", "answer", "cited", *metric_keys, "total_ms", "error"]
        )
        for r in results:
            row = [
                r.question,
                r.way,
                "" if r.confidence is None else r.confidence,
                " | ".join(r.files),
                " | ".join(r.gold_sources),
                r.answer,
                " | ".join(r.cited),
                *[r.metrics.get(k, "") for k in metric_keys],
                r.timings_ms.get("total", ""),
                r.error,
            ]
            writer.writerow([_cell(v) for v in row])
    return paths


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, float | None, float | None, float | None]]:
    """``(metric, a, b, b - a)`` for every numeric metric of two summaries (``summary.json``): ``a``'s metrics
    in its order, then those only ``b`` has. A metric one run lacks (answer metrics of a retrieval-only
    run, say) is ``None`` there, and so is its change."""

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    out = []
    for key in dict.fromkeys([*a, *b]):
        x, y = number(a.get(key)), number(b.get(key))
        if key != "n" and (x is not None or y is not None):
            out.append((key, x, y, None if x is None or y is None else round(y - x, 4)))
    return out


#: What :func:`changed_questions` compares per question.
CHANGE_KEYS = ("way", "recall@5", "mrr", "judged_correct", "answer")


def changed_questions(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The questions whose way, recall@5, MRR, judged correctness or answer differ between two runs.

    Args:
        a, b: the per-question results of two runs (their ``questions.json``), matched by question text;
            a question asked twice in a run is matched by its occurrence (first with first).

    Returns:
        One item per changed question, in ``a``'s order: ``{"question", "changes": {key: [in A, in B]}}``
        for each key of :data:`CHANGE_KEYS` that differs; questions asked in one run only are
        listed with ``"only_in": "A"`` or ``"B"``.
    """

    def values(r: dict[str, Any]) -> dict[str, Any]:
        metrics = r.get("metrics") or {}
        return {
            "way": r.get("way", ""),
            "recall@5": metrics.get("recall@5"),
            "mrr": metrics.get("mrr"),
            "judged_correct": metrics.get("judged_correct"),
            "answer": r.get("answer", ""),
        }

    def keyed(rows: list[dict[str, Any]]) -> list[tuple[tuple[str, int], dict[str, Any]]]:
        seen: Counter = Counter()
        out = []
        for r in rows:
            seen[r["question"]] += 1
            out.append(((r["question"], seen[r["question"]]), r))
        return out

    by_question = {key: values(r) for key, r in keyed(b)}
    out: list[dict[str, Any]] = []
    for key, r in keyed(a):
        if key not in by_question:
            out.append({"question": r["question"], "only_in": "A"})
            continue
        x, y = values(r), by_question.pop(key)
        changes = {k: [x[k], y[k]] for k in CHANGE_KEYS if x[k] != y[k]}
        if changes:
            out.append({"question": r["question"], "changes": changes})
    out.extend({"question": question, "only_in": "B"} for question, _ in by_question)
    return out


def shared_questions(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    """How many questions two runs' per-question results have in common (by text)."""
    return len({r["question"] for r in a} & {r["question"] for r in b})


def short_value(value: Any, limit: int = 60) -> str:
    """A metric or answer in a change list: a float to three decimals, text on one line cut to ``limit``."""
    if isinstance(value, float):
        return f"{value:.3f}"
    text = "" if value is None else str(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_summary(
    summary: dict[str, Any],
    *,
    topic: str,
    route: str | None,
    retrieval_only: bool,
    settings_changed: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """An evaluation's summary with what was run (``summary.json``; ``--compare`` and the QA tab read it)."""
    return {
        "topic": topic,
        "route": route or "routed",
        "retrieval_only": retrieval_only,
        "settings_changed": settings_changed,
        **extra,
        **summary,
    }


def format_changes(changes: list[dict[str, Any]], limit: int = 50) -> str:
    """The changed questions as lines: the question, then ``key: A → B`` for each change (answers shortened)."""
    lines = [f"{len(changes)} question(s) changed"]
    for item in changes[:limit]:
        lines.append(f"- {short_value(item['question'])}")
        if "only_in" in item:
            lines.append(f"    asked in run {item['only_in']} only")
            continue
        lines.extend(f"    {key}: {short_value(x)} -> {short_value(y)}" for key, (x, y) in item["changes"].items())
    if len(changes) > limit:
        lines.append(f"... and {len(changes) - limit} more (see --json)")
    return "\n".join(lines)


def format_table(summary: dict[str, Any]) -> str:
    """The summary as aligned ``metric value`` lines."""
    lines = [f"{'questions':<18} {summary['n']}"]
    for key, value in summary.items():
        if key in ("n", "ways"):
            continue
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        lines.append(f"{key:<18} {value:.3f}" if isinstance(value, float) else f"{key:<18} {value}")
    lines.append(f"{'ways':<18} " + ", ".join(f"{w} {c}" for w, c in summary["ways"].items()))
    return "\n".join(lines)


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value
