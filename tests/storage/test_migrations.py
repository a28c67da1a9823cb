"""Schema migrations: a database of the release before migrations upgrades with every value; new ones start at head.

``fixtures/metadata-before-migrations.db`` was written by that release's own code
(``fixtures/make_fixture_db.py``).
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect
from sqlmodel import SQLModel, select

from ragtopics.answer.history import list_sessions, saved_turns, turn_trace
from ragtopics.documents.uploads import list_documents
from ragtopics.runtime import Runtime
from ragtopics.storage import prompts
from ragtopics.storage.metadata import (
    ChatTurnRow,
    DocumentRow,
    MetadataStore,
    MigrationError,
    PictureRow,
    TopicRow,
    TopicSettingsVersion,
    TraceRow,
    schema_revision,
)
from ragtopics.storage.migrate import head_revision, sqlite_path
from ragtopics.topics.topics import get_topic, list_topics, update_settings

FIXTURE = Path(__file__).parent / "fixtures" / "metadata-before-migrations.db"
TOPIC_ID = "topic-5a1e5b2c3d4e"
SESSION_ID = "chat-0123456789abcdef"
#: table → {old text column: new JSON column}, as revision 0002 renames them
RENAMED = {
    "topic": {"settings_json": "settings"},
    "topic_settings_version": {"settings_json": "settings"},
    "document": {"indexed_with_json": "indexed_with"},
    "chat_turn": {"sources_json": "sources", "timings_json": "timings"},
}
DROPPED = {"document": {"trace_json"}, "chat_turn": {"trace_json"}}


def copy_fixture(path: Path) -> str:
    """Copy the pre-migrations database to ``path``; returns its SQLAlchemy URL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURE, path)
    return f"sqlite:///{path}"


def dump(path: Path) -> dict[str, list[dict]]:
    """Every row of every table (alembic_version aside), by table, ordered by primary key."""
    with sqlite3.connect(path) as con:
        con.row_factory = sqlite3.Row
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name != 'alembic_version'")]
        rows = {t: [dict(r) for r in con.execute(f"SELECT * FROM {t} ORDER BY 1")] for t in tables}
    con.close()
    return rows


def sqlite_schema(path: Path) -> list[tuple[str, str, str]]:
    """``(type, name, sql)`` of every table and index."""
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    con.close()
    return rows


def schema_differences(store: MetadataStore) -> list:
    """What differs between the database's schema and the models (``compare_metadata``); [] when none."""
    with store.engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)


#: Columns added by later revisions, with the value an upgraded row gets.
ADDED = {"chat_turn": {"route_reason": "", "route_method": "", "route_planned": ""}, "chat_session": {"owner": ""}}


def test_database_from_before_migrations_keeps_every_row_and_value(tmp_path):
    before = dump(FIXTURE)
    store = MetadataStore(copy_fixture(tmp_path / "ragtopics.db"))

    assert schema_revision(store.engine) == head_revision() == "0013"
    after = dump(tmp_path / "ragtopics.db")
    assert {t: len(r) for t, r in after.items()} == {
        **{t: len(r) for t, r in before.items()},
        "graph_database": 0,
        "user": 0,
        "api_token": 0,
        "dev_report": 0,
        "role_endpoint": 0,
        "demo_link": 0,
        "demo_turn": 0,
        "upload_cost": 0,
        "usage_figure": 0,
        "graph_correction": 0,
    }
    assert {t: len(r) for t, r in before.items()} == {
        "topic": 1,
        "topic_settings_version": 2,
        "document": 2,
        "picture": 1,
        "chat_session": 1,
        "chat_turn": 2,
        "prompt_override": 1,
        "trace": 1,
    }
    for table, rows in before.items():
        renamed, dropped = RENAMED.get(table, {}), DROPPED.get(table, set())
        expected = [
            {renamed.get(k, k): json.loads(v) if k in renamed else v for k, v in row.items() if k not in dropped}
            | ADDED.get(table, {})
            for row in rows
        ]
        stored = [{k: json.loads(v) if k in renamed.values() else v for k, v in row.items()} for row in after[table]]
        assert stored == expected, table


