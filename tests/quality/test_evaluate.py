"""`ragtopics eval`: a Topic scored on a question file through the product's own routing and search."""

from __future__ import annotations

import csv
import json

import pytest

from ragtopics.errors import RagTopicsError
from ragtopics.quality.evaluate import answer_metrics, changed_questions, compare, parse_questions, retrieval_metrics
from ragtopics.ui.cli import main
from tests.quality.conftest import QUESTIONS


def test_retrieval_metrics_follow_their_definitions():
    m = retrieval_metrics(["c.txt", "a.txt", "x.txt", "b.txt"], ["a.txt", "b.txt"])
    assert (m["recall@1"], m["recall@5"], m["any_gold@1"], m["any_gold@5"], m["mrr"]) == (0.0, 1.0, 0.0, 1.0, 0.5)
    assert retrieval_metrics(["Lilu_mythology.txt"], ["Lilu (mythology).txt"])["recall@1"] == 1.0
    assert retrieval_metrics([], ["a.txt"])["mrr"] == 0.0 and retrieval_metrics(["a.txt"], []) == {}
    assert retrieval_metrics(["c.txt", "a.txt", "c.txt", "b.txt"], ["a", "b"])["recall@5"] == 1.0
    assert retrieval_metrics(["c.txt", "c.txt", "a.txt"], ["a.txt"])["mrr"] == 0.5  # a file counts once, first place


@pytest.mark.parametrize(
    ("files", "gold", "found"),
    [
        (["Report.pdf"], ["Report"], True),  # any file type the product reads, not only .txt
        (["Lilu_mythology.md"], ["Lilu (mythology)"], True),
        (["Zürich.txt"], ["Zurich"], True),  # accents
        (["東京.txt"], ["東京"], True),  # letters of any script
        (["東京.txt"], ["大阪.txt"], False),  # ... which are not all the same empty key
        (["--.txt"], ["++.txt"], False),
        (["Node.js.txt"], ["Node.js"], True),  # a dotted title keeps its dot part
        (["Node.js.txt"], ["Node"], False),
        (["Node.txt"], ["Node.js"], False),  # two names that differ in their endings are two files
        (["Report.docx"], ["Report.pdf"], False),
        (["St. Louis.txt"], ["St. Louis"], True),
    ],
)
def test_gold_names_match_file_names_loosely_but_not_wrongly(files, gold, found):
    assert retrieval_metrics(files, gold)["recall@1"] == float(found)


@pytest.mark.parametrize("gold", [[""], ["a.txt", "  "], "a.txt", [3]])
def test_a_question_file_with_bad_gold_sources_is_refused_naming_the_item(gold):
    with pytest.raises(RagTopicsError, match="item 2: gold_sources must be a list of file names"):
        parse_questions(json.dumps([{"question": "ok?"}, {"question": "Which?", "gold_sources": gold}]))


def test_a_question_too_long_to_ask_is_refused_before_the_run():
    with pytest.raises(RagTopicsError, match="item 1: the question is 8001 characters long; the limit is 8000"):
        parse_questions(json.dumps([{"question": "x" * 8001}]))


def test_answer_metrics_are_squad_exact_match_and_token_f1():
    assert answer_metrics("The spare tyres, and a jack!", "spare tyres and a jack") == {
        "exact_match": 1.0,
        "f1": 1.0,
        "contains": 1.0,
    }
    partial = answer_metrics("every 90 days at night", "every 90 days")
    assert partial["exact_match"] == 0.0 and partial["f1"] == pytest.approx(2 * 3 / (5 + 3))
    assert answer_metrics("anything", "") == {}
    assert answer_metrics("Every 90 days [pumps.txt].", "every 90 days")["exact_match"] == 1.0
    assert answer_metrics("The", "the") == {"exact_match": 1.0, "f1": 1.0, "contains": 0.0}  # both empty once normalised
    assert answer_metrics("", "Paris") == {"exact_match": 0.0, "f1": 0.0, "contains": 0.0}


