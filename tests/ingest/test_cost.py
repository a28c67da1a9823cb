"""The cost preview against real uploads: chunks of text files exactly, calls by kind for a GraphRAG LLM Topic
within the tolerance, the figures measured after an upload, prices, and a dry run that stores nothing."""

from __future__ import annotations

import json

import pytest
from sqlmodel import select

from ragtopics.documents.uploads import BatchedUploads, get_document
from ragtopics.ingest.cost import DEFAULTS, comparison, estimate_upload, load_figures
from ragtopics.llm.endpoints import save_endpoint
from ragtopics.storage.metadata import DocumentRow, UploadCostRow
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.ui.cli import main
from ragtopics.ui.upload_tab import jobs_html, preview_cost
from tests.scripted_llm import capitalised_entities

#: How far the estimated calls of a kind may be from the real ones.
TOLERANCE = 0.25

MANUAL = "\n\n".join(f"Section {i}. Valve V-{i} of Pump Station {chr(65 + i % 26)} is serviced every {i + 2} months "
                     f"by the Northern Maintenance Crew, who log it in Ledger {i}." for i in range(30)).encode()  # fmt: skip
NOTES = ("# Field notes\n\n" + "\n\n".join(f"## Day {i}\n\nThe Harbour Master of Kirkwall checked Buoy {i} "
                                           f"and wrote to Lerwick about Beacon {i}." for i in range(20))).encode()  # fmt: skip


def upload_all(rt, topic, files):
    with BatchedUploads(rt, topic) as uploads:
        return [uploads.add(name, data) for name, data in files]


def test_the_chunks_of_text_files_are_estimated_exactly_and_kept_beside_the_real_count(rt, run_jobs):
    topic = create_topic(rt, "Manuals", settings={"chunk_size": 300, "chunk_overlap": 30, "file_types": "txt,md,pdf"})
    files = [("manual.txt", MANUAL), ("notes.md", NOTES)]
    estimate = estimate_upload(rt, topic, [*files, ("scan.pdf", b"%PDF-1.4 " + b"x" * 50000), ("photo.png", b"\x89PNG")])

    rows = upload_all(rt, topic, files)
    run_jobs()

    real = {r.file_name: get_document(rt, r.id).chunk_count for r in rows}
    by_name = {f.file_name: f for f in estimate.files}
    assert {n: by_name[n].chunks for n in real} == {n: float(c) for n, c in real.items()} and all(real.values())
    assert by_name["manual.txt"].method == "chunked" and by_name["scan.pdf"].method == "from size"
    assert by_name["scan.pdf"].chunks >= 1 and "does not accept .png" in by_name["photo.png"].refused
    assert estimate.calls == {}  # RAG defaults: no model call at upload, only embeddings
    assert estimate.chunks == sum(real.values()) + by_name["scan.pdf"].chunks
    kept = comparison(rt, [r.job_id for r in rows])
    assert {e["file_name"]: (e["estimate"]["chunks"], e["actual"]["chunks"]) for e in kept.values()} == {
        n: (float(c), c) for n, c in real.items()}  # fmt: skip
    bars = jobs_html(rt, [(r.job_id, r.file_name, r.id) for r in rows])  # the Upload tab's finished rows
    n = real["manual.txt"]
    assert f"indexed · {n} chunks</span>" in bars and f"estimated {n} chunks, 0 calls · actual {n} chunks, 0 calls</div>" in bars


def test_the_upload_tabs_preview_shows_the_estimate_of_the_chosen_files(rt, tmp_path):
    create_topic(rt, "Previewed", settings={"keyword_enrichment": "LLM", "chunk_size": 300, "chunk_overlap": 0})
    (tmp_path / "manual.txt").write_bytes(MANUAL)
    shown = preview_cost(rt, "Previewed", [str(tmp_path / "manual.txt")])
    chunks = estimate_upload(rt, get_topic(rt, "Previewed"), [("manual.txt", MANUAL)]).chunks
    assert shown.startswith(f"**Cost estimate** for 1 file(s): **{chunks:.0f} chunks** (1 chunked now, 0 estimated from size)")
    assert f"| LLM keywords | {chunks:.0f} |" in shown and "no price entered" in shown
    assert preview_cost(rt, "Previewed", []) == "Choose one or more files first."
    assert preview_cost(rt, "Nowhere", [str(tmp_path / "manual.txt")]).startswith("**No estimate:**")


