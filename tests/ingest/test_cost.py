"""The cost preview against real uploads: chunks of text files exactly, calls by kind for a GraphRAG LLM Topic
within the tolerance, the figures measured after an upload, prices, and a dry run that stores nothing."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sqlmodel import select

from ragtopics.documents.uploads import BatchedUploads, get_document
from ragtopics.graph.communities import RebuildReport, last_run
from ragtopics.graph.probe import probe_dedup
from ragtopics.graph.refresh import run_rebuild
from ragtopics.ingest.cost import (
    DEFAULTS,
    GraphOutlook,
    comparison,
    dedup_calls,
    estimate_upload,
    fit_hazard,
    graph_outlook,
    load_figures,
    observations,
)
from ragtopics.llm.endpoints import save_endpoint
from ragtopics.storage.metadata import DocumentRow, UploadCostRow
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.ui.cli import main
from ragtopics.ui.upload_tab import jobs_html, preview_cost
from tests.scripted_llm import capitalised_entities

#: How far the estimated calls of a kind may be from the real ones.
TOLERANCE = 0.25

MANUAL = "\n\n".join(
    f"Section {i}. Valve V-{i} of Pump Station {chr(65 + i % 26)} is serviced every {i + 2} months "
    f"by the Northern Maintenance Crew, who log it in Ledger {i}."
    for i in range(30)
).encode()
NOTES = (
    "# Field notes\n\n"
    + "\n\n".join(
        f"## Day {i}\n\nThe Harbour Master of Kirkwall checked Buoy {i} and wrote to Lerwick about Beacon {i}." for i in range(20)
    )
).encode()


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
        n: (float(c), c) for n, c in real.items()
    }
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
    topic = create_topic(
        rt, "Harbours", kind="graphrag", settings={"graph_extraction_method": "LLM", "chunk_size": 250, "chunk_overlap": 0}
    )
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
    seen = observations(rt, "dedup:graphrag-llm")  # each upload's mentions, graph size, unclear pairs, calls
    assert len(seen) == 2 and min(o[1] for o in seen) == 0 and sum(o[3] for o in seen) == dedup.count
    again = estimate_upload(rt, topic, files)
    assert again.calls["graph_extraction"].measured
    assert again.calls["graph_extraction"].tokens_in == pytest.approx(
        again.calls["graph_extraction"].calls * row.tokens_in / row.count
    )


LEDGER = "\n\n".join(
    f"Entry {i}. The Southern Ferry Company moved Cargo {i} from Stromness to Scrabster aboard "
    f"Vessel {chr(65 + i % 26)}, signed by Quartermaster Abernethy."
    for i in range(25)
).encode()


def test_the_estimates_kept_for_an_uploads_files_add_up_to_its_preview(rt, run_jobs, scripted_llm):
    """Each file of an upload is estimated as the next into the graph the earlier ones will have grown: with the
    LLM defaults (the chance of an unclear pair grows with the graph, none in an empty one) the files estimated
    each against the empty graph kept 0 deduplication calls where the preview had shown several."""
    scripted_llm.replies["graph_extraction"] = capitalised_entities
    scripted_llm.replies["deduplication"] = json.dumps({"decisions": []})
    topic = create_topic(
        rt, "Ledgers", kind="graphrag", settings={"graph_extraction_method": "LLM", "chunk_size": 250, "chunk_overlap": 0}
    )
    files = [("manual.txt", MANUAL), ("notes.md", NOTES), ("ledger.txt", LEDGER)]
    preview = estimate_upload(rt, topic, files)
    assert preview.calls["deduplication"].calls > 0.5 and preview.calls["community_report"].calls > 0.5

    rows = upload_all(rt, topic, files)
    kept = [e["estimate"] for e in comparison(rt, [r.job_id for r in rows]).values()]
    assert len(kept) == len(files)
    for kind in ("graph_extraction", "deduplication", "community_report"):
        assert sum(e["calls"][kind] for e in kept) == pytest.approx(preview.calls[kind].calls, abs=0.01 * len(files))
    assert sum(e["chunks"] for e in kept) == preview.chunks
    run_jobs()
    assert all(get_document(rt, r.id).status == "indexed" for r in rows)


def test_the_graphs_figures_measured_by_one_upload_make_the_next_estimate_of_community_reports_exact(rt, run_jobs, scripted_llm):
    """Topic A measures entity mentions, new entities and communities per entity; the same files into an empty Topic B
    then make the same graph (the scripted extraction is deterministic), so B's estimate of community reports is
    A's measured ratio times the entities the files bring: exactly the reports B's rebuild writes."""
    scripted_llm.replies["graph_extraction"] = capitalised_entities
    scripted_llm.replies["deduplication"] = json.dumps({"decisions": []})
    scripted_llm.replies["community_report"] = json.dumps({"title": "A group", "summary": "Things named together."})
    settings = {"graph_extraction_method": "LLM", "chunk_size": 250, "chunk_overlap": 0}
    files = [("manual.txt", MANUAL), ("notes.md", NOTES), ("ledger.txt", LEDGER)]
    first = create_topic(rt, "Harbours A", kind="graphrag", settings=settings)
    upload_all(rt, first, files)
    run_jobs()
    scripted_llm.requests.clear()
    run_rebuild(rt, first.id, reason="test")
    written_a = len(scripted_llm.prompts("community_report"))
    run = last_run(rt.redis, first.id)
    assert written_a == run.written == run.communities - run.skipped_small > 0
    assert 0 < run.half_entities < run.entities and run.half_reportable > 0  # the half graph was grouped too

    figures = load_figures(rt)
    new = figures.rows["graph:new:graphrag-llm"]
    assert new.count == run.entities and new.samples == 3  # from an empty graph every entity was new once
    assert figures.rows["communities:graphrag-llm:1"].count == written_a

    second = create_topic(rt, "Harbours B", kind="graphrag", settings=settings)
    estimate = estimate_upload(rt, second, files)
    assert estimate.calls["community_report"].measured
    assert estimate.calls["community_report"].calls == pytest.approx(written_a)
    upload_all(rt, second, files)
    run_jobs()
    scripted_llm.requests.clear()
    run_rebuild(rt, second.id, reason="test")
    assert len(scripted_llm.prompts("community_report")) == written_a  # the estimate, within rounding

    # A third upload into A: its reports come from A's own rebuild (the half graph's growth), not the ratio.
    outlook = graph_outlook(rt, get_topic(rt, first.id), "graphrag-llm", load_figures(rt))
    assert outlook.last is not None and outlook.entities == run.entities
    assert outlook.reports(run.entities) == 0.0 and outlook.reports(2 * run.entities) > 0


def test_reports_at_the_next_rebuild_follow_the_half_graphs_growth():
    """The formula of GraphOutlook.reports on a rebuild record: R(N) = R0·(N/N0)^β less the stored reports kept."""
    run = RebuildReport(
        written=20,
        kept=0,
        deleted=0,
        communities=25,
        skipped_small=5,
        seconds=0.1,
        entities=100,
        half_entities=50,
        half_reportable=10,
        half_kept=5,
    )
    outlook = GraphOutlook(
        entities=100,
        mentions_per_char=0.02,
        new_per_char=0.02,
        hazard=(0.0, 0.001),
        pairs_per_hazard=1.0,
        reports_per_entity=0.1,
        last=run,
    )
    # β = ln(20/10)/ln(100/50) = 1; a report survives a doubling with 5/10: at 200 entities 40 less 20 · 0.5 kept.
    assert outlook.reports(100) == 0.0
    assert outlook.reports(200) == pytest.approx(40 - 10)
    assert outlook.reports(400) == pytest.approx(80 - 5)
    connected = RebuildReport(
        written=20,
        kept=0,
        deleted=0,
        communities=20,
        skipped_small=0,
        seconds=0.1,
        entities=100,
        half_entities=50,
        half_reportable=20,
        half_kept=0,
    )
    outlook.last = connected  # as many communities at half the size, none kept: every report is written again
    assert outlook.reports(150) == pytest.approx(20)
    outlook.last = None  # no rebuild yet: communities per entity
    assert outlook.reports(300) == pytest.approx(30)


def test_the_deduplication_fit_recovers_the_rate_of_simulated_uploads():
    """Uploads drawn from a known hazard a + b·√N per mention: the maximum-likelihood fit finds it again, and the
    expected calls follow the model's batches (one call per asking upload, a call per 8 pairs on a large one)."""
    rng = np.random.default_rng(7)
    a, b = 0.02, 0.0005  # about as much from the upload's own names as from a graph of 1,600 entities
    mentions = rng.integers(5, 40, size=3000).astype(float)
    graph = rng.uniform(0, 5000, size=3000)
    asked = rng.random(3000) < -np.expm1(-mentions * (a + b * np.sqrt(graph)))
    fitted = fit_hazard([[e, n, float(q), float(q)] for e, n, q in zip(mentions, graph, asked)])
    assert fitted[0] == pytest.approx(a, rel=0.25) and fitted[1] == pytest.approx(b, rel=0.25)
    assert fit_hazard([[10, 100, 0, 0]] * 20) == (0.0, 0.0)  # never asked: no calls expected
    small = dedup_calls(10, 100, (0.001, 0.0), 1.0)
    assert small == pytest.approx(-math.expm1(-0.01))
    assert dedup_calls(1000, 10_000, (0.0, 0.01), 1.0) == pytest.approx(1000 * 0.01 * 100 / 8 + 0.5)