def test_answer_containment_takes_whole_words_the_best_alias_and_leaves_the_products_notes_out():
    long = answer_metrics(
        "From [a.txt]:\n\n> The main airport is Stockholm Arlanda Airport, north of the city. [a.txt]",
        "Stockholm Arlanda Airport",
    )
    assert long["contains"] == 1.0 and long["exact_match"] == 0.0 and 0 < long["f1"] < 1
    assert answer_metrics("It is in Parisian suburbs.", "Paris")["contains"] == 0.0  # whole words only
    assert answer_metrics("Flights land at Arlanda.", "Stockholm Arlanda Airport", ("Arlanda",))["contains"] == 1.0
    assert answer_metrics("ARN it is", "Stockholm Arlanda Airport", ("Arlanda Airport", "ARN"))["exact_match"] == 0.0
    assert answer_metrics("ARN", "Stockholm Arlanda Airport", ("ARN",)) == {"exact_match": 1.0, "f1": 1.0, "contains": 1.0}
    # "no" stands in the product's own line under a quoted answer, not in what the answer says.
    quoted = "From [a.txt]:\n\n> They differ. [a.txt]\n\n*Quoted from the sources: no language model is configured.*"
    assert answer_metrics(quoted, "no")["contains"] == 0.0
    assert answer_metrics("No [a.txt]. *(stopped: the model began repeating itself)*", "no")["exact_match"] == 1.0
    items = parse_questions(json.dumps([{"question": "q?", "answer": "a", "answer_aliases": ["b", " "]}]))
    assert items[0].answer_aliases == ("b",)
    with pytest.raises(RagTopicsError, match="item 1: answer_aliases must be a list"):
        parse_questions(json.dumps([{"question": "q?", "answer_aliases": "b"}]))


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
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--set", "top_k_results=1", "--out", str(tmp_path / "b")]) == 0
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
    scripted_llm.replies["answer"] = lambda body: (
        "Every 90 days [S1]."
        if "P-7" in body["messages"][-1]["content"].split("Question:")[-1]
        else "Spare tyres and a jack [S1]."
    )
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
    scripted_llm.replies["answer"] = lambda body: (
        "Every 90 days [S1]." if "P-7" in body["messages"][-1]["content"].split("Question:")[-1] else "I do not know."
    )
    scripted_llm.replies["source_check"] = json.dumps({"used": True})
    scripted_llm.replies["judge"] = lambda body: json.dumps(
        {"correct": "Answer to grade: Every 90 days" in body["messages"][-1]["content"], "reason": "compared"}
    )
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


