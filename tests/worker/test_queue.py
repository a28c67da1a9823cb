"""Reading the progress of many uploads, as the Upload tab does every second: what it costs the real Redis
(commands counted by MONITOR) and that it shows the same as reading every job afresh."""

from __future__ import annotations

from rq import SimpleWorker

from ragtopics.documents.uploads import BatchedUploads, upload_file
from ragtopics.graph.fanout import extracted_key, finish_job_id, parked_key
from ragtopics.topics.topics import create_topic
from ragtopics.ui.upload_tab import jobs_html
from ragtopics.worker.queue import job_progresses, queue_for
from tests.redis_commands import CommandLog

SMALL = {"chunk_size": 200, "chunk_overlap": 0}
NLP = {"graph_extraction_method": "NLP", "chunk_size": 100, "chunk_overlap": 0}
FINISHED = 12
ISLANDS = "\n\n".join(f"Paragraph {i} is about {w} and how {w} relates to nothing else at all."
                      for i, w in enumerate(["Alderney", "Brecqhou", "Caldey", "Dursey"]))  # fmt: skip


def tracked_uploads(rt, run_jobs) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """Finished uploads, one GraphRAG upload whose extraction waits (its version parked), queued single
    uploads and a queued shared job: the tracked ``(job_id, file_name)`` and the job ids of each kind."""
    plain = create_topic(rt, "Plant", settings=SMALL)
    done = [upload_file(rt, plain, f"done{i:02d}.txt", f"Pump P-{i} is inspected every {i} days.".encode())
            for i in range(FINISHED)]  # fmt: skip
    run_jobs()
    graph = create_topic(rt, "Islands", kind="graphrag", settings=NLP)
    parked = upload_file(rt, graph, "islands.txt", ISLANDS.encode())
    SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, max_jobs=1)  # the ingest job parks it
    assert rt.redis.exists(parked_key(graph.id, parked.job_id))
    queued = [upload_file(rt, plain, f"new{i}.txt", f"Valve V-{i} was replaced.".encode()) for i in range(3)]
    with BatchedUploads(rt, plain) as uploads:
        batched = [uploads.add(f"small{i}.txt", f"Fan F-{i} is cleaned weekly.".encode()) for i in range(3)]
    rows = [*done, parked, *queued, *batched]
    kinds = {"finished": [r.job_id for r in done], "parked": [parked.job_id], "queued": [r.job_id for r in queued],
             "batched": [r.job_id for r in batched], "graph topic": [graph.id]}  # fmt: skip
    return [(r.job_id, r.file_name) for r in rows], kinds


def test_a_poll_reads_only_the_unfinished_jobs_and_never_a_parked_version(rt, run_jobs):
    jobs, kinds = tracked_uploads(rt, run_jobs)
    finished: dict = {}
    first = jobs_html(rt, jobs, finished)
    assert set(finished) == set(kinds["finished"])  # read once, then kept

    with CommandLog(rt.redis) as log:
        again = jobs_html(rt, jobs, finished)
    assert again == first == jobs_html(rt, jobs)  # the same bars as reading every job afresh
    assert "extracting graph 0/4 chunks" in again and f"{FINISHED} indexed" in again
    touched = {c[1] for c in log.commands if len(c) > 1}
    assert not {k for k in touched for job_id in kinds["finished"] if job_id in k}  # no finished job is read again
    [graph_id], [version] = kinds["graph topic"], kinds["parked"]
    assert log.on_key(parked_key(graph_id, version)) == []  # the parked version is never read
    # one read per unfinished job: 3 queued, 3 in a shared job (+ its name and the shared job), the GraphRAG
    # version (+ its result, its finishing job and the count of chunks extracted)
    assert log.count("MULTI") == 2  # the two Job.fetch_many, each one transaction (one round trip)
    assert sorted(c[0] for c in log.commands if c[0] not in ("MULTI", "EXEC")) == sorted(["HGETALL"] * 3 + ["HGETALL", "GET"] * 3 + ["HGETALL"]
                                                        + ["HGETALL", "XREVRANGE", "HGETALL", "SCARD"])  # fmt: skip
    assert log.on_key(extracted_key(graph_id, version), "SCARD") and log.on_key(f"rq:job:{finish_job_id(version)}")

    counts = []  # the same poll with 12, 6 and no finished jobs tracked
    for tracked in (jobs, jobs[FINISHED // 2 :], jobs[FINISHED:]):
        with CommandLog(rt.redis) as log:
            jobs_html(rt, tracked, finished)
        counts.append(len(log.commands))
    assert counts == [18, 18, 18]  # 14 reads, 2 transactions

    progress = job_progresses(rt, [job_id for job_id, _ in jobs])
    assert [p.status for p in progress] == ["finished"] * FINISHED + ["started"] + ["queued"] * 6
    assert progress[FINISHED].phase == "extracting" and (progress[FINISHED].done, progress[FINISHED].total) == (0, 4)
    assert {p.shared_by for p in progress[-3:]} == {3}
