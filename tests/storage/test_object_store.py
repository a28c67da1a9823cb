"""Files in an S3-compatible object store (``FILE_STORE=s3``), against a real SeaweedFS server on loopback.

The console and the worker are two runtimes with data folders of their own (as on two machines): they share
only Redis, the metadata database and the bucket.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from rq import SimpleWorker

from ragtopics.access.context import SCOPE_USER
from ragtopics.access.users import User
from ragtopics.answer.turn import ask
from ragtopics.api.health import readiness
from ragtopics.demo import links
from ragtopics.demo.links import DEMO_PREFIX
from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.errors import ConfigurationError
from ragtopics.jobs.queue import queue_for
from ragtopics.llm.gateway import ModelGateway
from ragtopics.runtime import Runtime, set_runtime
from ragtopics.settings.env import Settings
from ragtopics.storage.blobs import FileStoreError
from ragtopics.storage.s3 import S3FileStore
from ragtopics.topics.delete import delete_topic
from ragtopics.topics.topics import create_topic
from ragtopics.ui.demo_page import add_demo_routes
from ragtopics.ui.files_route import add_file_route
from tests.services import S3_ACCESS_KEY, S3_SECRET_KEY, SeaweedS3, running

BUCKET = "ragtopics-files"


@pytest.fixture(scope="module")
def s3_server():
    yield from running(SeaweedS3, "ragtopics-s3-")


@pytest.fixture
def machines(tmp_path, redis_server, scripted_llm, embedder, s3_server):
    """``(console, worker)``: runtimes with their own data folders, one bucket prefix per test."""

    def runtime(name: str) -> Runtime:
        settings = Settings(
            RAGTOPICS_DATA_DIR=tmp_path / name,
            REDIS_URL=redis_server.url,
            DATABASE_URL=f"sqlite:///{tmp_path / 'shared' / 'ragtopics.db'}",
            LLM_BASE_URL=scripted_llm.base_url,
            LLM_MODEL="scripted",
            LLM_TIMEOUT_S=10,
            RQ_QUEUE=f"test-{tmp_path.name}",
            FILE_STORE="s3",
            S3_ENDPOINT_URL=s3_server.endpoint_url,
            S3_BUCKET=BUCKET,
            S3_PREFIX=tmp_path.name,
            S3_ACCESS_KEY_ID=S3_ACCESS_KEY,
            S3_SECRET_ACCESS_KEY=S3_SECRET_KEY,
            _env_file=None,
        )
        rt = Runtime(settings)
        rt._gateway = ModelGateway(settings, embedder=embedder)
        return rt

    console, worker = runtime("console"), runtime("worker")
    console.redis.flushall()
    scripted_llm.reset()
    set_runtime(console)
    yield console, worker
    set_runtime(None)


def run_worker(worker: Runtime) -> None:
    """Run the queued jobs as the worker machine does: its runtime is the process's."""
    set_runtime(worker)
    try:
        SimpleWorker([queue_for(worker)], connection=worker.redis).work(burst=True, logging_level="WARNING")
    finally:
        set_runtime(None)


def files_app(rt: Runtime) -> TestClient:
    """The console's ``/files`` route, with the caller named by an ``X-User`` header (``name:role``)."""
    api = FastAPI()

    @api.middleware("http")
    async def caller(request, call_next):
        name, _, role = request.headers.get("x-user", "").partition(":")
        request.scope[SCOPE_USER] = User(name, role) if name else None
        return await call_next(request)

    add_file_route(api, rt)
    return TestClient(api)


def local_files(rt: Runtime) -> list[Path]:
    return [p for p in rt.settings.data_dir.rglob("*") if p.is_file() and p.name != "link-secret"]


def test_upload_goes_to_the_bucket_and_a_worker_without_the_file_indexes_it(machines, s3_server, scripted_llm):
    console, worker = machines
    prefix = f"{console.settings.s3_prefix}/"
    topic = create_topic(console, "Boilers", settings={"chunk_size": 200, "chunk_overlap": 0})
    text = b"Boiler B-12 must be descaled every spring. Boiler B-14 is replaced in 2031."
    doc = upload_file(console, topic, "boilers.txt", text)

    key = prefix + doc.pending_blob_path
    assert key in s3_server.keys(BUCKET)
    assert s3_server.client().get_object(Bucket=BUCKET, Key=key)["Body"].read() == text
    assert local_files(console) == [] and local_files(worker) == []  # neither machine keeps the file on disk

    run_worker(worker)
    row = get_document(console, doc.id)
    assert row.status == "indexed" and row.chunk_count >= 1 and row.blob_path == doc.pending_blob_path
    assert local_files(worker) == []

    scripted_llm.replies["answer"] = "Every spring [S1]."
    final = list(ask(console, topic, "When is boiler B-12 descaled?"))[-1]
    link = final.sources[0].link
    assert link.startswith("/files/")
    client = files_app(console)
    served = client.get(link, headers={"x-user": "ada:admin"})
    assert served.status_code == 200 and served.content == text
    assert served.headers["content-type"] == "text/plain; charset=utf-8"
    assert served.headers["content-disposition"] == 'inline; filename="boilers.txt"'
    assert served.headers["x-content-type-options"] == "nosniff"
    for_vic = console.signer.sign(row.blob_path, user="vic")
    assert client.get(for_vic, headers={"x-user": "vic:viewer"}).content == text
    assert client.get(for_vic, headers={"x-user": "otto:viewer"}).status_code == 403

    removed = delete_document(console, topic, "boilers.txt")
    assert removed["files"] == 1
    assert [k for k in s3_server.keys(BUCKET) if k.startswith(prefix)] == []
    gone = client.get(for_vic, headers={"x-user": "vic:viewer"})
    assert gone.status_code == 410 and "no longer stored" in gone.text


