"""``make eval`` end to end on a tiny opaque set: both Topics ingested and timed, every way measured, and LOCAL's
entity bridging finding a second passage that neither similarity nor file names lead to."""

from __future__ import annotations

import json
import re

from bench import graph_recall

#: Opaque names, each passage under its title line, as ``shared/eval/hotpotqa-opaque`` is laid out.
CORPUS = {
    "doc 0001": ["Blue Harbor\n\nBlue Harbor is a 1986 drama film directed by Maren Holt. It was shot in Leland."],
    "doc 0002": ["Leland\n\nLeland is a town in Brunswick County, North Carolina, on the Cape Fear River."],
    "doc 0003": ["Harbor Lights\n\nHarbor Lights is a 1986 drama film shot in a harbor town of Maine."],
    "doc 0004": ["Red Harbor\n\nRed Harbor is a drama film directed by Maren Holt and shot in 1990."],
    "doc 0005": ["Film locations\n\nMany drama films of the 1980s were shot in small harbor towns."],
    "doc 0006": ["Maren Holt\n\nMaren Holt is a Norwegian film director born in Bergen."],
    "doc 0007": ["Harbor Town\n\nHarbor Town is a 1992 film about a county fair, shot where its director was born."],
    "doc 0008": ["Red Harbor (band)\n\nRed Harbor is a band from Oslo whose director of music was born in 1970."],
    "doc 0009": ["Blue Harbor Bridge\n\nThe Blue Harbor Bridge crosses a river in a small county town."],
    "doc 0010": ["County towns\n\nA county town is where a county's film archive was shot and kept."],
    "doc 0011": ["Directors born abroad\n\nSeveral drama film directors were born abroad and shot films at home."],
    "doc 0012": ["Harbor Day\n\nHarbor Day is a festival in which towns show a drama film shot locally."],
}
QUESTIONS = [
    {
        "question": "In which county is the town where the film Blue Harbor was shot?",
        "answer": "Brunswick County",
        "supporting_facts": [["doc 0001", 0], ["doc 0002", 0]],
    },
    {
        "question": "Where was the director of Red Harbor born?",
        "answer": "Bergen",
        "supporting_facts": [["doc 0004", 0], ["doc 0006", 0]],
    },
]


def test_make_eval_measures_every_way_and_both_ingests(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "tiny-opaque"
    folder.mkdir()
    (folder / "corpus.json").write_text(json.dumps(CORPUS))
    (folder / "questions.json").write_text(json.dumps(QUESTIONS))
    monkeypatch.setenv("RAGTOPICS_EVAL_DIR", str(folder))

    assert graph_recall.main(["--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out

    assert "recall-rag: 12 passages ingested in" in out and "recall-graph: 12 passages ingested in" in out
    assert "GraphRAG (NLP) ingest / RAG ingest:" in out and "time in entity embedding" in out
    rows = {line.split("  ")[1].strip(): line.split() for line in out.splitlines() if line.startswith(("  RAG ", "  GraphRAG "))}
    assert {"RAG DENSE", "RAG HYBRID", "GraphRAG LOCAL FUSED", "GraphRAG LOCAL NODES"} <= set(rows)
    local_fused = float(rows["GraphRAG LOCAL FUSED"][-5])  # recall@5: both passages of both questions
    assert local_fused == 1.0
    assert "#### summary (recall@5)" in out and "tiny-opaque" in out

    # A second run finds both Topics in the data folder and ingests nothing.
    assert graph_recall.main(["--data-dir", str(tmp_path / "data")]) == 0
    assert "recall-graph: kept from the data folder" in capsys.readouterr().out


def test_the_ingest_breakdown_adds_up_to_the_ingest_time_and_shows_the_thread_apart():
    lines = graph_recall.breakdown(
        {"embed": 1000.0, "store": 2500.0, "graph_lock": 500.0}, {"embed_entities": 1500.0}, upload_s=1.0, total_s=6.5
    )
    added = {}
    for line in lines:
        label, seconds = re.match(r"\s+time in (.+?)\s+(-?\d+\.\d) s", line).groups()
        if "in a thread" not in line:
            added[label] = float(seconds)
    assert added["chunk embedding"] == 1.0 and added["store (chunks + graph)"] == 2.5 and added["graph_lock"] == 0.5
    assert added["receiving the uploads"] == 1.0 and added["no step"] == 1.5
    assert round(sum(added.values()), 6) == 6.5
    [thread] = [line for line in lines if "in a thread" in line]
    assert "entity embedding" in thread and "1.5 s" in thread
