"""The Knowledge graph panel of the Upload tab against the real stores and queue, and once in headless Chromium."""

from __future__ import annotations

import json
import re

from rq import SimpleWorker

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import list_documents, upload_file
from ragtopics.graph.report import graph_stats
from ragtopics.jobs.queue import JobProgress, phase_text, queue_for
from ragtopics.settings.env import LOCAL_MODEL_NAME
from ragtopics.topics.delete import delete_topic
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.ui.graph_panel import last_run_text, progress_html, rebuild_progress_html, render, start_recompute
from ragtopics.ui.upload_tab import documents_table, jobs_html
from tests.ui.test_browser import page  # noqa: F401 - the console in headless Chromium (skipped without Chromium)

NLP = {"graph_extraction_method": "NLP", "chunk_size": 120, "chunk_overlap": 0}
CURIE = (
    b"Marie Curie was a physicist who worked in Paris at the University of Paris.\n\n"
    b"Pierre Curie shared the Nobel Prize in Physics with Marie Curie and Henri Becquerel."
)
REPORT = json.dumps({"title": "Physicists in Paris", "summary": "Marie and Pierre Curie worked in Paris."})


def graph_topic(rt, run_jobs, name: str = "Physicists"):
    topic = create_topic(rt, name, kind="graphrag", settings=NLP)
    upload_file(rt, topic, "curie.txt", CURIE)
    run_jobs()
    return topic


def test_the_panel_is_hidden_for_a_rag_topic_and_recompute_says_why(rt):
    create_topic(rt, "Plain")
    assert render(rt, "Plain") == (False, "")
    assert render(rt, None) == (False, "")
    message, job_id = start_recompute(rt, "Plain")
    assert job_id == "" and message == "**Not started:** Topic 'Plain' is a rag Topic; only GraphRAG Topics have a graph"


def test_the_panel_shows_counts_and_the_due_notice_after_an_upload(rt, run_jobs):
    topic = graph_topic(rt, run_jobs)
    stats = graph_stats(rt, topic)
    visible, text = render(rt, "Physicists")
    assert visible and stats["entities"] > 3
    assert (
        f"**1 document · {stats['chunks']} chunks · {stats['entities']} entities · "
        f"{stats['relationships']} relationships · 0 communities · 0 summaries**"
    ) in text
    assert "⚠️ <b>Recompute due:</b> curie.txt was uploaded: run Recompute Communities Now</div>" in text
    assert "**Last community run:** none yet." in text
    next_run = r"\*\*Next Refresh Cycle run:\*\* \d{4}-\d\d-\d\d \d\d:\d\d, in 23 h \d+ min \(Refresh Cycle every 1d\)"
    assert re.search(next_run, text), text


def test_recompute_communities_now_shows_progress_then_the_last_run(rt, run_jobs, scripted_llm):
    scripted_llm.replies["community_report"] = REPORT
    graph_topic(rt, run_jobs)
    message, job_id = start_recompute(rt, "Physicists")
    assert message == "Recompute Communities Now: rebuild of **Physicists** enqueued." and job_id
    assert "queued · waiting for the worker" in rebuild_progress_html(rt, job_id)
    assert start_recompute(rt, "Physicists")[1] == job_id  # a second click follows the same rebuild

    run_jobs()
    bar = rebuild_progress_html(rt, job_id)
    run = graph_stats(rt, get_topic(rt, "Physicists"))["last_run"]
    assert 'data-state="done"' in bar and f"finished · {run['written']} written, 0 kept, 0 deleted" in bar
    _, text = render(rt, "Physicists")
    assert "Recompute due" not in text
    assert f"{run['communities']} communities · {run['written']} summaries**" in text and run["written"] >= 1
    assert (
        "**Last community run:** " in text
        and f"· {run['written']} written, 0 kept, 0 deleted · {run['written']} model call" in text
        and "reports written by the Community Report model" in text
    )
    assert re.search(r"\*\*Last community run:\*\* \d{4}-\d\d-\d\d \d\d:\d\d, under a minute ago · ", text), text

    delete_document(rt, get_topic(rt, "Physicists"), "curie.txt")
    _, text = render(rt, "Physicists")
    assert "⚠️ <b>Recompute due:</b> curie.txt was deleted: run Recompute Communities Now</div>" in text


def test_with_the_bundled_model_the_reports_are_built_from_the_graph(rt, run_jobs, scripted_llm, reconfigure):
    graph_topic(rt, run_jobs)
    reconfigure(LLM_MODEL=LOCAL_MODEL_NAME)  # the Community Report role falls back to the bundled model
    _, job_id = start_recompute(rt, "Physicists")
    run_jobs()
    assert "finished ·" in rebuild_progress_html(rt, job_id) and "0 model calls" in rebuild_progress_html(rt, job_id)
    _, text = render(rt, "Physicists")
    assert "0 model calls" in text and "reports built from the graph (the bundled model is too small to summarise)" in text
    assert scripted_llm.prompts("community_report") == []


