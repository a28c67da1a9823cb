"""An open Upload tab's tick reads the Indexed Documents list only when it changed: the SQL statements the tick
sends to the real metadata database are counted (SQLAlchemy's cursor events), not timed."""

from __future__ import annotations

from contextlib import contextmanager

from sqlalchemy import event

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import upload_file
from ragtopics.topics.topics import create_topic
from ragtopics.ui.upload_tab import LIST_CHANGED_TICKS, LIST_REREAD_TICKS, documents_table, poll

SMALL = {"chunk_size": 200, "chunk_overlap": 0}


@contextmanager
def statements(rt):
    """The SQL statements the block runs on the runtime's metadata database, in order."""
    seen: list[str] = []

    def note(conn, cursor, statement, parameters, context, executemany):
        seen.append(" ".join(statement.split()))

    event.listen(rt.metadata.engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(rt.metadata.engine, "before_cursor_execute", note)


def list_reads(seen: list[str]) -> int:
    """Statements that load document rows (the list), as opposed to the stamp's one aggregate."""
    return sum(s.startswith("SELECT document.id, document.file_name") for s in seen)


def test_a_tick_reads_the_documents_list_only_when_it_changed(rt, run_jobs):
    topic = create_topic(rt, "Plant", settings=SMALL)
    rows = [upload_file(rt, topic, f"pump{i:02d}.txt", f"Pump P-{i} is inspected every {i} days.".encode()) for i in range(30)]
    run_jobs()
    jobs = [(row.job_id, row.file_name, row.id) for row in rows]
    kept: dict = {}

    bars, listed, shown = poll(rt, "Plant", jobs, kept, None)
    assert "30 indexed" in bars and listed == documents_table(rt, "Plant") and len(listed) == 30

    reads = []
    for _ in range(LIST_REREAD_TICKS - 1):  # nothing changes: only the stamp is read, and nothing is sent
        with statements(rt) as seen:
            bars, listed, shown = poll(rt, "Plant", jobs, kept, shown)
        assert (bars, listed) == (None, None)
        assert sum("count(document.id)" in s for s in seen) == 1
        reads.append(list_reads(seen))
    assert reads == [0] * (LIST_REREAD_TICKS - 1)
    with statements(rt) as seen:  # now and then the list is read again (the same rows: nothing sent)
        bars, listed, shown = poll(rt, "Plant", jobs, kept, shown)
    assert list_reads(seen) == 1 and listed is None

    new = upload_file(rt, topic, "valve.txt", b"Valve V-1 was replaced.")
    jobs.append((new.job_id, new.file_name, new.id))
    reads = []
    for _ in range(LIST_CHANGED_TICKS):  # a change shows within LIST_CHANGED_TICKS ticks of the last read
        with statements(rt) as seen:
            bars, listed, shown = poll(rt, "Plant", jobs, kept, shown)
        reads.append(list_reads(seen))
    assert reads == [0] * (LIST_CHANGED_TICKS - 1) + [1]
    assert [row[:2] for row in listed if row[0] == "valve.txt"] == [["valve.txt", "queued"]] and len(listed) == 31
    run_jobs()
    for _ in range(LIST_CHANGED_TICKS):
        bars, listed, shown = poll(rt, "Plant", jobs, kept, shown)
    assert listed == documents_table(rt, "Plant") and ["valve.txt", "indexed"] in [row[:2] for row in listed]

    delete_document(rt, topic, "pump00.txt")  # one row fewer: the stamp changes too
    for _ in range(LIST_CHANGED_TICKS):
        bars, listed, shown = poll(rt, "Plant", jobs, kept, shown)
    assert listed == documents_table(rt, "Plant") and len(listed) == 30

    other = create_topic(rt, "Yard", settings=SMALL)
    upload_file(rt, other, "crane.txt", b"Crane C-2 is load tested yearly.")
    with statements(rt) as seen:  # another Topic chosen: its list at once
        bars, listed, shown = poll(rt, "Yard", jobs, kept, shown)
    assert list_reads(seen) == 1 and [row[:2] for row in listed] == [["crane.txt", "queued"]]
