"""The Graph tab's "Correct the graph" panel through the console's HTTP API: an operator corrects, a viewer is refused."""

from __future__ import annotations

import json

import pytest
from gradio_client import Client

from ragtopics.access import users
from ragtopics.graph.corrections import list_corrections
from ragtopics.graph.ingest import graph_store
from ragtopics.ui import web
from ragtopics.ui.app import launch_console
from ragtopics.ui.cli import main
from tests.conftest import free_port
from tests.graph.test_corrections import plant  # noqa: F401 - a GraphRAG Topic with one uploaded file

PASSWORD = "correct horse battery"


@pytest.fixture
def console(rt, plant):
    users.create_user(rt, "ada", PASSWORD, "admin")  # with an admin the console needs login
    users.create_user(rt, "otto", PASSWORD, "operator")
    users.create_user(rt, "vic", PASSWORD, "viewer")
    server, url, _ = launch_console(rt, host="127.0.0.1", port=free_port())
    yield server, url
    server.close()


def client(rt, url: str, username: str) -> Client:
    return Client(url, verbose=False, headers={"Authorization": f"Bearer {users.make_token(rt, username)}"})


def test_an_operator_corrects_the_graph_in_the_console_and_a_viewer_is_refused(rt, console, plant):
    server, url = console
    correct_fn = next(i for i, f in server.blocks.fns.items() if f.api_name == "correct_graph")
    assert server.blocks.ragtopics_needs[correct_fn] == web.ROLE_OF_PAGE["graph_corrections"] == "operator"

    with pytest.raises(Exception, match=r"Not allowed: vic \(viewer\)"):
        client(rt, url, "vic").predict("Plant", "merge", "USA", "United States", 1, api_name="/correct_graph")
    assert list_corrections(rt, plant.id) == []
    assert graph_store(rt, plant).entity_by_name("USA").name == "USA"

    status, table, shown, picture, details = client(rt, url, "otto").predict(
        "Plant", "merge", "USA", "United States", 1, api_name="/correct_graph"
    )
    assert (
        status.startswith('Correction **#1**: merged "USA" \\(PLACE\\) into "United States"')
        and "Later uploads apply it" in status
    )
    assert shown == "United States" and "data-entity='United States'" in picture
    assert "**History** (corrections, applied again at every upload):" in details and "by otto" in details
    assert [row[1:3] for row in table["data"]] == [['merged "USA" (PLACE) into "United States" (PLACE)', "otto"]]
    assert graph_store(rt, plant).entity_by_name("USA").name == "United States"

    refused, *_ = client(rt, url, "otto").predict("Plant", "split", "Jaguar", "Boiler", 1, api_name="/correct_graph")
    assert refused == "**Not corrected:** 'Jaguar' is not an alias of 'Boiler' (its aliases: none)"
    assert len(list_corrections(rt, plant.id)) == 1


def test_the_cli_corrects_the_graph_and_lists_the_corrections(rt, plant, capsys):
    assert main(["graph", "Plant", "--retype", "Jaguar", "--type", "concept"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert (
        made["kind"] == "retype" and made["summary"] == 'changed the type of "Jaguar" from ANIMAL to CONCEPT' and made["by"] == ""
    )
    assert main(["graph", "Plant", "--delete-entity", "Gremlin"]) == 0
    capsys.readouterr()
    assert main(["graph", "Plant", "--corrections"]) == 0
    assert [c["kind"] for c in json.loads(capsys.readouterr().out)] == ["retype", "delete"]
    assert main(["graph", "Plant", "--entity", "Jaguar"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["type"] == "CONCEPT" and [h["kind"] for h in shown["history"]] == ["retype"]
    assert main(["graph", "Plant", "--merge", "USA"]) == 2
    assert "--merge needs --into" in capsys.readouterr().err
    assert main(["graph", "Plant", "--entity", "USA", "--into", "United States"]) == 2
    assert "--into goes with --merge" in capsys.readouterr().err
    assert main(["graph", "Plant", "--rename", "Gremlin", "--to", "Goblin"]) == 2
    assert "has no entity called 'Gremlin'" in capsys.readouterr().err
    assert len(list_corrections(rt, plant.id)) == 2 and graph_store(rt, plant).entity_by_name("Gremlin") is None