def test_a_failed_rebuild_reads_as_a_clear_message(rt, run_jobs):
    graph_topic(rt, run_jobs)
    _, job_id = start_recompute(rt, "Physicists")
    delete_topic(rt, "Physicists")  # the job then finds no Topic
    run_jobs()
    bar = rebuild_progress_html(rt, job_id)
    assert 'data-state="failed"' in bar and "failed: " in bar, bar


def test_the_documents_list_summarises_what_a_graphrag_document_added(rt, run_jobs):
    topic = graph_topic(rt, run_jobs)
    [row] = documents_table(rt, "Physicists")
    [doc] = list_documents(rt, topic)
    graph = doc.indexed_with["graph"]
    assert row[4].endswith(
        f" · graph: NLP, {graph['entities']} entities, {graph['relationships']} relationships, "
        f"{graph['chunks_extracted']} extracted / 0 cached"
    )
    assert graph["chunks_extracted"] == row[2] >= 2


def test_phases_read_as_words_with_their_counts():
    assert phase_text("extracting", 12, 40) == "extracting graph 12/40 chunks"
    assert phase_text("embedding", 3, 10) == "embedding 3/10"
    assert phase_text("reading", 0, 0) == "reading"
    assert last_run_text(None).startswith("**Last community run:** none yet.")
    running = progress_html(JobProgress("job-1", "started", "reports", 1, 3))
    assert "writing community reports 1/3" in running and 'data-state=""' in running and "width:33%" in running


def test_a_user_recomputes_communities_in_the_console(page, rt, run_jobs, scripted_llm, tmp_path):
    scripted_llm.replies["community_report"] = REPORT
    graph_topic(rt, run_jobs, "Graph Topic")
    create_topic(rt, "Plain Topic")
    page.reload()
    page.get_by_role("tab", name="Upload").click()
    page.locator("#upload-topic input").click()
    page.get_by_role("option", name="Graph Topic").click()
    stats = page.locator("#graph-stats")
    stats.get_by_text("Recompute due: curie.txt was uploaded").wait_for(timeout=10000)
    assert "1 document" in stats.inner_text() and "0 summaries" in stats.inner_text()
    page.locator("#documents >> text=graph: NLP >> visible=true").first.wait_for()
    page.screenshot(path=tmp_path / "graph-panel-due.png", full_page=True)

    page.get_by_role("button", name="Recompute Communities Now").click()
    page.get_by_text("rebuild of Graph Topic enqueued").wait_for(timeout=10000)
    page.locator("#graph-recompute-progress").get_by_text("queued · waiting for the worker").wait_for()
    run_jobs()
    page.locator("#graph-recompute-progress").get_by_text("finished ·").wait_for(timeout=10000)
    stats.get_by_text("reports written by the Community Report model").wait_for(timeout=10000)
    assert "Recompute due" not in stats.inner_text() and "0 summaries" not in stats.inner_text()
    page.screenshot(path=tmp_path / "graph-panel-done.png", full_page=True)

    page.locator("#upload-topic input").click()
    page.get_by_role("option", name="Plain Topic").click()
    page.locator("#graph-panel").wait_for(state="hidden", timeout=10000)


def test_an_upload_waiting_for_its_graph_extraction_reads_extracting_graph(rt, run_jobs):
    topic = create_topic(rt, "Extracting", kind="graphrag", settings=NLP)
    doc = upload_file(rt, topic, "curie.txt", CURIE)
    SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, max_jobs=1, logging_level="WARNING")  # the ingest only
    assert "extracting graph 0/2 chunks" in jobs_html(rt, [(doc.job_id, "curie.txt")])
    run_jobs()
    assert "indexed · 2 chunks" in jobs_html(rt, [(doc.job_id, "curie.txt")])


def test_time_ahead_is_never_rounded_up_to_the_next_unit():
    from ragtopics.ui.graph_panel import when_text

    now = 1_800_000_000.0
    assert when_text(now + 86400 - 0.4, now).endswith("in 23 h 59 min")
    assert when_text(now + 86400, now).endswith("in 1 d 0 h")
    assert when_text(now - 61, now).endswith("1 min ago") and when_text(now + 30, now).endswith("in under a minute")


def test_the_documents_list_shows_a_graph_import_next_to_an_upload(rt, run_jobs):
    from ragtopics.graph.graph_ingestion import ingest_graph, parse_nodes_edges_json

    topic = graph_topic(rt, run_jobs)
    data = {
        "nodes": [{"id": "a", "name": "Pump P-12"}, {"id": "b", "name": "Cooling Loop"}],
        "edges": [{"source": "a", "target": "b", "description": "feeds"}],
    }
    ingest_graph(rt, topic, "plant.json", parse_nodes_edges_json(json.dumps(data).encode()))
    rows = {row[0]: row for row in documents_table(rt, "Physicists")}
    assert len(rows) == 2 and rows["plant.json (graph ingestion)"][1] == "indexed"
    assert rows["plant.json (graph ingestion)"][4].startswith("graph ingestion (json) · 2 nodes, 1 edges · graph: ")