def test_money_only_for_roles_with_a_price(rt):
    topic = create_topic(rt, "Priced", settings={"chunking_strategy": "SEMANTIC", "chunk_size": 300, "chunk_overlap": 0})
    estimate = estimate_upload(rt, topic, [("manual.txt", MANUAL)])
    assert estimate.cost is None and estimate.calls["context_line"].cost is None
    assert estimate.calls["context_line"].calls == estimate.chunks > 0
    assert estimate.calls["context_line"].tokens_out == estimate.chunks * DEFAULTS["context_line"].tokens_out

    save_endpoint(
        rt,
        "language_model",
        base_url=rt.settings.llm_base_url,
        model="scripted",
        api_key=None,
        supports_tools=False,
        supports_images=False,
        price_in_per_mtok=2.0,
        price_out_per_mtok=8.0,
    )
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


def _passage_files(corpus, count: int) -> list[tuple[str, bytes]]:
    return [(f"{title.replace('/', ' ')}.txt", "".join(sentences).encode()) for title, sentences in list(corpus.items())[:count]]


def test_before_anything_is_measured_an_nlp_topics_deduplication_calls_come_from_a_probe_of_the_files(
    rt, run_jobs, scripted_llm, hotpot
):
    """Before any measurement the NLP extraction's deduplication calls came from defaults fitted on other passages
    (17 estimated against 12 made on the benchmark's 50); the preview now runs the files through the extraction and
    the deduplication rules. With a model that merges nothing, the probe decides what the upload asks."""
    scripted_llm.replies["deduplication"] = json.dumps({"decisions": []})
    scripted_llm.replies["community_report"] = json.dumps({"title": "A group", "summary": "Things named together."})
    topic = create_topic(rt, "Passages", kind="graphrag", settings={"graph_extraction_method": "NLP"})
    files = _passage_files(hotpot[0], 40)
    preview = estimate_upload(rt, topic, files)
    assert any("run through the NLP extraction and the deduplication rules" in n for n in preview.notes)
    assert not preview.calls["deduplication"].measured

    # A pair of names from two files is asked about with whichever file is deduplicated second. The probe takes
    # the files in upload order; the upload's extraction jobs may finish in another (with several workers, or
    # when rq releases rate-limited jobs with equal timestamps by job id), so the files are indexed one at a
    # time here, as a single worker given them one by one would.
    rows = []
    with BatchedUploads(rt, topic) as uploads:
        for name, data in files:
            rows.append(uploads.add(name, data))
            run_jobs()
    kept = comparison(rt, [r.job_id for r in rows])
    assert sum(e["estimate"]["calls"]["deduplication"] for e in kept.values()) == pytest.approx(
        preview.calls["deduplication"].calls
    )
    assert all(get_document(rt, r.id).status == "indexed" for r in rows)
    made = len(scripted_llm.prompts("deduplication"))
    assert made >= 3  # these passages hold near-miss names (the test means nothing otherwise)
    assert preview.calls["deduplication"].calls == made  # the probe applies the upload's own rules to the same names
    differing = [
        (e["file_name"], e["estimate"]["calls"]["deduplication"], e["actual"]["calls"])
        for e in kept.values()
        if e["estimate"]["calls"]["deduplication"] != e["actual"]["calls"].get("deduplication", 0)
    ]
    assert not differing  # file by file, too

    # Community reports into a Topic with no graph: the probed graph's own communities.
    assert any(n.startswith("deduplication calls and community reports:") for n in preview.notes)
    run_rebuild(rt, topic.id, reason="test")
    written = len(scripted_llm.prompts("community_report"))
    assert written >= 5
    assert abs(preview.calls["community_report"].calls - written) <= TOLERANCE * written, (
        preview.calls["community_report"].calls,
        written,
    )


