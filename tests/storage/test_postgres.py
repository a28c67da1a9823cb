"""The metadata on PostgreSQL (``DATABASE_URL=postgresql+psycopg://...``), against a throwaway cluster of Debian's
PostgreSQL: the migrations from an empty database, and Topics, the document state machine, chats and users
through the product's own functions. Skipped, saying why, where PostgreSQL is not installed."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel, select

from ragtopics.access import users
from ragtopics.answer.history import list_sessions, saved_turns
from ragtopics.answer.turn import ask
from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import get_document, list_documents, upload_file
from ragtopics.errors import SupersededError
from ragtopics.llm.gateway import ModelGateway
from ragtopics.runtime import Runtime, set_runtime
from ragtopics.settings.env import Settings
from ragtopics.storage import documents as document_store
from ragtopics.storage.metadata import MetadataStore, RoleEndpointRow, TopicSettingsVersion, utcnow
from ragtopics.storage.migrate import head_revision, schema_revision
from ragtopics.storage.topics import count_topic_rows
from ragtopics.topics.delete import delete_topic
from ragtopics.topics.topics import create_topic, get_topic, update_settings
from tests.services import PostgresCluster, running


@pytest.fixture(scope="module")
def postgres():
    yield from running(PostgresCluster, "ragtopics-pg-")


@pytest.fixture
def pg_url(postgres, tmp_path) -> str:
    """An empty database of its own for each test."""
    return postgres.create_database(f"t_{tmp_path.name.lower().replace('-', '_')}"[:60])


def schema_differences(store: MetadataStore) -> list:
    with store.engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)


def test_migrations_build_an_empty_database_that_matches_the_models(pg_url, postgres):
    print(f"\n{postgres.version}")
    opened: list[MetadataStore] = []
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            opened.append(MetadataStore(pg_url))
        except BaseException as exc:
            errors.append(exc)

    racers = [threading.Thread(target=open_store) for _ in range(3)]  # the console and two workers starting together
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert errors == [] and len(opened) == 3
    store = opened[0]
    assert schema_revision(store.engine) == head_revision()
    assert schema_differences(store) == []
    MetadataStore(pg_url)  # at head: nothing to do
    assert schema_revision(store.engine) == head_revision()
    for other in opened:
        other.engine.dispose()


def test_topics_documents_chats_and_users_on_postgresql(pg_url, tmp_path, redis_server, scripted_llm, embedder):
    settings = Settings(
        RAGTOPICS_DATA_DIR=tmp_path / "var",
        REDIS_URL=redis_server.url,
        DATABASE_URL=pg_url,
        LLM_BASE_URL=scripted_llm.base_url,
        LLM_MODEL="scripted",
        LLM_TIMEOUT_S=10,
        RQ_QUEUE=f"test-{tmp_path.name}",
        _env_file=None,
    )
    rt = Runtime(settings)
    rt.redis.flushall()
    rt._gateway = ModelGateway(settings, embedder=embedder)
    scripted_llm.reset()
    set_runtime(rt)
    try:
        _exercise(rt, scripted_llm)
    finally:
        set_runtime(None)
        rt.metadata.engine.dispose()


def _exercise(rt: Runtime, scripted_llm) -> None:
    from rq import SimpleWorker

    from ragtopics.jobs.queue import queue_for

    def run_jobs() -> None:
        SimpleWorker([queue_for(rt)], connection=rt.redis).work(burst=True, logging_level="WARNING")

    # Topics: settings are JSON, versioned; times are instants (the server's time zone is not UTC)
    before = utcnow()
    topic = create_topic(rt, "Plant", settings={"chunk_size": 200, "chunk_overlap": 0})
    stored = rt.metadata.topic_by_name("Plant")
    assert before <= stored.created_at <= utcnow() and stored.created_at.utcoffset() == timedelta(0)
    update_settings(rt, topic.id, {"top_k_results": 3})
    assert get_topic(rt, "Plant").settings.top_k_results == 3
    with rt.metadata.session() as s:
        versions = s.exec(select(TopicSettingsVersion).where(TopicSettingsVersion.topic_id == topic.id)).all()
    assert sorted(v.version for v in versions) == [1, 2] and isinstance(versions[0].settings, dict)

    # documents: queued -> processing -> indexed; a newer upload supersedes the job of the older one
    doc = upload_file(rt, topic, "boiler.txt", b"Boiler B-12 must be descaled every spring.")
    upload_file(rt, topic, "pump.txt", b"Pump P-3 is serviced every 4 months.")
    assert {d.status for d in list_documents(rt, topic)} == {"queued"}
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed" and row.chunk_count >= 1 and row.indexed_with["chunk_size"] == 200
    old_job = row.job_id
    newer = upload_file(rt, topic, "boiler.txt", b"Boiler B-12 must be descaled every autumn.")
    assert newer.id == doc.id and newer.job_id != old_job and get_document(rt, doc.id).status == "queued"
    with pytest.raises(SupersededError):
        document_store.check_current(rt.metadata, doc.id, old_job)
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed" and rt.blobs.read(get_document(rt, doc.id).blob_path).endswith(b"autumn.")

    # chats: a saved turn keeps its sources and timings as JSON
    scripted_llm.replies["answer"] = "Every autumn [S1]."
    final = list(ask(rt, topic, "When is boiler B-12 descaled?"))[-1]
    [session] = list_sessions(rt, topic)
    [turn] = saved_turns(rt, session.id)
    assert session.id == final.session_id and turn.sources[0].file == "boiler.txt" and turn.sources[0].status == "current"

    # users: booleans, tokens, the first admin adopting the chats saved without login
    users.create_user(rt, "ada", "correct horse battery", "admin")
    users.create_user(rt, "vic", "staple battery horse", "viewer", dev_reporting=True)
    assert users.authenticate(rt, "vic", "staple battery horse").dev_reporting is True
    token = users.make_token(rt, "vic", "agent")
    assert users.user_of_token(rt, token).username == "vic"
    assert list_sessions(rt, topic)[0].owner == "ada"
    with rt.metadata.session() as s:
        s.add(RoleEndpointRow(role="router", base_url="http://models:8000/v1", model="small", supports_tools=True))
    with rt.metadata.session() as s:
        endpoint = s.get(RoleEndpointRow, "router")
    assert (endpoint.supports_tools, endpoint.supports_images) == (True, False)

    # deletes remove every row
    delete_document(rt, topic, "pump.txt")
    assert [d.file_name for d in list_documents(rt, topic)] == ["boiler.txt"]
    delete_topic(rt, "Plant")
    assert set(count_topic_rows(rt.metadata, topic.id).values()) == {0}
