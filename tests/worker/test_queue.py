"""Reading the progress of many uploads, as the Upload tab does every second: what it costs the real Redis
(commands counted by MONITOR) and that it shows the same as reading every job afresh."""

from __future__ import annotations

from rq import SimpleWorker

from ragtopics.documents.uploads import BatchedUploads, upload_file
from ragtopics.graph.fanout import extracted_key, finish_job_id, parked_key
from ragtopics.jobs.queue import job_progresses, queue_for
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.ui.upload_tab import jobs_html
from tests.redis_commands import CommandLog

SMALL = {"chunk_size": 200, "chunk_overlap": 0}
NLP = {"graph_extraction_method": "NLP", "chunk_size": 100, "chunk_overlap": 0}
FINISHED = 12
ISLANDS = "\n\n".join(
    f"Paragraph {i} is about {w} and how {w} relates to nothing else at all."
    for i, w in enumerate(["Alderney", "Brecqhou", "Caldey", "Dursey"])
)


def tracked_uploads(rt, run_jobs) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """Finished uploads, one GraphRAG upload whose extraction waits (its version parked), queued single
    uploads and a queued shared job: the tracked ``(job_id, file_name)`` and the job ids of each kind."""
    plain = create_topic(rt, "Plant", settings=SMALL)
    done = [
        upload_file(rt, plain, f"done{i:02d}.txt", f"Pump P-{i} is inspected every {i} days.".encode()) for i in range(FINISHED)
    ]
    run_jobs()
    graph = create_topic(rt, "Islands", kind="graphrag", settings=NLP)
    parked = upload_file(rt, graph, "islands.txt", ISLANDS.encode())
    SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, max_jobs=1)  # the ingest job parks it
    assert rt.redis.exists(parked_key(graph.id, parked.job_id))
    queued = [upload_file(rt, plain, f"new{i}.txt", f"Valve V-{i} was replaced.".encode()) for i in range(3)]
    with BatchedUploads(rt, plain) as uploads:
        batched = [uploads.add(f"small{i}.txt", f"Fan F-{i} is cleaned weekly.".encode()) for i in range(3)]
    rows = [*done, parked, *queued, *batched]
    kinds = {
        "finished": [r.job_id for r in done],
        "parked": [parked.job_id],
        "queued": [r.job_id for r in queued],
        "batched": [r.job_id for r in batched],
        "graph topic": [graph.id],
        "plain topic": [plain.id],
    }
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
    # each unfinished job's status; in full: the 3 in a shared job (+ its name and the shared job), the GraphRAG
    # version (+ its result, its finishing job and the count of chunks extracted), and the 3 queued ones shown
    assert log.count("MULTI") == 3  # the three Job.fetch_many, each one transaction (one round trip)
    assert sorted(c[0] for c in log.commands if c[0] not in ("MULTI", "EXEC")) == sorted(
        ["HGET"] * 7 + ["HGETALL", "GET"] * 3 + ["HGETALL"] + ["HGETALL", "XREVRANGE", "HGETALL", "SCARD"] + ["HGETALL"] * 3
    )
    assert log.on_key(extracted_key(graph_id, version), "SCARD") and log.on_key(f"rq:job:{finish_job_id(version)}")

    counts = []  # the same poll with 12, 6 and no finished jobs tracked
    for tracked in (jobs, jobs[FINISHED // 2 :], jobs[FINISHED:]):
        with CommandLog(rt.redis) as log:
            jobs_html(rt, tracked, finished)
        counts.append(len(log.commands))
    assert counts == [27, 27, 27]  # 21 reads, 3 transactions

    plain = kinds["plain topic"][0]
    more = [upload_file(rt, get_topic(rt, plain), f"later{i:02d}.txt", f"Filter F-{i} was swapped.".encode()) for i in range(30)]
    tracked = jobs + [(row.job_id, row.file_name) for row in more]
    with CommandLog(rt.redis) as log:
        bars = jobs_html(rt, tracked, finished)
    assert "37 waiting or running" in bars and "20 of 49 files shown" in bars
    read_in_full = {c[1] for c in log.commands if c[0] == "HGETALL"} & {f"rq:job:{row.job_id}" for row in more}
    assert len(read_in_full) == 20 - 7  # those shown (after the 7 older unfinished ones); the others: their status
    assert log.count("HGET") == 7 + len(more)

    progress = job_progresses(rt, [job_id for job_id, _ in jobs])
    assert [p.status for p in progress] == ["finished"] * FINISHED + ["started"] + ["queued"] * 6
    assert progress[FINISHED].phase == "extracting" and (progress[FINISHED].done, progress[FINISHED].total) == (0, 4)
    assert {p.shared_by for p in progress[-3:]} == {3}
