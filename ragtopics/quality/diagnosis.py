"""Why did that happen? The specification's "Which setting fixes which problem" tables, applied to one answer or file.

:func:`diagnose_turn` reads a saved chat turn and its trace and picks the symptom that
matches (in this order): no sources because the router did not search; no answer
(the no-answer response, or nothing kept by the search); a slow answer; otherwise an
answer that may carry unrelated content. :func:`diagnose_document` explains a file that
failed or yielded nothing. Each :class:`Diagnosis` says what the trace shows (the way and
its confidence, scores against the threshold, the slowest steps) and the settings to try,
with their current values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragtopics.errors import NotFoundError
from ragtopics.kinds import kind_of
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import TopicSettings
from ragtopics.storage.metadata import ChatTurnRow, DocumentRow
from ragtopics.storage.traces import load_trace
from ragtopics.topics.topics import get_topic

#: An answer slower than this (top-level steps, ms) counts as slow.
SLOW_MS = 8_000.0
#: Ways that answer without searching the documents.
NO_SEARCH_WAYS = frozenset({"DIRECT", "ATTACHMENT"})

#: (kind, symptom) → (the table's symptom text, what to try, the settings named). From the specification's tables.
REMEDIES: dict[tuple[str, str], tuple[str, str, tuple[str, ...]]] = {
    ("rag", "no_sources"): (
        "A chat message gets no sources",
        "The router may have answered from the conversation. Switch Route before retrieval off, or raise the threshold.",
        ("route_before_retrieval", "router_confidence_threshold"),
    ),
    ("graphrag", "no_sources"): (
        "A question gets no sources",
        "The router chose DIRECT, ATTACHMENT or GLOBAL. Raise the DIRECT Confidence Threshold, or switch DIRECT off.",
        ("direct_confidence_threshold", "answer_without_searching", "confidence_threshold"),
    ),
    ("rag", "no_answer"): (
        'Answers say "I don\'t know" too often',
        "Lower Min. Similarity Score, or raise Top-K Results.",
        ("min_similarity_score", "top_k_results"),
    ),
    ("graphrag", "no_answer"): (
        'Overview questions answer "no results"',
        (
            "Run Recompute Communities Now (new documents reach overview answers only after a run); "
            "lower Min. Similarity Score or raise Top-K Nodes."
        ),
        ("min_similarity_score", "top_k_nodes", "top_k_reports"),
    ),
    ("rag", "slow"): (
        "Answers are slow",
        ("Reranking LLM adds a model call per question; a smaller Top-K Results gives the model less to read."),
        ("reranking_strategy", "top_k_results"),
    ),
    ("graphrag", "slow"): (
        "Answers are slow",
        ("A router decision of HYBRID is the slowest way. Lower Max Follow-up Rounds and Max Follow-up Questions."),
        ("max_follow_up_rounds", "max_follow_up_questions", "top_k_reports"),
    ),
    ("rag", "unrelated"): (
        "Answers contain unrelated content",
        ("Raise Min. Similarity Score, lower Top-K Results, or use Reranking LLM."),
        ("min_similarity_score", "top_k_results", "reranking_strategy"),
    ),
    ("graphrag", "unrelated"): (
        "Answers contain unrelated content",
        ("Raise Min. Similarity Score, or lower Top-K Nodes and Hop Depth."),
        ("min_similarity_score", "top_k_nodes", "hop_depth"),
    ),
    ("rag", "file_empty"): (
        "A file is accepted, but the chat never finds its content",
        ("Check the Indexed Documents list. A scan without readable text yields no pieces: turn on OCR in Docling Settings."),
        ("docling_settings",),
    ),
    ("graphrag", "file_empty"): (
        "A file is accepted, but its facts are not found",
        (
            "Check the Ingested Sources list. A scan without readable text yields nothing: turn on OCR in "
            "Docling Settings. Few entities: use a stronger Graph Extraction Model or a smaller Chunk Size."
        ),
        ("docling_settings", "graph_extraction_method", "chunk_size"),
    ),
    ("rag", "file_failed"): (
        "A file could not be indexed",
        "Read the error; fix the file or the setting it names and upload it again.",
        ("docling_settings", "max_file_size_mb"),
    ),
    ("graphrag", "file_failed"): (
        "A file could not be indexed",
        ("Read the error; fix the file or the setting it names and upload it again."),
        ("docling_settings", "max_file_size_mb"),
    ),
}


@dataclass
class Diagnosis:
    """What went wrong, what the trace shows, and what to try.

    Attributes:
        symptom: ``no_sources``, ``no_answer``, ``slow``, ``unrelated``, ``file_empty``, ``file_failed`` or ``fine``.
        title: the symptom as the specification's table names it.
        findings: what the trace says happened, one line each.
        advice: what to try, from the table.
        settings: the settings to try, as ``key = current value``.
    """

    symptom: str
    title: str
    findings: list[str] = field(default_factory=list)
    advice: str = ""
    settings: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        """The diagnosis as the console shows it."""
        lines = [f"**Why? {self.title}**", ""] + [f"- {f}" for f in self.findings]
        if self.advice:
            lines += ["", f"**Try:** {self.advice}"]
        if self.settings:
            lines += ["", "Settings (Topics → Configure a Topic): " + ", ".join(f"`{s}`" for s in self.settings)]
        return "\n".join(lines)


def _remedy(kind: str, symptom: str, topic_settings, findings: list[str]) -> Diagnosis:
    title, advice, keys = REMEDIES[(kind, symptom)]
    values = [f"{k} = {_value(getattr(topic_settings, k, None))}" for k in keys if hasattr(topic_settings, k)]
    return Diagnosis(symptom, title, findings, advice, values)


def _value(value: Any) -> str:
    return str(getattr(value, "value", value)) if not hasattr(value, "model_dump_json") else value.model_dump_json()


def _step(events: list[dict], name: str) -> dict | None:
    return next((e for e in events if e.get("step") == name), None)


def diagnose_turn(rt: Runtime, turn_id: int) -> Diagnosis:
    """Explain one saved chat turn from its row and its trace.

    Raises:
        NotFoundError: no such turn.
    """
    with rt.metadata.session() as s:
        turn = s.get(ChatTurnRow, turn_id)
    if turn is None:
        raise NotFoundError(f"no chat turn {turn_id}")
    topic = get_topic(rt, turn.topic_id)
    cfg, kind = topic.settings, topic.kind
    events = load_trace(rt.metadata, f"turn:{turn_id}")
    way = f"way {turn.route}" + (f" (confidence {turn.route_confidence:.2f})" if turn.route_confidence is not None else "")
    reason = f": {turn.route_reason}" if turn.route_reason else ""
    no_answer = turn.answer.strip() == cfg.no_answer_response.strip()
    summaries = kind_of(topic).has_graph and turn.route == "GLOBAL"
    if not turn.sources and (turn.route in NO_SEARCH_WAYS or (summaries and not no_answer)):
        what = "; GLOBAL answers from community summaries, which cite no file" if summaries else ", so no document was searched"
        findings = [f"The router chose {way}{reason}{what}."]
        threshold = kind_of(topic).route_threshold(cfg, turn.route)
        if threshold is not None and turn.route_confidence is not None:
            findings.append(f"Its confidence {turn.route_confidence:.2f} was at or above the threshold {threshold:.2f}.")
        return _remedy(kind, "no_sources", cfg, findings)
    search = _search_findings(events, cfg, turn.route)
    if not turn.sources or no_answer:
        return _remedy(
            kind,
            "no_answer",
            cfg,
            [f"The question was searched ({way}){reason}.", *search, "No source was cited, so the no-answer response was given."],
        )
    top = [e for e in events if e.get("parent") is None]
    total = sum(float(e.get("duration_ms") or 0) for e in top)
    if total >= SLOW_MS:
        slowest = sorted(events, key=lambda e: -float(e.get("duration_ms") or 0))
        names = ", ".join(f"{e['step']} {float(e['duration_ms']) / 1000:.1f} s" for e in slowest[:3])
        return _remedy(kind, "slow", cfg, [f"The answer took {total / 1000:.1f} s by the {way}.", f"Slowest steps: {names}."])
    scores = ", ".join(f"{src.get('file')} {float(src.get('score') or 0):.2f}" for src in turn.sources[:5])
    return _remedy(
        kind,
        "unrelated",
        cfg,
        [
            f"The answer ({way}) cited {len(turn.sources)} source(s): {scores}.",
            *search,
            "If a source does not belong, the threshold let it in.",
        ],
    )


def _search_findings(events: list[dict], cfg: TopicSettings, route: str = "") -> list[str]:
    """What the search step shows: candidates, what was kept, the best scores against Min. Similarity Score
    (for GLOBAL: of the community summaries; HYBRID's summaries are only its start, its chunks come from LOCAL)."""
    select = _step(events, "global_select")
    if route == "GLOBAL" and select is not None:
        return _summary_findings(select.get("data") or {}, cfg)
    retrieve = _step(events, "retrieve") or next(
        (e for e in events if "min_score" in (e.get("data") or {}) and e.get("step") != "global_select"), None
    )
    if retrieve is None:
        return ["The trace holds no search step."]
    data = retrieve.get("data") or {}
    found = data.get("dense") or data.get("kept") or []
    best = sorted((float(h.get("score") or 0) for h in found if isinstance(h, dict)), reverse=True)[:3]
    min_score = data.get("min_score", cfg.min_similarity_score)
    lines = [
        (
            f"The search ({data.get('strategy', 'dense')}) found {len(found) if found else data.get('candidates', 0)} candidate chunk(s) and "
            f"kept {len(data.get('kept') or [])} (Top-K {data.get('top_k', '?')}, Min. Similarity Score {min_score})."
        )
    ]
    return lines + _best_scores(best)


def _best_scores(scores: list[float]) -> list[str]:
    """``["Best similarity scores: 0.41, 0.38."]``, or ``[]`` for no scores."""
    return ["Best similarity scores: " + ", ".join(f"{b:.2f}" for b in scores) + "."] if scores else []


def _summary_findings(data: dict, cfg: TopicSettings) -> list[str]:
    """What GLOBAL's selection of community summaries shows (its ``global_select`` step)."""
    if data.get("reason"):
        return [f"GLOBAL searched community summaries and found none: {data['reason']} (run Recompute Communities Now)."]
    kept, best = data.get("reports") or [], data.get("best") or []
    min_score = data.get("min_score", cfg.min_similarity_score)
    return [
        (
            f"GLOBAL searched community summaries, not documents, and kept {len(kept)} (Top-K Reports "
            f"{data.get('top_k', '?')}, Min. Similarity Score {min_score})."
        ),
        *_best_scores([float(b.get("score") or 0) for b in best]),
    ]


def diagnose_document(rt: Runtime, document_id: str) -> Diagnosis:
    """Explain a file that failed or yielded nothing (or say that it was indexed).

    Raises:
        NotFoundError: no such document.
    """
    with rt.metadata.session() as s:
        doc = s.get(DocumentRow, document_id)
    if doc is None:
        raise NotFoundError(f"no document {document_id}")
    topic = get_topic(rt, doc.topic_id)
    events = load_trace(rt.metadata, f"document:{doc.id}")
    step = _step(events, "read") or {}
    read = step.get("data") or {}
    if step.get("error"):  # refused or unreadable: there is no reader to name
        facts = [f"Reading stopped: {step['error']}"]
    elif read.get("reader"):
        facts = [f"Read by the {read['reader']} reader: {read.get('chars', 0)} characters, {read.get('pictures', 0)} picture(s)."]
    else:
        facts = ["The trace holds no finished read step."]
    if doc.status == "failed":
        return _remedy(topic.kind, "file_failed", topic.settings, [f"{doc.file_name} failed: {doc.error}", *facts])
    graph = (doc.indexed_with or {}).get("graph") or {}
    has_graph = kind_of(topic).has_graph
    if doc.status in ("indexed", "empty") and (doc.chunk_count == 0 or (has_graph and not graph.get("entities"))):
        what = f"{doc.chunk_count} chunk(s)" + (f", {graph.get('entities', 0)} entities" if has_graph else "")
        return _remedy(
            topic.kind,
            "file_empty",
            topic.settings,
            [f"{doc.file_name} gave {what}.", *facts, *([doc.warning] if doc.warning else [])],
        )
    return Diagnosis("fine", f"{doc.file_name} is {doc.status}", [f"{doc.chunk_count} chunk(s).", *facts])