def test_files_after_the_probe_get_the_modelled_calls_scaled_by_what_the_probe_found(rt, scripted_llm, hotpot, monkeypatch):
    monkeypatch.setattr("ragtopics.graph.probe.PROBE_CHUNKS", 10)
    scripted_llm.replies["deduplication"] = json.dumps({"decisions": []})
    topic = create_topic(rt, "Passages", kind="graphrag", settings={"graph_extraction_method": "NLP", "chunk_overlap": 0})
    files = [f for f in _passage_files(hotpot[0], 60) if len(f[1]) < 700][:30]  # one chunk each (the model's window)
    with monkeypatch.context() as m:  # the modelled calls alone, for reference
        m.setattr("ragtopics.ingest.cost._apply_probe", lambda *args: None)
        base = [f.calls["deduplication"] for f in estimate_upload(rt, topic, files).files]
    preview = estimate_upload(rt, topic, files)
    assert any("10 chunk(s) of these files were run through" in n for n in preview.notes)
    assert all(f.chunks == 1 for f in preview.files)

    texts = [(f.file_name, [b.decode()]) for f, (_, b) in zip(preview.files, files, strict=True)]
    found = probe_dedup(rt, topic, texts)
    assert found.chunks == 10
    assert [f.calls["deduplication"] for f in preview.files[:10]] == found.calls
    scale = (sum(found.calls) + 0.5) / (sum(base[:10]) + 0.5)
    assert [f.calls["deduplication"] for f in preview.files[10:]] == pytest.approx([b * scale for b in base[10:]])
