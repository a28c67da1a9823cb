"""`ragtopics eval`: a Topic scored on a question file through the product's own routing and search."""

from __future__ import annotations

import csv
import json

import pytest

from ragtopics.quality.evaluate import answer_metrics, retrieval_metrics
from ragtopics.ui.cli import main
from tests.quality.conftest import QUESTIONS


def test_retrieval_metrics_follow_their_definitions():
    m = retrieval_metrics(["c.txt", "a.txt", "x.txt", "b.txt"], ["a.txt", "b.txt"])
    assert (m["recall@1"], m["recall@5"], m["any_gold@1"], m["any_gold@5"], m["mrr"]) == (0.0, 1.0, 0.0, 1.0, 0.5)
    assert retrieval_metrics(["Lilu_mythology.txt"], ["Lilu (mythology).txt"])["recall@1"] == 1.0
    assert retrieval_metrics([], ["a.txt"])["mrr"] == 0.0 and retrieval_metrics(["a.txt"], []) == {}


def test_answer_metrics_are_squad_exact_match_and_token_f1():
    assert answer_metrics("The spare tyres, and a jack!", "spare tyres and a jack") == {"exact_match": 1.0, "f1": 1.0}
    partial = answer_metrics("every 90 days at night", "every 90 days")
    assert partial["exact_match"] == 0.0 and partial["f1"] == pytest.approx(2 * 3 / (5 + 3))
    assert answer_metrics("anything", "") == {}
    assert answer_metrics("Every 90 days [pumps.txt].", "every 90 days")["exact_match"] == 1.0


def test_retrieval_only_eval_prints_the_summary_and_writes_each_question(rt, fleet, tmp_path, capsys):
    out = tmp_path / "run-a"
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--json", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 3 and summary["retrieval_only"] is True and summary["ways"] == {"SEARCH": 3}
    assert summary["recall@10"] == 1.0 and summary["any_gold@10"] == 1.0 and 0 < summary["mrr"] <= 1.0
    assert summary["way_accuracy"] == 1.0 and "exact_match" not in summary
    per_question = json.loads((out / "questions.json").read_text())
    assert [q["gold_sources"] for q in per_question] == [["pumps.txt"], ["trucks.txt"], ["Valves.TXT"]]
    assert per_question[0]["files"][0] == "pumps.txt" and "search" in per_question[0]["timings_ms"]
    rows = list(csv.reader((out / "questions.csv").open()))
    assert rows[0][:3] == ["question", "way", "confidence"]
    assert rows[2][0].startswith("'=HYPERLINK")  # never a formula in a spreadsheet
    assert json.loads((out / "summary.json").read_text()) == summary


def test_a_setting_changed_for_the_run_and_the_comparison_of_two_runs(rt, fleet, tmp_path, capsys):
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--out", str(tmp_path / "a")]) == 0
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--set", "top_k_results=1",
                 "--out", str(tmp_path / "b")]) == 0  # fmt: skip
    capsys.readouterr()
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert b["settings_changed"] == {"top_k_results": "1"}
    assert all(len(q["files"]) <= 1 for q in json.loads((tmp_path / "b" / "questions.json").read_text()))
    assert main(["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "b" / "summary.json")]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["metric", "A", "B", "B", "-", "A"] and "recall@10" in table

    assert main(["eval", "Fleet", str(fleet), "--set", "top_k=3"]) == 2
    assert "top_k: unknown setting" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps([{"answer": "no question"}]))
    assert main(["eval", "Fleet", str(tmp_path / "bad.json")]) == 2
    assert "item 1 has no question" in capsys.readouterr().err


def test_with_answers_exact_match_and_f1_are_scored(rt, fleet, scripted_llm, capsys):
    scripted_llm.replies["answer"] = lambda body: ("Every 90 days [S1]." if "P-7" in body["messages"][-1]["content"].split("Question:")[-1]
                                                   else "Spare tyres and a jack [S1].")  # fmt: skip
    scripted_llm.replies["source_check"] = json.dumps({"used": True})
    assert main(["eval", "Fleet", str(fleet), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["exact_match"] == 1.0 and summary["f1"] == 1.0  # citations ("[pumps.txt]") do not count
    assert summary["recall@1"] > 0 and summary["way_accuracy"] == 1.0


def test_compare_lists_the_questions_whose_way_or_ranking_changed(rt, fleet, tmp_path, capsys):
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--out", str(tmp_path / "a")]) == 0
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--route", "DIRECT", "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    changed = {c["question"]: c["changes"] for c in report["changed_questions"]}
    assert set(changed) == {q["question"] for q in QUESTIONS}  # DIRECT searches nothing: every question changed
    assert changed["How often is pump P-7 inspected?"]["way"] == ["SEARCH", "DIRECT"]
    assert changed["How often is pump P-7 inspected?"]["recall@5"] == [1.0, 0.0]
    assert report["recall@5"]["change"] == -1.0

    assert main(["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    assert "0 question(s) changed" in capsys.readouterr().out
    assert main(["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert "3 question(s) changed" in text and "way: SEARCH -> DIRECT" in text


def test_the_judge_grades_answers_against_the_expected_ones(rt, fleet, scripted_llm, tmp_path, capsys):
    scripted_llm.replies["answer"] = lambda body: ("Every 90 days [S1]." if "P-7" in body["messages"][-1]["content"].split("Question:")[-1]
                                                   else "I do not know.")  # fmt: skip
    scripted_llm.replies["source_check"] = json.dumps({"used": True})
    scripted_llm.replies["judge"] = lambda body: json.dumps(
        {"correct": "Answer to grade: Every 90 days" in body["messages"][-1]["content"], "reason": "compared"})
    assert main(["eval", "Fleet", str(fleet), "--judge", "--json", "--out", str(tmp_path / "judged")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["judged_correct"] == 0.5  # two questions have an expected answer; one was answered right
    per_question = json.loads((tmp_path / "judged" / "questions.json").read_text())
    assert [q["metrics"].get("judged_correct") for q in per_question] == [1.0, 0.0, None]
    assert per_question[0]["judge_reason"] == "compared" and "judge" in per_question[0]["timings_ms"]
    assert len(scripted_llm.prompts("judge")) == 2

    assert main(["eval", "Fleet", str(fleet), "--judge", "--retrieval-only"]) == 2
    assert "cannot be combined with --retrieval-only" in capsys.readouterr().err


def test_the_bundled_model_is_refused_as_a_judge(rt, fleet, reconfigure, capsys):
    reconfigure(LLM_BASE_URL=None, LLM_MODEL="SmolLM2-135M-Instruct")
    assert main(["eval", "Fleet", str(fleet), "--judge"]) == 2
    assert "--judge needs a real model" in capsys.readouterr().err
