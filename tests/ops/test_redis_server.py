"""The embedded Redis: modules loaded, loopback only, data kept across restarts, clear refusals."""

from __future__ import annotations

import subprocess
import time

import numpy as np
import pytest
import redis

from ragtopics.errors import StoreUnavailableError
from ragtopics.ops.redis_server import EmbeddedRedis, RedisServerPaths, RedisStartError, check_modules
from ragtopics.runtime import Runtime
from ragtopics.settings.env import Settings
from ragtopics.storage.chunk_index import ChunkIndex, ChunkRecord
from tests.conftest import free_port


def test_embedded_server_has_search_and_graph_on_loopback_with_aof(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    names = {m[b"name"] for m in client.execute_command("MODULE", "LIST")}
    assert {b"search", b"graph"} <= names
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("bind")["bind"] == "127.0.0.1"
    search = next(m for m in client.execute_command("MODULE", "LIST") if m[b"name"] == b"search")
    assert search[b"args"][:2] == [b"ON_TIMEOUT", b"FAIL"]


class SlowLoadingRedis(EmbeddedRedis):
    """The embedded Redis reading its data back slowly (1 ms a key) and answering LOADING meanwhile, as a large
    data set loads (Redis answers while loading only every 2 MB read by default)."""

    def command(self) -> list[str]:
        return [*super().command(), "--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024"]


def test_a_server_still_loading_its_data_is_waited_for_not_stopped(tmp_path, caplog):
    server = EmbeddedRedis(tmp_path, free_port()).start()
    try:
        client = redis.Redis.from_url(server.url)
        with client.pipeline(transaction=False) as pipe:
            for n in range(3_000):
                pipe.set(f"k{n}", n)
            pipe.execute()
        client.bgrewriteaof()  # the keys go to the AOF's RDB base, which is what a key's load delay applies to
        while client.info("persistence")["aof_rewrite_in_progress"] or client.info("persistence")["aof_rewrite_scheduled"]:
            time.sleep(0.05)
    finally:
        server.stop()
    caplog.set_level("INFO", logger="ragtopics.ops.redis_server")
    # three seconds of loading against a wait of one: the server answers LOADING all along, and is not given up on
    again = SlowLoadingRedis(tmp_path, server.port).start(wait_s=1.0)
    try:
        assert redis.Redis.from_url(again.url).dbsize() == 3_000
        assert any("is loading its data" in m for m in caplog.messages)
    finally:
        again.stop()


def test_data_survives_a_restart(tmp_path):
    server = EmbeddedRedis(tmp_path, free_port()).start()
    try:
        redis.Redis.from_url(server.url).set("kept", "yes")
    finally:
        server.stop()
    again = EmbeddedRedis(tmp_path, server.port).start()
    try:
        assert redis.Redis.from_url(again.url).get("kept") == b"yes"
    finally:
        again.stop()


def test_a_taken_port_is_refused_with_advice(redis_server, tmp_path):
    with pytest.raises(RedisStartError, match="already in use.*EMBEDDED_REDIS_PORT"):
        EmbeddedRedis(tmp_path, redis_server.port).start()


def test_a_server_without_the_modules_is_refused(tmp_path):
    port = free_port()
    plain = subprocess.Popen(
        [
            str(RedisServerPaths.from_wheels().server),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        with pytest.raises(RedisStartError, match=r"RediSearch \('search'\), FalkorDB \('graph'\)"):
            check_modules(client)
        rt = Runtime(Settings(REDIS_URL=f"redis://127.0.0.1:{port}/0", RAGTOPICS_DATA_DIR=tmp_path, _env_file=None))
        with pytest.raises(StoreUnavailableError, match="lacks the module"):
            rt.check_store()
    finally:
        plain.terminate()
        plain.wait()


def test_unreachable_redis_says_how_to_start_it(tmp_path):
    rt = Runtime(Settings(EMBEDDED_REDIS_PORT=free_port(), RAGTOPICS_DATA_DIR=tmp_path, _env_file=None))
    with pytest.raises(StoreUnavailableError, match="ragtopics up"):
        rt.check_store()


def test_chunk_index_refuses_vectors_of_the_wrong_size(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    index = ChunkIndex(client, "topic-wrongdims", dims=4)
    bad = ChunkRecord("chunk-1", "doc-1", "a.txt", 0, "text", np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="expects"):
        index.replace_document("doc-1", [bad])
    assert index.count() == 0
    index.drop()


def test_vector_search_scores_are_cosine_similarities(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    index = ChunkIndex(client, "topic-cosine", dims=2)
    try:
        index.replace_document(
            "doc-1",
            [
                ChunkRecord("chunk-a", "doc-1", "a.txt", 0, "east", np.array([1.0, 0.0], dtype=np.float32)),
                ChunkRecord("chunk-b", "doc-1", "a.txt", 1, "north-east", np.array([0.6, 0.8], dtype=np.float32)),
            ],
        )
        hits = index.search_vector(np.array([1.0, 0.0], dtype=np.float32), 2)
        assert [h.chunk_id for h in hits] == ["chunk-a", "chunk-b"]
        # half-precision vectors (VECTOR_DATATYPE): 0.6 is stored as 0.6001
        assert hits[0].score == pytest.approx(1.0, abs=1e-3) and hits[1].score == pytest.approx(0.6, abs=1e-3)
    finally:
        index.drop()


def test_a_checkout_keeps_its_data_in_its_own_var_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAGTOPICS_DATA_DIR", raising=False)
    settings = Settings(_env_file=None)
    assert settings.data_dir.is_absolute() and settings.data_dir.name == "var"
    assert (settings.data_dir.parent / "pyproject.toml").exists()