def test_upgraded_values_read_back_as_dicts_and_lists(tmp_path):
    before = dump(FIXTURE)
    store = MetadataStore(copy_fixture(tmp_path / "ragtopics.db"))

    with store.session() as s:
        topic = s.get(TopicRow, TOPIC_ID)
        versions = s.exec(select(TopicSettingsVersion).order_by(TopicSettingsVersion.version)).all()
        docs = {d.id: d for d in s.exec(select(DocumentRow)).all()}
        turns = s.exec(select(ChatTurnRow).order_by(ChatTurnRow.id)).all()
        picture = s.get(PictureRow, "pic-0f0f0f")
        trace = s.exec(select(TraceRow)).one()
    assert topic.settings == json.loads(before["topic"][0]["settings_json"])
    assert (topic.settings["top_k_results"], topic.settings["file_types"], topic.settings_version) == (8, ["md", "pdf"], 2)
    assert [(v.version, v.settings["top_k_results"]) for v in versions] == [(1, 6), (2, 8)]
    assert docs["doc-manual"].indexed_with == json.loads(before["document"][1]["indexed_with_json"])
    assert docs["doc-manual"].indexed_with["model_calls"] == {"describe_picture": 1}
    assert (docs["doc-broken"].status, docs["doc-broken"].indexed_with) == ("failed", {})
    assert turns[0].sources == json.loads(before["chat_turn"][0]["sources_json"])
    assert [s["chunk_id"] for s in turns[0].sources] == ["chunk-aa11", "chunk-bb22"]
    assert turns[0].timings == {"route": 12.5, "retrieve": 40.25, "generate": 900.0, "total": 955.125, "first_token": 310.0}
    assert (turns[1].sources, turns[1].timings, turns[1].route_confidence) == ([], {"total": 5.0}, None)
    assert (picture.page, picture.caption) == (3, "Figure 1: wiring")
    assert trace.events[0]["data"]["reason"] == "asks about the manual"


def test_upgraded_database_drops_the_trace_columns_and_matches_the_models(tmp_path):
    store = MetadataStore(copy_fixture(tmp_path / "ragtopics.db"))

    columns = {t: {c["name"] for c in inspect(store.engine).get_columns(t)} for t in ("document", "chat_turn", "topic")}
    assert not {"trace_json", "indexed_with_json"} & columns["document"] and "indexed_with" in columns["document"]
    assert not {"trace_json", "sources_json", "timings_json"} & columns["chat_turn"]
    assert "settings" in columns["topic"] and "settings_json" not in columns["topic"]
    assert schema_differences(store) == []
    with sqlite3.connect(tmp_path / "ragtopics.db") as con:
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    con.close()


def test_product_reads_the_upgraded_database(settings):
    copy_fixture(sqlite_path(settings.effective_database_url))
    rt = Runtime(settings)

    topic = get_topic(rt, "Manuals")
    assert (topic.id, topic.settings.top_k_results, topic.settings.chunk_size, topic.settings_version) == (TOPIC_ID, 8, 800, 2)
    assert [t.name for t in list_topics(rt)] == ["Manuals"]
    docs = {d.file_name: d for d in list_documents(rt, topic)}
    assert (docs["manual.pdf"].status, docs["manual.pdf"].chunk_count, docs["manual.pdf"].indexed_with["chunk_size"]) == (
        "indexed",
        42,
        800,
    )
    assert docs["broken.docx"].error.startswith("broken.docx could not be read") and docs["broken.docx"].indexed_with == {}
    assert [s.id for s in list_sessions(rt, topic)] == [SESSION_ID]
    first, second = saved_turns(rt, SESSION_ID)
    assert [(s.file, s.code, s.score, s.status) for s in first.sources] == [
        ("manual.pdf", "S1", 0.83, "current"),
        ("manual.pdf", "S2", 0.71, "current"),
    ]
    assert all(s.link for s in first.sources)
    assert (first.route, first.route_confidence, first.route_reason) == ("SEARCH", 0.92, "asks about the manual")
    assert first.timings_ms["total"] == 955.125 and second.timings_ms == {"total": 5.0} and second.sources == []
    assert turn_trace(rt, first.id)[0]["step"] == "route"
    assert prompts.prompt_overrides(rt.metadata, ["shared"]) == {("shared", "answer"): "Answer briefly, citing sources as [S1]."}

    changed = update_settings(rt, "Manuals", {"memory": 4})  # writing works too, as a new settings version
    assert (changed.settings.memory, changed.settings.top_k_results, changed.settings_version) == (4, 8, 3)