def test_with_answers_recall_scores_the_search_not_the_files_the_answer_cited(rt, fleet, scripted_llm, tmp_path, capsys):
    """An answer cites what it used; recall@k ranks what the search found (the same as a retrieval-only run)."""
    scripted_llm.replies["answer"] = "I do not know."
    scripted_llm.replies["source_check"] = json.dumps({"used": False})
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--out", str(tmp_path / "search")]) == 0
    assert main(["eval", "Fleet", str(fleet), "--json", "--out", str(tmp_path / "answers")]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    searched = json.loads((tmp_path / "search" / "questions.json").read_text())
    answered = json.loads((tmp_path / "answers" / "questions.json").read_text())
    assert [q["files"] for q in answered] == [q["files"] for q in searched] and all(q["files"] for q in answered)
    assert [q["cited"] for q in answered] == [[], [], []]  # nothing was used, so nothing is cited
    assert summary["recall@10"] == 1.0 and summary["exact_match"] == 0.0
    rows = list(csv.reader((tmp_path / "answers" / "questions.csv").open()))
    assert "cited" in rows[0] and rows[0][-1] == "error"


def test_a_question_that_fails_is_recorded_and_the_run_goes_on(rt, fleet, scripted_llm, tmp_path, capsys):
    scripted_llm.replies["answer"] = "Every 90 days [S1]."
    scripted_llm.replies["source_check"] = json.dumps({"used": True})
    scripted_llm.fail_next(1, 400)  # the first question's answer request is refused
    assert main(["eval", "Fleet", str(fleet), "--json", "--out", str(tmp_path / "run")]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    per_question = json.loads((tmp_path / "run" / "questions.json").read_text())
    assert summary["n"] == 3 and summary["errors"] == 1 and "400" in summary["first_error"]
    assert per_question[0]["error"] and per_question[0]["files"] == [] and per_question[0]["metrics"]["recall@10"] == 0.0
    assert [q["error"] for q in per_question[1:]] == ["", ""] and per_question[1]["metrics"]["recall@10"] == 1.0
    assert summary["ways"]["failed"] == 1

    assert main(["eval", "Fleet", str(fleet), "--route", "LOCAL", "--retrieval-only"]) == 2  # every question fails
    assert "LOCAL" in capsys.readouterr().err


def test_compare_keeps_metrics_of_one_run_and_matches_repeated_questions_in_order():
    rows = compare({"n": 2, "recall@5": 0.5, "f1": 0.4}, {"n": 2, "recall@5": 0.7, "errors": 1})
    assert rows == [("recall@5", 0.5, 0.7, 0.2), ("f1", 0.4, None, None), ("errors", None, 1.0, None)]
    a = [{"question": "Who?", "way": "SEARCH"}, {"question": "Who?", "way": "DIRECT"}]
    assert changed_questions(a, a) == []
    assert changed_questions(a, a[:1]) == [{"question": "Who?", "only_in": "A"}]
    assert changed_questions(a, [a[0], {**a[1], "way": "SEARCH"}]) == [
        {"question": "Who?", "changes": {"way": ["DIRECT", "SEARCH"]}}
    ]


def test_an_out_path_that_cannot_take_the_results_is_refused_before_the_run(rt, fleet, tmp_path, scripted_llm, capsys):
    (tmp_path / "a-file").write_text("x")
    assert main(["eval", "Fleet", str(fleet), "--out", str(tmp_path / "a-file")]) == 2
    assert "--out" in capsys.readouterr().err and scripted_llm.prompts("answer") == []  # nothing was asked
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--out", str(tmp_path / "a-file" / "run")]) == 2
    assert "cannot be written there" in capsys.readouterr().err


def test_compare_refuses_what_is_not_a_run_and_warns_when_runs_share_no_question(rt, fleet, tmp_path, capsys):
    assert main(["eval", "--compare", str(fleet), str(fleet)]) == 2  # a question file, not a run
    assert "is not an evaluation summary" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"question": "Who drives truck T-3?", "gold_sources": ["trucks.txt"]}]))
    assert main(["eval", "Fleet", str(fleet), "--retrieval-only", "--out", str(tmp_path / "a")]) == 0
    assert main(["eval", "Fleet", str(other), "--retrieval-only", "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "share no question" in capsys.readouterr().err


def test_question_files_with_a_byte_order_mark_unknown_ways_and_gold_names_the_topic_lacks(rt, fleet, tmp_path, capsys):
    bom = tmp_path / "notepad.json"
    bom.write_bytes(
        "\ufeff".encode()
        + json.dumps([{"question": "How often is pump P-7 inspected?", "gold_sources": ["pumps.txt", "pump.txt"]}]).encode()
    )
    assert main(["eval", "Fleet", str(bom), "--retrieval-only", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[-1])["missing_gold_files"] == ["pump.txt"]
    assert "1 gold source(s) match no file of Topic 'Fleet'" in err and "pump.txt" in err
    with pytest.raises(RagTopicsError, match="item 1: expected_way 'BOGUS' is not a way; the ways are DIRECT"):
        parse_questions(json.dumps([{"question": "Who?", "expected_way": "BOGUS"}]))
    with pytest.raises(RagTopicsError, match="cannot read the questions as JSON"):
        parse_questions("not json", "the questions")
