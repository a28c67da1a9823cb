"""Why? Each symptom of the specification's table, found from a real turn's or file's trace, with the setting to try."""

from __future__ import annotations

import json

from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import get_document
from ragtopics.quality import diagnosis
from ragtopics.quality.diagnosis import diagnose_document, diagnose_turn
from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import upload

KETTLE = b"Kettle K-2 switches itself off at 100 degrees."


def asked(rt, topic, question: str, **kwargs):
    *_, final = ask(rt, topic, question, **kwargs)
    return final


def test_no_answer_shows_scores_against_the_threshold(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Kettles", settings={"min_similarity_score": 0.99, "retrieval_strategy": "DENSE"})
    upload(rt, topic, "kettles.txt", KETTLE)
    run_jobs()
    scripted_llm.replies["answer"] = "Nothing on that."
    final = asked(rt, topic, "When does kettle K-2 switch off?")
    found = diagnose_turn(rt, final.turn_id)
    assert found.symptom == "no_answer" and found.title == 'Answers say "I don\'t know" too often'
    assert any("Min. Similarity Score 0.99" in f and "kept 0" in f for f in found.findings)
    assert any(f.startswith("Best similarity scores: 0.") for f in found.findings)
    assert found.settings == ["min_similarity_score = 0.99", "top_k_results = 5"]
    assert "**Try:** Lower Min. Similarity Score, or raise Top-K Results." in found.to_markdown()


def test_no_sources_names_the_way_the_router_took(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "kettles.txt", KETTLE)
    run_jobs()
    scripted_llm.replies["direct"] = "Hello."
    final = asked(rt, topic, "Hello there", route="DIRECT")
    found = diagnose_turn(rt, final.turn_id)
    assert found.symptom == "no_sources" and found.findings[0].startswith("The router chose way DIRECT")
    assert found.settings == ["route_before_retrieval = False", "router_confidence_threshold = 0.9"]


def test_an_answer_with_sources_lists_them_and_a_slow_one_its_slowest_steps(rt, run_jobs, scripted_llm, monkeypatch):
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "kettles.txt", KETTLE)
    run_jobs()
    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    final = asked(rt, topic, "When does kettle K-2 switch off?")
    found = diagnose_turn(rt, final.turn_id)
    assert found.symptom == "unrelated" and "cited 1 source(s): kettles.txt 0." in found.findings[0]
    monkeypatch.setattr(diagnosis, "SLOW_MS", 1.0)  # this answer took well over a millisecond
    slow = diagnose_turn(rt, final.turn_id)
    assert slow.symptom == "slow" and slow.findings[1].startswith("Slowest steps: ")
    assert "reranking_strategy = NONE" in slow.settings


def test_a_file_that_yields_nothing_points_at_ocr(rt, run_jobs):
    topic = create_topic(rt, "Scans")
    doc, _ = upload(rt, topic, "blank.txt", b"   \n\n  ")
    run_jobs()
    assert get_document(rt, doc.id).chunk_count == 0
    found = diagnose_document(rt, doc.id)
    assert found.symptom == "file_empty" and found.findings[0] == "blank.txt gave 0 chunk(s)."
    assert "turn on OCR in Docling Settings" in found.advice and found.settings[0].startswith("docling_settings = {")
    good, _ = upload(rt, topic, "kettles.txt", KETTLE)
    run_jobs()
    assert diagnose_document(rt, good.id).symptom == "fine"


def test_a_file_refused_while_reading_says_why_and_names_no_reader(rt, run_jobs):
    topic = create_topic(rt, "Odd")
    doc, _ = upload(rt, topic, "binary.txt", b"\x00\x01\x02 not text \xff\xfe" * 50)
    run_jobs()
    assert get_document(rt, doc.id).status == "failed"
    found = diagnose_document(rt, doc.id)
    assert found.symptom == "file_failed" and any(f.startswith("Reading stopped: ") for f in found.findings)
    assert not any("? reader" in f for f in found.findings)


def test_global_without_an_answer_shows_the_summaries_scores_and_with_one_says_summaries_cite_no_file(rt, run_jobs, scripted_llm):
    from ragtopics.graph.refresh import run_rebuild
    from ragtopics.topics.topics import update_settings
    from tests.graph.test_global_search import QUESTION, built_topic

    topic = built_topic(rt, run_jobs, scripted_llm, name="Overview")
    run_rebuild(rt, topic.id)
    strict = update_settings(rt, topic.id, {"min_similarity_score": 0.99})
    final = asked(rt, strict, QUESTION, route="GLOBAL")
    found = diagnose_turn(rt, final.turn_id)
    assert final.no_answer and found.symptom == "no_answer"
    assert any(
        "GLOBAL searched community summaries, not documents, and kept 0" in f and "Min. Similarity Score 0.99" in f
        for f in found.findings
    ), found.findings
    assert any(f.startswith("Best similarity scores: 0.") for f in found.findings)
    assert "min_similarity_score = 0.99" in found.settings and "DIRECT" not in found.advice
    scripted_llm.replies["global_map"] = json.dumps({"helpful": True, "points": ["Curie won the Nobel Prize."], "score": 90})
    scripted_llm.replies["answer"] = "Physics prizes."
    loose = update_settings(rt, topic.id, {"min_similarity_score": 0.0})
    answered = asked(rt, loose, QUESTION, route="GLOBAL")
    assert not answered.no_answer and not answered.sources
    found = diagnose_turn(rt, answered.turn_id)
    assert found.symptom == "no_sources" and "GLOBAL answers from community summaries, which cite no file" in found.findings[0]
    assert not any("threshold" in f for f in found.findings[1:])  # a forced way had no router confidence