def test_a_demo_link_serves_its_source_files_from_the_bucket(machines):
    console, worker = machines
    topic = create_topic(console, "Valves", settings={"chunk_size": 200, "chunk_overlap": 0})
    text = b"Valve V-3 is closed every Friday."
    doc = upload_file(console, topic, "valves.txt", text)
    run_worker(worker)
    new = links.create_link(console, "Valves", allow_sources=True)
    api = FastAPI()
    add_demo_routes(api, console)
    client = TestClient(api)
    blob = get_document(console, doc.id).blob_path
    file_token = console.signer.sign(blob, user=links.source_owner(new.link)).split("/files/")[1]

    served = client.get(f"{DEMO_PREFIX}{new.token}/files/{file_token}")
    assert served.status_code == 200 and served.content == text
    assert served.headers["content-disposition"] == 'inline; filename="valves.txt"'
    assert served.headers["content-type"] == "text/plain; charset=utf-8" and served.headers["cache-control"] == "no-store"

    delete_document(console, topic, "valves.txt")
    gone = client.get(f"{DEMO_PREFIX}{new.token}/files/{file_token}")
    assert gone.status_code == 410 and "no longer stored" in gone.text


def test_a_new_version_replaces_the_object_and_deleting_a_topic_deletes_its_objects(machines, s3_server):
    console, worker = machines
    prefix = f"{console.settings.s3_prefix}/"
    pumps = create_topic(console, "Pumps")
    valves = create_topic(console, "Valves")
    for n in range(3):
        upload_file(console, pumps, f"pump-{n}.md", f"Pump P{n} is serviced every {n + 2} months.".encode())
    upload_file(console, valves, "valve.md", b"Valve V1 is checked weekly.")
    run_worker(worker)
    upload_file(console, pumps, "pump-0.md", b"Pump P0 is now serviced every month.")
    run_worker(worker)

    def objects(topic_id: str) -> list[str]:
        return [k for k in s3_server.keys(BUCKET) if k.startswith(f"{prefix}{topic_id}/")]

    assert len(objects(pumps.id)) == 3  # the replaced version's object is gone
    replaced = [k for k in objects(pumps.id) if k.endswith("/pump-0.md")]
    assert len(replaced) == 1
    assert s3_server.client().get_object(Bucket=BUCKET, Key=replaced[0])["Body"].read() == b"Pump P0 is now serviced every month."

    deletion = delete_topic(console, "Pumps")
    assert deletion.removed["files"] == 3
    assert objects(pumps.id) == [] and len(objects(valves.id)) == 1


def test_readiness_checks_the_object_store(machines):
    console, _ = machines
    ready, checks = readiness(console)
    assert ready and checks["files"]["ok"] and checks["files"]["detail"].startswith("answers")
    console.blobs.bucket = "no-such-store-bucket"
    assert console.blobs.ping() == "answers; the bucket is created by the first upload"
    console.blobs.client = S3FileStore(
        BUCKET, endpoint_url=console.blobs.endpoint_url, access_key_id=S3_ACCESS_KEY, secret_access_key="wrong"
    ).client
    ready, checks = readiness(console)
    assert (
        not ready
        and not checks["files"]["ok"]
        and "check S3_ENDPOINT_URL, S3_BUCKET and the S3 keys" in checks["files"]["detail"]
    )


