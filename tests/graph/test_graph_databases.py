"""Graph Databases: a GraphRAG Topic on the app's own Redis (both modules, the embedded default) and on a
separate FalkorDB server (the compose file's layout), registered under Admin."""

from __future__ import annotations

import json

import pytest
import redis

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import get_document, upload_file
from ragtopics.errors import InvalidSettingError
from ragtopics.graph.databases import list_graph_databases, register_graph_database, remove_graph_database
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.store import GraphStore
from ragtopics.ops.redis_server import EmbeddedRedis
from ragtopics.topics.delete import delete_topic
from ragtopics.topics.topics import create_topic, update_settings
from tests.conftest import free_port
from tests.graph.test_upload import CURIE, EINSTEIN, NLP


@pytest.fixture(scope="module")
def falkordb_server(tmp_path_factory):
    """A second server, standing in for a separate FalkorDB container."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("falkordb"), free_port()).start()
    yield server
    server.stop()


def test_the_apps_own_redis_is_registered_by_default_and_holds_the_graph(rt, run_jobs):
    assert [d["name"] for d in list_graph_databases(rt)] == ["default"]
    topic = create_topic(rt, "Local", kind="graphrag", settings=NLP)
    upload_file(rt, topic, "curie.txt", CURIE.encode())
    run_jobs()
    assert graph_store(rt, topic).client is rt.redis
    assert GraphStore(rt.redis, topic.id).stats()["entities"] > 0


def test_a_topic_on_a_separate_falkordb_server_keeps_its_graph_there(rt, run_jobs, falkordb_server):
    other = redis.Redis.from_url(falkordb_server.url)
    other.flushall()
    register_graph_database(rt, "graphs", falkordb_server.url)
    assert [d["name"] for d in list_graph_databases(rt)] == ["default", "graphs"]
    topic = create_topic(rt, "Remote", kind="graphrag", settings={**NLP, "graph_database": "graphs"})
    curie = upload_file(rt, topic, "curie.txt", CURIE.encode())
    upload_file(rt, topic, "einstein.txt", EINSTEIN.encode())
    run_jobs()
    assert get_document(rt, curie.id).status == "indexed", get_document(rt, curie.id).error

    there, here = GraphStore(other, topic.id), GraphStore(rt.redis, topic.id)
    assert there.stats()["entities"] > 0 and there.stats()["documents"] == 2 and not here.exists()
    assert there.entity_by_name("Paris") is not None and there.entity_by_name("Albert Einstein") is not None
    assert rt.chunk_index(topic.id).count() == 4  # chunks and their vectors stay in the app's Redis

    with pytest.raises(InvalidSettingError, match="already holds .* entities in 'graphs'"):
        update_settings(rt, topic.id, {"graph_database": ""})
    delete_document(rt, topic, "einstein.txt")
    assert there.entity_by_name("Albert Einstein") is None and there.entity_by_name("Paris") is not None

    with pytest.raises(InvalidSettingError, match="used by Topic"):
        remove_graph_database(rt, "graphs")
    delete_topic(rt, topic.name)
    assert not there.exists()
    remove_graph_database(rt, "graphs")
    assert [d["name"] for d in list_graph_databases(rt)] == ["default"]


def test_unregistered_or_unusable_graph_databases_are_refused(rt, redis_server):
    with pytest.raises(InvalidSettingError, match="no graph database called 'nowhere' is registered"):
        create_topic(rt, "Lost", kind="graphrag", settings={"graph_database": "nowhere"})
    topic = create_topic(rt, "Found", kind="graphrag")
    with pytest.raises(InvalidSettingError, match="graph_database: no graph database called 'nowhere'"):
        update_settings(rt, topic.id, {"graph_database": "nowhere"})
    with pytest.raises(InvalidSettingError, match="does not answer"):
        register_graph_database(rt, "dead", f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(InvalidSettingError, match="must start with redis://"):
        register_graph_database(rt, "web", "http://example.org")
    with pytest.raises(InvalidSettingError, match="name"):
        register_graph_database(rt, "default", redis_server.url)
    assert [d["name"] for d in list_graph_databases(rt)] == ["default"]


def test_graph_databases_from_the_cli_and_the_admin_tab(rt, falkordb_server, capsys):
    from ragtopics.ui.admin_tab import change_graph_databases
    from ragtopics.ui.cli import main

    assert main(["graphdb", "add", "graphs", falkordb_server.url]) == 0
    capsys.readouterr()
    assert main(["graphdb", "list"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)] == ["default", "graphs"]
    assert main(["graphdb", "add", "graphs", falkordb_server.url]) == 2
    assert "already registered" in capsys.readouterr().err

    table, message = change_graph_databases(rt, "remove", "graphs", "")
    assert table == [["default", list_graph_databases(rt)[0]["url"]]] and "Removed" in message
    table, message = change_graph_databases(rt, "add", "bad name!", falkordb_server.url)
    assert message.startswith("**Not changed:**") and len(table) == 1
    table, message = change_graph_databases(rt, "add", "graphs", falkordb_server.url)
    assert [row[0] for row in table] == ["default", "graphs"]


def test_graph_ingestion_from_a_registered_graph_database_by_name(rt, falkordb_server, capsys):
    from ragtopics.ui.cli import main

    other = redis.Redis.from_url(falkordb_server.url)
    other.flushall()
    other.execute_command(
        "GRAPH.QUERY",
        "people",
        "CREATE (:Person {name: 'Ada Lovelace', description: 'A mathematician.'})"
        "-[:WORKED_WITH]->(:Person {name: 'Charles Babbage', description: 'An inventor.'})",
    )
    register_graph_database(rt, "graphs", falkordb_server.url)
    topic = create_topic(rt, "Imported", kind="graphrag", settings=NLP)
    assert main(["graph", topic.name, "--from-falkordb", "graphs", "--graph", "people"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["entities"] == 2 and report["relationships"] == 1
    assert graph_store(rt, topic).entity_by_name("Ada Lovelace") is not None
