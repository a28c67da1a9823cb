"""Deleting a Topic leaves no Redis key, SQL row or stored file of it behind; other Topics are untouched."""

from __future__ import annotations

import json

from rq import SimpleWorker
from rq.job import Job

from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import upload_file
from ragtopics.graph.fanout import parked_key
from ragtopics.graph.ingest import CACHE_TTL_S
from ragtopics.graph.refresh import run_rebuild
from ragtopics.jobs.queue import TOPIC_JOBS, queue_for
from ragtopics.prompts.resolve import set_prompt
from ragtopics.storage.topics import count_topic_rows
from ragtopics.topics.delete import delete_topic, topic_job_ids
from ragtopics.topics.topics import create_topic, get_topic, list_topics
from ragtopics.ui.cli import main
from tests.redis_commands import CommandLog


def footprint(rt, topic_id: str) -> dict[str, int]:
    """What a Topic holds: its Redis keys (chunks, index record, job records), rows by table, stored files."""
    folder = rt.blobs.root / topic_id
    index_names = {n.decode() if isinstance(n, bytes) else n for n in rt.redis.execute_command("FT._LIST")}
    return {
        "redis_keys": sum(1 for _ in rt.redis.scan_iter(match=f"rt:{topic_id}:*", count=1000)),
        "job_records": len(topic_job_ids(rt, topic_id)),
        "search_index": int(f"rt-{topic_id}-chunks" in index_names),
        "rows": sum(count_topic_rows(rt.metadata, topic_id).values()),
        "files": sum(1 for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0,
    }


def test_deleting_a_topic_with_50_documents_leaves_nothing_behind(rt, run_jobs, scripted_llm, capsys):
    big = create_topic(
        rt, "Fifty", settings={"chunk_size": 200, "chunk_overlap": 0, "retrieval_strategy": "HYBRID", "min_similarity_score": 0}
    )
    other = create_topic(rt, "Neighbour", settings={"mcp_interfaces": ["Fifty"]})
    for n in range(50):
        text = f"Document {n}. Pump P{n} is serviced every {n + 2} months by crew {n % 7}. " * 4
        upload_file(rt, big, f"doc-{n:02d}.md", text.encode())
    upload_file(rt, other, "own.md", b"The neighbour keeps its own file about valves.")
    run_jobs()
    scripted_llm.replies["answer"] = "Every 5 months [S1]."
    for question in ("How often is pump P3 serviced?", "Which crew services pump P10?"):
        final = list(ask(rt, big, question))[-1]
        assert final.sources
    set_prompt(rt, big.id, "system", "You answer for the plant $topic_name. $custom_system_prompt")
    other_before = footprint(rt, other.id)

    before = footprint(rt, big.id)
    deletion = delete_topic(rt, "Fifty")
    after = footprint(rt, big.id)
    print(f"\nTopic with 50 documents, before delete: {before}; after: {after}; removed: {deletion.removed}")

    assert before["redis_keys"] >= 51 and before["job_records"] == 50 and before["files"] == 50
    assert before["rows"] >= 50 + 2 + 2 + 1  # documents, turns, sessions, the Topic (plus traces, versions, prompts)
    assert after == {"redis_keys": 0, "job_records": 0, "search_index": 0, "rows": 0, "files": 0}
    assert [t.name for t in list_topics(rt)] == ["Neighbour"]
    assert get_topic(rt, "Neighbour").settings.mcp_interfaces == []
    assert deletion.notes == ["Topic 'Neighbour' is no longer connected to it"]
    assert footprint(rt, other.id)["files"] == other_before["files"]
    assert footprint(rt, other.id)["redis_keys"] == other_before["redis_keys"]


def test_topic_delete_on_the_command_line_needs_yes(rt, run_jobs, capsys):
    topic = create_topic(rt, "Scratch")
    upload_file(rt, topic, "a.md", b"Scratch notes about the compressor.")
    run_jobs()
    assert main(["topic", "delete", "Scratch"]) == 2
    assert "add --yes to confirm" in capsys.readouterr().err
    assert [t.name for t in list_topics(rt)] == ["Scratch"]
    assert main(["topic", "delete", "Scratch", "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deleted Topic 'Scratch': ") and "1 file," in out and "1 document," in out
    assert list_topics(rt) == []
    assert main(["topic", "delete", "Scratch", "--yes"]) == 2
    assert "no Topic called 'Scratch'" in capsys.readouterr().err


def test_document_delete_on_the_command_line(rt, run_jobs, capsys):
    topic = create_topic(rt, "Docs")
    upload_file(rt, topic, "a.md", b"Alpha notes.")
    upload_file(rt, topic, "b.md", b"Beta notes.")
    run_jobs()
    assert main(["docs", "Docs", "--delete", "a.md"]) == 0
    assert capsys.readouterr().out.startswith("deleted a.md from Topic 'Docs': 1 chunk,")
    assert main(["docs", "Docs"]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == ["b.md"]
    assert main(["docs", "Docs", "--delete", "a.md"]) == 2
    assert "Topic 'Docs' has no document 'a.md'; its documents are: b.md" in capsys.readouterr().err


def test_deleting_a_small_topic_next_to_a_large_one_reads_only_its_own_jobs_and_keys(rt, run_jobs):
    small = create_topic(rt, "Small", settings={"chunk_size": 200, "chunk_overlap": 0})
    large = create_topic(rt, "Large", settings={"chunk_size": 200, "chunk_overlap": 0})
    own = [upload_file(rt, small, f"s{n}.md", f"Valve V{n} is checked weekly.".encode()) for n in range(2)]
    upload_file(rt, large, "l.md", b"The large Topic keeps its file about pumps.")
    run_jobs()
    queue = queue_for(rt)  # the large Topic's jobs wait in the queue, next to registries full of other work
    theirs = [
        queue.enqueue_call(
            "ragtopics.worker.jobs.ingest", args=(large.id, f"doc-{n}"), job_id=f"large-{n}", meta={"topic_id": large.id}
        ).id
        for n in range(300)
    ]
    pipe = rt.redis.pipeline(transaction=False)
    for n in range(3000):  # cached extractions and the like, under the large Topic's prefix
        pipe.set(f"rt:{large.id}:xcache:{n:04d}", "{}")
    pipe.execute()
    large_before = footprint(rt, large.id)
    assert large_before["job_records"] == 301 and large_before["redis_keys"] > 3000

    with CommandLog(rt.redis) as log:
        delete_topic(rt, "Small")

    assert log.count("SCAN", "KEYS") == 0  # its keys are named, the keyspace is not walked
    named = [c for c in log.commands if any(large.id in a or a.startswith("rq:job:large-") for a in c[1:])]
    assert named == []  # not one of the large Topic's keys or jobs is read or written
    job_reads = [c for c in log.commands if c[0] == "HGETALL" and c[1].startswith("rq:job:")]
    assert len(job_reads) == 3 * len(own)  # its own jobs, read by the three steps that need them
    assert not any(Job.exists(row.job_id, connection=rt.redis) for row in own)
    assert footprint(rt, small.id) == {"redis_keys": 0, "job_records": 0, "search_index": 0, "rows": 0, "files": 0}
    assert footprint(rt, large.id) == large_before and all(Job.exists(j, connection=rt.redis) for j in theirs)


CURIE = (
    "Marie Curie was a physicist who worked in Paris at the University of Paris.\n\n"
    "Pierre Curie shared the Nobel Prize in Physics with Marie Curie and Henri Becquerel."
)
ISLANDS = "\n\n".join(
    f"Paragraph {i} is about {w} and how {w} relates to nothing else at all."
    for i, w in enumerate(["Alderney", "Brecqhou", "Caldey", "Dursey"])
)
NLP = {"graph_extraction_method": "NLP", "chunk_size": 100, "chunk_overlap": 0}


def test_a_graphrag_topic_delete_names_its_keys_instead_of_walking_the_keyspace(rt, run_jobs, scripted_llm):
    scripted_llm.replies["community_report"] = json.dumps({"title": "Physicists in Paris", "summary": "They met in Paris."})
    graph = create_topic(rt, "Physicists", kind="graphrag", settings=NLP)
    other = create_topic(rt, "Islands", kind="graphrag", settings=NLP)
    upload_file(rt, graph, "curie.txt", CURIE.encode())
    upload_file(rt, other, "islands.txt", ISLANDS.encode())
    run_jobs()
    assert run_rebuild(rt, graph.id)["written"] >= 1  # community reports, the run's record
    parked = upload_file(rt, graph, "islands.txt", ISLANDS.encode())
    SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, max_jobs=1)  # the ingest job parks it
    assert rt.redis.exists(parked_key(graph.id, parked.job_id))
    cache = f"rt:{graph.id}:xcache"  # the extraction cache: one hash, each field expiring on its own
    assert rt.redis.type(cache) in (b"hash", "hash") and rt.redis.hlen(cache) >= 2
    assert all(0 < ttl <= CACHE_TTL_S for ttl in rt.redis.httl(cache, *rt.redis.hkeys(cache)))
    pipe = rt.redis.pipeline(transaction=False)
    for n in range(5000):  # another Topic's many keys
        pipe.set(f"rt:{other.id}:xcache:{n:04d}", "{}")
    pipe.execute()
    kinds = {key.decode().split(":")[2] for key in rt.redis.scan_iter(match=f"rt:{graph.id}:*", count=1000)}
    assert {"chunk", "community", "xcache", "parked", "index", "keys", "runs"} <= kinds
    other_before = footprint(rt, other.id)

    with CommandLog(rt.redis) as log:
        deletion = delete_topic(rt, "Physicists")

    assert log.count("SCAN", "KEYS") == 0  # the keyspace is not walked
    assert [c for c in log.commands if any(other.id in a for a in c[1:])] == []  # nor another Topic's keys touched
    unlinked = [k for c in log.commands if c[0] == "UNLINK" for k in c[1:]]
    assert len(unlinked) <= 20 and parked_key(graph.id, parked.job_id) in unlinked and cache in unlinked
    assert deletion.removed["redis_keys"] >= 4  # the cache, the parked version, the run record, the key set (at least)
    assert footprint(rt, graph.id) == {"redis_keys": 0, "job_records": 0, "search_index": 0, "rows": 0, "files": 0}
    assert rt.redis.scard(TOPIC_JOBS.format(graph.id)) == 0
    assert footprint(rt, other.id) == other_before
