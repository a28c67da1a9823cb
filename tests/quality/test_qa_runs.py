"""Evaluation runs from the console: queued, run by the worker, saved, reopened and compared."""

from __future__ import annotations

import csv
import json
import re

import pytest
from gradio_client import Client

from ragtopics.errors import NotFoundError, RagTopicsError
from ragtopics.jobs.queue import job_progress
from ragtopics.quality.runs import list_runs, load_run, run_path, start_run
from ragtopics.ui.app import launch_console
from ragtopics.ui.qa_tab import compare_html, question_rows, summary_html
from tests.conftest import free_port
from tests.quality.conftest import QUESTIONS

TEXT = json.dumps(QUESTIONS)


def test_a_run_is_queued_saved_and_reopened(rt, fleet, run_jobs):
    run_id = start_run(rt, "Fleet", TEXT, assignments=["top_k_results=1"], retrieval_only=True)
    assert job_progress(rt, run_id).status == "queued"
    info, questions = load_run(rt, run_id)
    assert info.summary is None and questions == [] and info.questions == 3 and info.settings_changed == {"top_k_results": "1"}
    assert "Not finished yet" in summary_html(info)
    run_jobs()
    assert job_progress(rt, run_id).status == "finished"
    info, questions = load_run(rt, run_id)
    assert info.summary["n"] == 3 and info.summary["recall@1"] == 1.0 and info.summary["way_accuracy"] == 1.0
    assert all(len(q["files"]) == 1 for q in questions)  # the run's own Top-K, the Topic's settings untouched
    rows = question_rows(questions)
    assert rows[0][:2] == ["How often is pump P-7 inspected?", "SEARCH"] and rows[0][5] == "pumps.txt"
    html = summary_html(info)
    assert "recall@5" in html and "top_k_results=1" in html and "SEARCH 3" in html
    csv_rows = list(csv.reader(rt.blobs.read(run_path(run_id, "questions.csv")).decode().splitlines()))
    assert csv_rows[2][0].startswith("'=HYPERLINK")  # never a formula when opened in a spreadsheet
    assert [r.run_id for r in list_runs(rt)] == [run_id]


def test_two_runs_compared_show_the_metric_changes_and_the_changed_questions(rt, fleet, run_jobs, scripted_llm):
    a = start_run(rt, "Fleet", TEXT)
    b = start_run(rt, "Fleet", TEXT, route="direct")
    run_jobs()
    page = compare_html(*load_run(rt, a), *load_run(rt, b))
    assert "3 question(s) changed" in page and "way: SEARCH → DIRECT" in page and "-1.000" in page
    scripted_llm.replies["answer"] = "Every 90 days [S1]."
    scripted_llm.replies["source_check"] = json.dumps({"used": True})
    answered = start_run(rt, "Fleet", TEXT, retrieval_only=False)
    run_jobs()
    page = compare_html(*load_run(rt, a), *load_run(rt, answered))  # answer metrics exist in run B only
    assert re.search(r"<td>exact_match</td><td>—</td><td>[0-9.]+</td><td[^>]*>—</td>", page)


@pytest.mark.parametrize(
    ("kwargs", "text", "message"),
    [
        ({}, "not json", "cannot read the questions as JSON"),
        ({}, json.dumps([{"answer": "x"}]), "item 1 has no question"),
        ({"assignments": ["top_k=3"]}, TEXT, "top_k: unknown setting"),
        ({"assignments": ["top_k_results=0"]}, TEXT, "top_k_results"),
        ({"route": "GLOBAL"}, TEXT, "a rag Topic has"),
    ],
)
def test_bad_runs_are_refused_before_anything_is_queued(rt, fleet, kwargs, text, message):
    with pytest.raises(RagTopicsError, match=message):
        start_run(rt, "Fleet", text, **kwargs)
    assert list_runs(rt) == []


def test_run_ids_cannot_reach_outside_the_runs_folder(rt):
    for bad in ("../../etc", "eval-x", ""):
        with pytest.raises(NotFoundError):
            load_run(rt, bad)


def test_the_console_starts_a_run_and_shows_it(rt, fleet, run_jobs, tmp_path):
    port = free_port()
    app, _, _ = launch_console(rt, host="127.0.0.1", port=port)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        message = client.predict(
            "Fleet", "routed (as in a chat)", True, None, TEXT, "retrieval_strategy=DENSE", api_name="/start_evaluation"
        )
        run_id = re.fullmatch(r"Queued run `(eval-[0-9a-f-]+)`\.", message).group(1)
        assert load_run(rt, run_id)[0].settings_changed == {"retrieval_strategy": "DENSE"}
        refused = client.predict("Fleet", "routed (as in a chat)", True, None, TEXT, "colour=blue", api_name="/start_evaluation")
        assert refused.startswith("**Not started:**") and "colour" in refused
        run_jobs()
        summary, table, files = client.predict(run_id, api_name="/evaluation_run")
        assert "recall@5" in summary and table["data"][0][1] == "SEARCH"
        assert sorted(f.rsplit("/", 1)[-1] for f in files) == ["questions.csv", "questions.json", "summary.json"]
        page = client.predict(run_id, run_id, api_name="/compare_evaluations")
        assert "0 question(s) changed" in page
    finally:
        app.close()


def test_a_run_that_failed_says_why_and_is_marked_in_the_list(rt, fleet, run_jobs):
    from ragtopics.topics.delete import delete_topic

    run_id = start_run(rt, "Fleet", TEXT)
    delete_topic(rt, "Fleet")  # the Topic goes while its run waits
    run_jobs()
    info, _ = load_run(rt, run_id)
    assert info.summary is None and "Fleet" in info.error and info.label.endswith(f"· failed · {run_id}")
    page = summary_html(info)
    assert "Failed:" in page and "Not finished yet" not in page
