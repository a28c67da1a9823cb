"""A GraphRAG upload through the real queue and worker: extraction fanned out into jobs, the graph written
with provenance, a delete that keeps shared entities, an edited re-upload that extracts only changed chunks,
resumption after a killed worker, and the community rebuild job."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from rq.job import Job

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.lifecycle import recompute_due
from ragtopics.graph.refresh import enqueue_rebuild, next_refresh, run_rebuild, schedule_refresh
from ragtopics.graph.report import entity_info, graph_stats
from ragtopics.jobs.queue import job_progress, queue_for
from ragtopics.topics.topics import create_topic, get_topic, update_settings
from tests.scripted_llm import capitalised_entities

ROOT = Path(__file__).resolve().parents[2]
NLP = {"graph_extraction_method": "NLP", "chunk_size": 120, "chunk_overlap": 0}
LLM = {"graph_extraction_method": "LLM", "chunk_size": 100, "chunk_overlap": 0}

CURIE = (
    "Marie Curie was a physicist who worked in Paris at the University of Paris.\n\n"
    "Pierre Curie shared the Nobel Prize in Physics with Marie Curie and Henri Becquerel."
)
EINSTEIN = (
    "Albert Einstein visited Paris in 1922 and lectured at the Collège de France.\n\n"
    "Albert Einstein received the Nobel Prize in Physics in 1921 while living in Berlin."
)


def paragraphs(words: list[str]) -> bytes:
    return "\n\n".join(
        f"Paragraph {i} is about {w} and how {w} relates to nothing else at all." for i, w in enumerate(words)
    ).encode()


WORDS = ["Alderney", "Brecqhou", "Caldey", "Dursey", "Eriskay", "Fetlar"]


def test_an_nlp_upload_fans_out_into_extraction_jobs_and_writes_the_graph_with_provenance(rt, run_jobs):
    topic = create_topic(rt, "Physicists", kind="graphrag", settings=NLP)
    curie = upload_file(rt, topic, "curie.txt", CURIE.encode())
    einstein = upload_file(rt, topic, "einstein.txt", EINSTEIN.encode())
    run_jobs()

    for doc in (curie, einstein):
        row = get_document(rt, doc.id)
        assert row.status == "indexed", row.error
        progress = job_progress(rt, doc.job_id)
        assert progress.status == "finished" and progress.result["status"] == "indexed"
        assert Job.fetch(f"{doc.job_id}-x0", connection=rt.redis).return_value()["extracted"] >= 1
        graph = row.indexed_with["graph"]
        assert graph["method"] == "NLP" and graph["chunks_extracted"] == row.chunk_count and graph["entities"] > 0
    stats = graph_stats(rt, get_topic(rt, topic.id))
    assert stats["entities"] > 5 and stats["relationships"] > 0 and stats["documents"] == 2 and stats["chunks"] == 4
    assert stats["recompute_due"] in ("einstein.txt was uploaded and 1 other change", "curie.txt was uploaded and 1 other change")

    chunks = {d.id: set(rt.chunk_index(topic.id).document_chunk_ids(d.id)) for d in (curie, einstein)}
    paris = entity_info(rt, topic, "Paris")
    assert set(paris["chunk_ids"]) & chunks[curie.id] and set(paris["chunk_ids"]) & chunks[einstein.id]
    hits = graph_store(rt, topic).search_entities_text(["Becquerel"], 5)  # Local Keyword Search is on by default
    assert hits and hits[0][0].name == "Henri Becquerel" and hits[0][1] > 0
    einstein_entity = entity_info(rt, topic, "Albert Einstein")
    assert set(einstein_entity["chunk_ids"]) <= chunks[einstein.id]

    # Delete: the shared entity stays with the other file's chunks only, the orphan goes.
    deletion = delete_document(rt, topic, "einstein.txt")
    assert deletion["entities"] >= 1 and deletion["entities_kept"] >= 1
    assert set(entity_info(rt, topic, "Paris")["chunk_ids"]) <= chunks[curie.id]
    assert graph_store(rt, topic).entity_by_name("Albert Einstein") is None
    assert recompute_due(rt, topic.id) == "einstein.txt was deleted and 2 other changes"  # two uploads before it


def test_an_edited_re_upload_extracts_only_the_changed_chunk(rt, run_jobs, scripted_llm):
    scripted_llm.replies["graph_extraction"] = capitalised_entities
    topic = create_topic(rt, "Islands", kind="graphrag", settings=LLM)
    doc = upload_file(rt, topic, "islands.txt", paragraphs(WORDS))
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and row.chunk_count == len(WORDS)
    assert len(scripted_llm.prompts("graph_extraction")) == len(WORDS)  # exactly one call per chunk
    assert graph_store(rt, topic).entity_by_name("Caldey") is not None

    edited = [*WORDS[:2], "Canna", *WORDS[3:]]
    upload_file(rt, topic, "islands.txt", paragraphs(edited))
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error
    assert len(scripted_llm.prompts("graph_extraction")) == len(WORDS) + 1  # only the edited paragraph
    assert row.indexed_with["graph"]["chunks_extracted"] == 1 and row.indexed_with["graph"]["chunks_cached"] == 5
    store = graph_store(rt, topic)
    assert store.entity_by_name("Caldey") is None and store.entity_by_name("Canna") is not None
    assert store.entity_by_name("Dursey") is not None
    assert store.stats()["chunks"] == len(WORDS)


def test_a_failed_extraction_stores_the_chunk_without_entities(rt, run_jobs, scripted_llm):
    scripted_llm.replies["graph_extraction"] = lambda body: (
        "not JSON" if "Caldey" in body["messages"][-1]["content"] else capitalised_entities(body)
    )
    topic = create_topic(rt, "Failing", kind="graphrag", settings=LLM)
    doc = upload_file(rt, topic, "islands.txt", paragraphs(WORDS))
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and row.chunk_count == len(WORDS)
    assert "graph extraction failed for 1 chunk(s)" in row.warning
    assert row.indexed_with["graph"]["chunks_failed"] == 1
    store = graph_store(rt, topic)
    assert store.stats()["chunks"] == len(WORDS) and store.entity_by_name("Caldey") is None
    assert store.entity_by_name("Dursey") is not None


def test_a_killed_worker_does_not_extract_finished_chunks_again(rt, settings, reconfigure, run_jobs, scripted_llm):
    def slow(body: dict) -> str:
        time.sleep(0.4)
        return capitalised_entities(body)

    scripted_llm.replies["graph_extraction"] = slow
    reconfigure(EXTRACTION_BATCH_CHUNKS=3)
    topic = create_topic(rt, "Killed", kind="graphrag", settings=LLM)
    doc = upload_file(rt, topic, "islands.txt", paragraphs(WORDS))
    env = {
        **os.environ,
        "REDIS_URL": settings.effective_redis_url,
        "RAGTOPICS_DATA_DIR": str(settings.data_dir),
        "RQ_QUEUE": settings.queue_name,
        "LOG_LEVEL": "WARNING",
        "LLM_BASE_URL": scripted_llm.base_url,
        "LLM_MODEL": "scripted",
        "EXTRACTION_BATCH_CHUNKS": "3",
    }
    # Its own session: the kill takes rq's scheduler process with it, as a container stop would.
    worker = subprocess.Popen([sys.executable, "-m", "ragtopics.ui.cli", "worker"], cwd=ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(scripted_llm.prompts("graph_extraction")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(scripted_llm.prompts("graph_extraction")) >= 2
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    before = len(scripted_llm.prompts("graph_extraction"))
    assert before < len(WORDS)
    # What rq does once a dead worker's job misses its heartbeat: the job fails, and its Retry re-queues it.
    queue = queue_for(rt)
    queue.started_job_registry.cleanup(timestamp=time.time() + 10 * 24 * 3600)
    run_jobs()

    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error
    calls = len(scripted_llm.prompts("graph_extraction"))
    assert calls - before <= len(WORDS) - before + 1  # at most the chunk in flight is asked twice
    assert calls <= len(WORDS) + 1
    assert graph_store(rt, topic).stats()["chunks"] == len(WORDS)
    assert all(graph_store(rt, topic).entity_by_name(w) is not None for w in WORDS)


def test_the_community_rebuild_job_writes_reports_and_clears_the_due_mark(rt, run_jobs, scripted_llm):
    scripted_llm.replies["community_report"] = json.dumps({"title": "Physicists in Paris", "summary": "They met in Paris."})
    topic = create_topic(rt, "Rebuilt", kind="graphrag", settings=NLP)
    upload_file(rt, topic, "curie.txt", CURIE.encode())
    upload_file(rt, topic, "einstein.txt", EINSTEIN.encode())
    run_jobs()
    assert recompute_due(rt, topic.id)
    job_id = enqueue_rebuild(rt, topic)
    assert enqueue_rebuild(rt, topic) == job_id  # one rebuild per Topic at a time
    run_jobs()
    progress = job_progress(rt, job_id)
    assert progress.status == "finished" and progress.result["status"] == "done", progress.error
    assert progress.result["written"] >= 1 and progress.result["kept"] == 0
    assert progress.result["model_calls"] == progress.result["written"] and progress.result["method"] == "model"
    stats = graph_stats(rt, topic)
    assert stats["summaries"] == progress.result["written"] and stats["last_run"]["written"] == progress.result["written"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stats["last_run"]["finished"])
    assert stats["recompute_due"] == ""
    paris = entity_info(rt, topic, "Paris")
    assert paris["communities"] and paris["communities"][0]["size"] >= 2

    again = run_rebuild(rt, topic.id)  # nothing changed: every report kept, no model call
    assert again["written"] == 0 and again["kept"] == progress.result["written"] and again["deleted"] == 0
    assert again["model_calls"] == 0 and len(scripted_llm.prompts("community_report")) == progress.result["written"]


def test_the_refresh_cycle_is_an_rq_scheduled_job_that_follows_the_setting(rt):
    topic = create_topic(rt, "Cycled", kind="graphrag", settings={**NLP, "refresh_cycle": "6h"})
    registry = queue_for(rt).scheduled_job_registry
    [job_id] = registry.get_job_ids()
    assert 6 * 3600 - 60 < next_refresh(rt, topic.id) - time.time() <= 6 * 3600
    update_settings(rt, topic.id, {"refresh_cycle": "30m"})
    [job_id2] = registry.get_job_ids()
    assert job_id2 != job_id and 1700 < next_refresh(rt, topic.id) - time.time() <= 1800
    assert Job.fetch(job_id2, connection=rt.redis).kwargs == {"reason": "refresh cycle"}
    update_settings(rt, topic.id, {"refresh_cycle": "off"})
    assert registry.get_job_ids() == [] and next_refresh(rt, topic.id) is None
    assert schedule_refresh(rt, get_topic(rt, topic.id)) is None


def test_a_refresh_cycle_run_schedules_the_next_one(rt, run_jobs):
    topic = create_topic(rt, "Cycling", kind="graphrag", settings={**NLP, "refresh_cycle": "1d"})
    upload_file(rt, topic, "curie.txt", CURIE.encode())
    run_jobs()
    registry = queue_for(rt).scheduled_job_registry
    [first] = registry.get_job_ids()
    result = run_rebuild(rt, topic.id, reason="refresh cycle")
    assert result["status"] == "done" and result["written"] >= 1
    [second] = registry.get_job_ids()  # rq keeps whole seconds: the new due time may equal the old one
    assert second != first and next_refresh(rt, topic.id) - time.time() > 86400 - 60


def curie_docx() -> bytes:
    from tests.ingest.test_docling import png_bytes
    from tests.ingest.test_docling_chunks import docx_bytes

    def build(document):
        document.add_paragraph("Marie Curie worked with Pierre Curie in Paris on radioactivity for many years.")
        document.add_picture(io.BytesIO(png_bytes((200, 30, 30))))
        document.add_paragraph("Figure 1: Marie Curie in her laboratory")

    return docx_bytes(build)


def test_picture_in_the_graph_links_an_image_node_to_the_entities_its_caption_names(rt, run_jobs):
    topic = create_topic(rt, "Pictured", kind="graphrag", settings={**NLP, "chunk_size": 1000, "file_types": "docx"})
    doc = upload_file(rt, topic, "curie.docx", curie_docx())
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed", get_document(rt, doc.id).error
    store = graph_store(rt, topic)
    assert store.stats()["images"] == 1
    marie, pierre = store.entity_by_name("Marie Curie"), store.entity_by_name("Pierre Curie")
    shown = store.images_of([marie.id, pierre.id])
    assert len(shown.get(marie.id, [])) == 1 and pierre.id not in shown  # the caption names Marie Curie only

    delete_document(rt, topic, "curie.docx")
    assert store.stats()["images"] == 0


def test_picture_handling_ignore_stores_no_picture_and_no_image_node(rt, run_jobs):
    topic = create_topic(
        rt,
        "Unpictured",
        kind="graphrag",
        settings={**NLP, "chunk_size": 1000, "file_types": "docx", "picture_handling": "IGNORE"},
    )
    doc = upload_file(rt, topic, "curie.docx", curie_docx())
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and row.indexed_with["pictures"] == 0
    assert graph_store(rt, topic).stats()["images"] == 0


def test_with_a_vision_model_the_image_describer_decides_what_a_picture_shows(rt, reconfigure, run_jobs, scripted_llm):
    reconfigure(LLM_SUPPORTS_IMAGES=True)
    scripted_llm.replies["describe_picture"] = "A woman and a man working at a laboratory bench."
    scripted_llm.replies["picture_entities"] = json.dumps({"names": ["Pierre Curie", "Marie Curie"]})
    topic = create_topic(rt, "Seen", kind="graphrag", settings={**NLP, "chunk_size": 1000, "file_types": "docx"})
    doc = upload_file(rt, topic, "curie.docx", curie_docx())
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed", get_document(rt, doc.id).error
    [asked] = scripted_llm.prompts("picture_entities")
    offered = asked["messages"][-1]["content"][0]["text"]
    assert "Pierre Curie" in offered and asked["messages"][-1]["content"][1]["type"] == "image_url"
    store = graph_store(rt, topic)
    pierre = store.entity_by_name("Pierre Curie")
    assert len(store.images_of([pierre.id])[pierre.id]) == 1


def test_a_stopped_upload_stops_between_batches_of_entity_embeddings(rt, monkeypatch):
    import numpy as np
    import pytest

    from ragtopics.errors import SupersededError
    from ragtopics.graph import ingest
    from ragtopics.storage.chunk_index import ChunkRecord
    from ragtopics.tracing.trace import Trace

    topic = create_topic(rt, "Stopped", kind="graphrag", settings=NLP)
    records = [
        ChunkRecord(f"chunk-s{n}", "doc-s", "curie.txt", n, text, np.zeros(384, dtype=np.float32))
        for n, text in enumerate(CURIE.split("\n\n"))
    ]
    monkeypatch.setattr(ingest, "ENTITY_EMBED_BATCH", 2)
    embedded: list[int] = []
    real_embed = rt.gateway.embed
    monkeypatch.setattr(
        rt.gateway,
        "embed",
        lambda texts, **kw: (kw.get("purpose") == "entity embedding" and embedded.append(len(texts))) or real_embed(texts, **kw),
    )  # the names are embedded in a thread of their own, beside the deduplication's embeddings
    seen: list[tuple[str, int]] = []

    def report(phase: str, done: int, total: int) -> None:
        seen.append((phase, done))
        if phase == "embedding entities" and done >= 4:  # a delete lands during the embedding
            raise SupersededError("cancelled: the document was deleted")

    with pytest.raises(SupersededError):
        ingest.plan_graph(rt, topic, records, report, Trace("upload", "curie.txt"))
    assert [d for p, d in seen if p == "embedding entities"] == [0, 2, 4] and embedded == [2, 2]