def test_fresh_database_is_created_by_the_migrations(tmp_path):
    store = MetadataStore(f"sqlite:///{tmp_path / 'new' / 'ragtopics.db'}")

    assert schema_revision(store.engine) == head_revision()
    assert schema_differences(store) == []
    with store.session() as s:
        s.add(TopicRow(id="topic-1", name="New", kind="rag", settings={"chunk_size": 500}))
    assert store.topic_by_name("New").settings == {"chunk_size": 500}
    with pytest.raises(Exception, match="FOREIGN KEY"), store.session() as s:  # the store's connections still enforce them
        s.add(ChatTurnRow(session_id="chat-none", topic_id="topic-1", question="q", answer="a"))


def test_opening_an_upgraded_database_again_changes_nothing(tmp_path, caplog):
    url = copy_fixture(tmp_path / "ragtopics.db")
    MetadataStore(url)
    before_schema, before_rows = sqlite_schema(tmp_path / "ragtopics.db"), dump(tmp_path / "ragtopics.db")

    with caplog.at_level("INFO", logger="ragtopics.storage.migrate"):
        MetadataStore(url)
        MetadataStore(url)

    assert (sqlite_schema(tmp_path / "ragtopics.db"), dump(tmp_path / "ragtopics.db")) == (before_schema, before_rows)
    assert caplog.messages == []


def test_each_applied_migration_logs_one_line(tmp_path, caplog):
    with caplog.at_level("INFO"):
        MetadataStore(copy_fixture(tmp_path / "ragtopics.db"))

    assert [m.split(":")[0] for m in caplog.messages] == [
        "metadata database from before schema migrations",
        "applied schema migration 0002",
        "applied schema migration 0003",
        "applied schema migration 0004",
        "applied schema migration 0005",
        "applied schema migration 0006",
        "applied schema migration 0007",
        "applied schema migration 0008",
        "applied schema migration 0009",
        "applied schema migration 0010",
        "applied schema migration 0011",
        "applied schema migration 0012",
        "applied schema migration 0013",
    ]


def test_a_failed_migration_leaves_the_database_as_it_was(tmp_path):
    path = tmp_path / "ragtopics.db"
    url = copy_fixture(path)
    with sqlite3.connect(path) as con:  # chat_turn is migrated last: topic and document were already rebuilt
        con.execute("UPDATE chat_turn SET timings_json = 'not json' WHERE id = 2")
    con.close()
    before = dump(path)

    with pytest.raises(MigrationError, match="chat_turn row 2: the stored value is not JSON"):
        MetadataStore(url)

    assert dump(path) == before
    assert "alembic_version" not in inspect(create_engine(url)).get_table_names()


def test_database_of_a_newer_release_is_refused_untouched(tmp_path):
    path = tmp_path / "ragtopics.db"
    url = f"sqlite:///{path}"
    MetadataStore(url)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE alembic_version SET version_num = '9999'")
    con.close()
    before = dump(path)

    with pytest.raises(MigrationError, match=f"from revision 9999 to {head_revision()}"):
        MetadataStore(url)
    assert dump(path) == before


def test_in_memory_sqlite_is_refused_with_the_reason():
    with pytest.raises(MigrationError, match="in-memory SQLite"):
        MetadataStore("sqlite://")


def test_database_lacking_a_newer_table_gets_it_when_marked(tmp_path):
    path = tmp_path / "ragtopics.db"
    url = copy_fixture(path)
    with sqlite3.connect(path) as con:  # as a release older than the one before migrations left it
        con.execute("DROP TABLE trace")
    con.close()

    store = MetadataStore(url)

    assert schema_revision(store.engine) == head_revision() and schema_differences(store) == []
    assert len(dump(path)["chat_turn"]) == 2


def open_store(url: str, barrier) -> None:
    """Child process: wait for the others, then open the store (and migrate if first)."""
    barrier.wait(timeout=60)
    MetadataStore(url)


def test_processes_opening_a_new_database_together_all_succeed(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared' / 'ragtopics.db'}"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    children = [ctx.Process(target=open_store, args=(url, barrier)) for _ in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=120)

    assert [c.exitcode for c in children] == [0, 0, 0, 0]
    store = MetadataStore(url)
    assert schema_revision(store.engine) == head_revision() and schema_differences(store) == []
    with sqlite3.connect(tmp_path / "shared" / "ragtopics.db") as con:
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
    con.close()
    assert (tmp_path / "shared" / "ragtopics.db.migrate.lock").exists()