def test_calls_by_kind_of_a_graphrag_llm_topic_match_a_real_upload(rt, run_jobs, scripted_llm):
    scripted_llm.replies["graph_extraction"] = capitalised_entities
    scripted_llm.replies["deduplication"] = json.dumps({"decisions": []})
    topic = create_topic(rt, "Harbours", kind="graphrag",
                         settings={"graph_extraction_method": "LLM", "chunk_size": 250, "chunk_overlap": 0})  # fmt: skip
    files = [("manual.txt", MANUAL), ("notes.md", NOTES)]
    estimate = estimate_upload(rt, topic, files)
    assert set(estimate.calls) == {"graph_extraction", "deduplication", "community_report"}
    assert not any(c.measured for c in estimate.calls.values())  # nothing measured on a new installation

    rows = upload_all(rt, topic, files)
    run_jobs()

    assert all(get_document(rt, r.id).status == "indexed" for r in rows)
    real_calls = len(scripted_llm.prompts("graph_extraction"))
    assert abs(estimate.calls["graph_extraction"].calls - real_calls) <= TOLERANCE * real_calls
    assert estimate.chunks == sum(get_document(rt, r.id).chunk_count for r in rows)
    kept = comparison(rt, [r.job_id for r in rows])
    assert sum(e["actual"]["calls"]["graph_extraction"] for e in kept.values()) == real_calls
    assert sum(e["actual"]["tokens_in"] for e in kept.values()) > 0

    # The figures now hold what this installation measured: a second estimate uses them.
    figures = load_figures(rt)
    row = figures.rows["call:graph_extraction"]
    assert row.count == real_calls and row.units == estimate.chunks and row.tokens_in > 0 and row.samples == 2
    assert figures.per_call("graph_extraction")[0] == pytest.approx(row.tokens_in / row.count)
    dedup = figures.rows["call:deduplication:graphrag-llm"]  # measured per extraction method
    assert dedup.count == len(scripted_llm.prompts("deduplication")) and dedup.units == estimate.chunks
    again = estimate_upload(rt, topic, files)
    assert again.calls["graph_extraction"].measured
    assert again.calls["graph_extraction"].tokens_in == pytest.approx(again.calls["graph_extraction"].calls * row.tokens_in / row.count)
    assert abs(again.calls["deduplication"].calls - dedup.count) <= max(1, TOLERANCE * dedup.count)


def test_money_only_for_roles_with_a_price(rt):
    topic = create_topic(rt, "Priced", settings={"chunking_strategy": "SEMANTIC", "chunk_size": 300, "chunk_overlap": 0})
    estimate = estimate_upload(rt, topic, [("manual.txt", MANUAL)])
    assert estimate.cost is None and estimate.calls["context_line"].cost is None
    assert estimate.calls["context_line"].calls == estimate.chunks > 0
    assert estimate.calls["context_line"].tokens_out == estimate.chunks * DEFAULTS["context_line"].tokens_out

    save_endpoint(rt, "language_model", base_url=rt.settings.llm_base_url, model="scripted", api_key=None,
                  supports_tools=False, supports_images=False, price_in_per_mtok=2.0, price_out_per_mtok=8.0)  # fmt: skip
    priced = estimate_upload(rt, topic, [("manual.txt", MANUAL)])
    line = priced.calls["context_line"]
    assert line.cost == pytest.approx((line.tokens_in * 2.0 + line.tokens_out * 8.0) / 1e6)
    assert priced.to_dict()["cost"] == round(line.cost, 4) and "Cost estimate" in priced.to_markdown()


def test_a_dry_run_prints_the_estimate_and_stores_nothing(rt, tmp_path, capsys):
    main(["topic", "create", "Dry", "--kind", "graphrag", "--set", "graph_extraction_method=LLM"])
    capsys.readouterr()
    (tmp_path / "manual.txt").write_bytes(MANUAL)
    keys_before = set(rt.redis.keys("*"))

    assert main(["ingest", "Dry", str(tmp_path / "manual.txt"), "--dry-run", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["chunks"] >= 1 and shown["calls"]["graph_extraction"]["calls"] == shown["chunks"]
    assert set(shown["calls"]["graph_extraction"]) >= {"calls", "tokens_in", "tokens_out", "seconds", "cost", "measured"}
    assert main(["ingest", "Dry", str(tmp_path / "manual.txt"), "--dry-run"]) == 0
    assert "nothing was stored" in capsys.readouterr().out

    assert set(rt.redis.keys("*")) == keys_before  # no job, no chunk, no key of any kind
    with rt.metadata.session() as s:
        assert s.exec(select(DocumentRow)).all() == [] and s.exec(select(UploadCostRow)).all() == []
    assert not (rt.settings.data_dir / "blobs").exists() or not any((rt.settings.data_dir / "blobs").rglob("*.txt"))