def test_paths_outside_the_store_and_missing_objects_are_refused(s3_server):
    store = S3FileStore(
        BUCKET, endpoint_url=s3_server.endpoint_url, access_key_id=S3_ACCESS_KEY, secret_access_key=S3_SECRET_KEY, prefix="checks"
    )
    rel, digest = store.put("topic", "doc", "a.txt", b"alpha")
    assert store.read(rel) == b"alpha" and store.exists(rel) and len(digest) == 64
    for bad in ("../a.txt", "/topic/doc/a.txt", "topic//a.txt", "topic/./a.txt", ""):
        assert not store.exists(bad)
        with pytest.raises(ValueError, match="outside the file store"):
            store.read(bad)
    with pytest.raises(ValueError, match="cannot be part of a path"):
        store.put("topic", "doc", "../escape.txt", b"x")
    with pytest.raises(FileNotFoundError, match="not in the file store"):
        store.read("topic/doc/nothing/a.txt")
    store.remove(rel)
    store.remove(rel)  # missing is fine
    assert not store.exists(rel) and store.remove_tree("topic") == 0


def test_wrong_keys_and_an_unreachable_store_say_what_to_check(s3_server, tmp_path):
    forged = S3FileStore(BUCKET, endpoint_url=s3_server.endpoint_url, access_key_id=S3_ACCESS_KEY, secret_access_key="wrong")
    with pytest.raises(FileStoreError, match="could not store t/d/.*check S3_ENDPOINT_URL, S3_BUCKET and the S3 keys"):
        forged.put("t", "d", "a.txt", b"x")
    with pytest.raises(ConfigurationError, match="FILE_STORE=s3 needs S3_BUCKET"):
        Settings(FILE_STORE="s3", RAGTOPICS_DATA_DIR=tmp_path, _env_file=None)
    with pytest.raises(ConfigurationError, match="S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY"):
        Settings(FILE_STORE="s3", S3_BUCKET="b", S3_ACCESS_KEY_ID="k", RAGTOPICS_DATA_DIR=tmp_path, _env_file=None)


def test_pictures_of_a_document_are_objects_too(machines, s3_server):
    from sqlmodel import select

    from ragtopics.storage.metadata import PictureRow
    from tests.ingest.test_pictures import pump_docx

    console, worker = machines
    prefix = f"{console.settings.s3_prefix}/"
    topic = create_topic(console, "Pumps", settings={"min_similarity_score": 0.0})
    doc = upload_file(console, topic, "pump.docx", pump_docx())
    run_worker(worker)
    assert get_document(console, doc.id).status == "indexed"
    with console.metadata.session() as s:
        [picture] = s.exec(select(PictureRow).where(PictureRow.document_id == doc.id)).all()
    png = s3_server.client().get_object(Bucket=BUCKET, Key=prefix + picture.blob_path)["Body"].read()
    assert png.startswith(b"\x89PNG") and local_files(worker) == []
    served = files_app(console).get(console.signer.sign(picture.blob_path, user="vic"), headers={"x-user": "vic:viewer"})
    assert served.status_code == 200 and served.content == png and served.headers["content-type"] == "image/png"

    assert delete_document(console, topic, "pump.docx")["files"] == 2  # the file and its picture
    assert [k for k in s3_server.keys(BUCKET) if k.startswith(prefix)] == []


def test_an_evaluation_run_and_a_dev_report_reach_the_console_from_a_worker_on_another_machine(machines, s3_server):
    import json

    from ragtopics.jobs.queue import job_progress
    from ragtopics.quality.runs import list_runs, load_run, result_files, start_run
    from ragtopics.tracing import reports

    console, worker = machines
    topic = create_topic(
        console,
        "Boilers",
        settings={"chunk_size": 200, "chunk_overlap": 0, "min_similarity_score": 0.0, "route_before_retrieval": False},
    )
    reports.set_switch(console, "upload", True)
    upload_file(console, topic, "boilers.txt", b"Boiler B-12 must be descaled every spring.")
    questions = [{"question": "When is boiler B-12 descaled?", "answer": "every spring", "gold_sources": ["boilers.txt"]}]
    run_id = start_run(console, "Boilers", json.dumps(questions), retrieval_only=True)
    run_worker(worker)  # the upload, then the run: the worker reads the run's request from the bucket

    assert job_progress(console, run_id).status == "finished"
    info, rows = load_run(console, run_id)
    assert info.summary["n"] == 1 and info.summary["recall@1"] == 1.0 and rows[0]["files"] == ["boilers.txt"]
    assert [r.run_id for r in list_runs(console)] == [run_id]
    files = result_files(console, run_id)  # copies on the console's machine, for download
    assert sorted(p.name for p in files) == ["questions.csv", "questions.json", "summary.json"]
    assert json.loads(files[0].read_text())["n"] == 1
    (row,) = reports.list_reports(console)
    assert reports.load_report(console, row.id)["subject"] == "boilers.txt"  # written by the worker, read by the console
    assert local_files(worker) == []  # the worker kept nothing on its disk
    keys = s3_server.keys(BUCKET)
    assert f"{console.settings.s3_prefix}/evals/{run_id}/request.json" in keys
    assert f"{console.settings.s3_prefix}/{row.path}" in keys
