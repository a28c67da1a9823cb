"""The ragtopics CLI against the real stores, with a real worker process for ingest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ragtopics.errors import NotFoundError
from ragtopics.topics.topics import get_topic
from ragtopics.ui.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker_process(settings):
    """A real `ragtopics worker` process on the test Redis, queue and data dir."""
    env = {
        **os.environ,
        "REDIS_URL": settings.effective_redis_url,
        "RAGTOPICS_DATA_DIR": str(settings.data_dir),
        "RQ_QUEUE": settings.queue_name,
        "LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen([sys.executable, "-m", "ragtopics.ui.cli", "worker"], cwd=ROOT, env=env)
    yield process
    process.terminate()
    process.wait(timeout=30)


def test_topic_create_with_settings_then_show_and_set(rt, capsys):
    assert (
        main(
            [
                "topic",
                "create",
                "Manuals",
                "--kind",
                "rag",
                "--set",
                "top_k_results=8",
                "--set",
                "retrieval_strategy=DENSE",
                "--set",
                "chunk_size=600",
            ]
        )
        == 0
    )
    topic = get_topic(rt, "Manuals")
    assert (topic.settings.top_k_results, topic.settings.retrieval_strategy, topic.settings.chunk_size) == (8, "DENSE", 600)
    assert main(["topic", "set", "Manuals", "min_similarity_score=0.4"]) == 0
    capsys.readouterr()
    assert main(["topic", "show", "Manuals"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["settings_version"] == 2 and shown["settings"]["min_similarity_score"] == 0.4


@pytest.mark.parametrize(
    "assignment,message",
    [
        ("top_k=5", "top_k: unknown setting"),
        ("chunk_size=50", "chunk_size: 50 is outside the allowed range 100–8000"),
        ("retrieval_strategy=SPARSE", "retrieval_strategy: Input should be 'DENSE' or 'HYBRID'"),
        ("chunk_overlap=2000", "chunk_overlap (2000) must be smaller than chunk_size (1000)"),
    ],
)
def test_bad_settings_exit_2_with_the_key_named(rt, capsys, assignment, message):
    assert main(["topic", "create", "Bad", "--set", assignment]) == 2
    assert message in capsys.readouterr().err
    assert main(["topic", "list"]) == 0 and "Bad" not in capsys.readouterr().out


def test_ingest_waits_for_the_worker_then_ask_prints_json(rt, worker_process, scripted_llm, tmp_path, capsys):
    main(["topic", "create", "Fleet", "--set", "file_types=txt,md"])
    (tmp_path / "pumps.txt").write_text("Pump P-7 is inspected every 90 days by the night shift.")
    (tmp_path / "trucks.md").write_text("# Trucks\n\nTruck T-3 carries spare tyres and a jack.")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    code = main(["ingest", "Fleet", str(tmp_path / "pumps.txt"), str(tmp_path / "trucks.md"), str(tmp_path / "image.png")])
    err = capsys.readouterr().err
    assert code == 1  # one file refused
    assert "image.png was refused" in err and "[2/2] files done: 2 indexed; 2 chunks" in err
    assert "estimated vs actual (2 file(s)): chunks 2 vs 2" in err  # each file's estimate was kept with its job

    scripted_llm.replies["answer"] = "Every 90 days [S1]."
    assert main(["ask", "Fleet", "How often is pump P-7 inspected?", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["answer"] == "Every 90 days [pumps.txt]." and out["route"] == "SEARCH"
    assert out["sources"][0]["file"] == "pumps.txt"
    assert set(out["sources"][0]) == {
        "file",
        "chunk_id",
        "score",
        "topic",
        "kind",
        "reason",
        "link",
        "status",
        "pages",
        "location",
    }
    assert (out["sources"][0]["pages"], out["sources"][0]["location"]) == ([], "")  # a text file has no pages
    assert out["sources"][0]["reason"] == "cited" and out["sources"][0]["link"].startswith("/files/")
    assert {"retrieve", "answer", "total"} <= set(out["timings_ms"]) and out["route_reason"] == ""
    assert main(["docs", "Fleet", "--json"]) == 0
    docs = {d["file_name"]: d for d in json.loads(capsys.readouterr().out)}
    assert docs["pumps.txt"]["status"] == "indexed" and docs["trucks.md"]["chunk_count"] == 1
    assert len(docs["pumps.txt"]["content_sha256"]) == 64 and docs["pumps.txt"]["pending_sha256"] == ""
    assert datetime.fromisoformat(docs["pumps.txt"]["updated_at"]).utcoffset() == timedelta(0)


def test_ingest_of_a_bad_file_exits_non_zero(rt, worker_process, tmp_path, capsys):
    main(["topic", "create", "Strict"])
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    assert main(["ingest", "Strict", str(tmp_path / "blob.txt")]) == 1
    err = capsys.readouterr().err
    assert (
        "blob.txt: FAILED: blob.txt looks like a binary file" in err and "[1/1] files done: 0 indexed, 1 failed; 0 chunks" in err
    )


def test_ingest_of_many_small_files_shares_jobs_and_reports_each_file(rt, worker_process, tmp_path, capsys):
    main(["topic", "create", "Many"])
    paths = []
    for n in range(6):
        paths.append(tmp_path / f"note-{n}.txt")
        paths[-1].write_text(f"Note {n}: valve V-{n} is checked on day {n} of the month.")
    paths.append(tmp_path / "blob.txt")
    paths[-1].write_bytes(b"\x00\x01\x02binary")
    assert main(["ingest", "Many", *map(str, paths)]) == 1  # one file failed
    err = capsys.readouterr().err
    assert "blob.txt: FAILED: blob.txt looks like a binary file" in err
    assert "[7/7] files done: 6 indexed, 1 failed; 6 chunks" in err
    assert main(["docs", "Many", "--json"]) == 0
    docs = {d["file_name"]: d for d in json.loads(capsys.readouterr().out)}
    assert [docs[f"note-{n}.txt"]["status"] for n in range(6)] == ["indexed"] * 6 and docs["blob.txt"]["status"] == "failed"


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(rt, settings):
    main(["topic", "create", "Piped"])
    env = {
        **os.environ,
        "REDIS_URL": settings.effective_redis_url,
        "RAGTOPICS_DATA_DIR": str(settings.data_dir),
        "RQ_QUEUE": settings.queue_name,
        "LOG_LEVEL": "WARNING",
    }
    # `head -c 0` has exited before the command writes: its first write meets a closed pipe
    command = f"{sys.executable} -m ragtopics.ui.cli topic show Piped | head -c 0; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def test_unknown_topic_is_a_clear_error(rt, capsys):
    assert main(["ask", "Nope", "hello"]) == 2
    assert "no Topic called 'Nope'" in capsys.readouterr().err


def test_ask_with_an_attachment_and_a_refused_one(rt, run_jobs, scripted_llm, tmp_path, capsys):
    main(["topic", "create", "Notes", "--set", "min_similarity_score=0"])
    (tmp_path / "a.txt").write_text("The generator is tested on Mondays.")
    from ragtopics.documents.uploads import upload_file

    upload_file(rt, get_topic(rt, "Notes"), "a.txt", (tmp_path / "a.txt").read_bytes())
    run_jobs()
    scripted_llm.replies["answer"] = "On Mondays [S1]."
    (tmp_path / "memo.md").write_text("Memo: the generator test moved to Tuesday.")
    capsys.readouterr()
    assert main(["ask", "Notes", "When is the generator tested?", "--attach", str(tmp_path / "memo.md"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == "On Mondays [a.txt]."
    assert "Memo: the generator test moved to Tuesday." in scripted_llm.prompts("answer")[-1]["messages"][-1]["content"]
    (tmp_path / "tool.exe").write_bytes(b"MZ")
    assert main(["ask", "Notes", "What is this?", "--attach", str(tmp_path / "tool.exe")]) == 2
    assert "tool.exe can't be attached" in capsys.readouterr().err


def test_json_lists_and_an_empty_no_answer_response(rt, capsys):
    assert main(["topic", "create", "Lists", "--set", 'file_types=["md", "txt"]']) == 0
    assert get_topic(rt, "Lists").settings.file_types == ["md", "txt"]
    assert main(["topic", "create", "Blank", "--set", "no_answer_response="]) == 2
    assert "no_answer_response: String should have at least 1 character" in capsys.readouterr().err
    assert main(["topic", "create", "Long", "--set", "no_answer_response=" + "Not found. " * 300]) == 2
    assert (
        "no_answer_response: 3,299 characters long; at most 2,000 are allowed" in capsys.readouterr().err
    )  # the trailing space is trimmed
    with pytest.raises(NotFoundError):
        get_topic(rt, "Long")  # nothing stored


def test_ingest_keeps_waiting_through_a_store_outage(rt, run_jobs, tmp_path, capsys, monkeypatch):
    """The wait survives the store going away for a while (a crashed Redis the supervisor restarts):
    the first polls fail as a refused connection does, the later ones read the finished jobs."""
    import redis

    from ragtopics.documents.uploads import upload_file
    from ragtopics.jobs.queue import job_progress
    from ragtopics.ui import cli

    main(["topic", "create", "Outage"])
    topic = get_topic(rt, "Outage")
    docs = [upload_file(rt, topic, f"{n}.txt", f"Pump {n} is serviced weekly.".encode()) for n in ("a", "b")]
    run_jobs()
    outage = iter([True, True])

    def poll(rt_, job_id):
        if next(outage, False):
            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1. Connection refused.")
        return job_progress(rt_, job_id)

    monkeypatch.setattr(cli.time, "sleep", lambda s: None)
    assert cli._wait_for_jobs(rt, {d.job_id: d.file_name for d in docs}, poll) == 0
    err = capsys.readouterr().err
    assert err.count("the store is unreachable (Error 111") == 2 and "the store is back" in err
    assert "[2/2] files done: 2 indexed; 2 chunks" in err


def test_ingest_says_a_document_deleted_while_it_was_indexed_was_deleted(rt, tmp_path, capsys):
    from ragtopics.documents.delete import delete_document
    from ragtopics.documents.uploads import upload_file
    from ragtopics.jobs.queue import job_progress
    from ragtopics.ui import cli

    main(["topic", "create", "Gone"])
    doc = upload_file(rt, get_topic(rt, "Gone"), "a.txt", b"Pump A is serviced weekly.")
    delete_document(rt, get_topic(rt, "Gone"), "a.txt")  # before any worker ran its job
    assert cli._wait_for_jobs(rt, {doc.job_id: doc.file_name}, job_progress) == 0
    err = capsys.readouterr().err
    assert "a.txt: its job is gone (the document was deleted while it was indexed)" in err and "FAILED" not in err
    assert "[1/1] files done: 0 indexed, 1 replaced or deleted" in err


def test_ingest_names_the_step_of_the_file_being_indexed():
    from ragtopics.jobs.queue import JobProgress
    from ragtopics.ui.cli import _step

    assert _step(JobProgress("j", "started", "extracting", 12, 40)) == "extracting graph 12/40 chunks"
    assert _step(JobProgress("j", "started", "embedding", 3, 10)) == "embedding 3/10"
    assert _step(JobProgress("j", "started", "", 0, 0)) == "working"
