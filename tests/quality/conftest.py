"""Fixtures of the evaluation tests: a small fleet Topic and its question file."""

from __future__ import annotations

import json

import pytest

from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import upload

FILES = {
    "pumps.txt": b"Pump P-7 is inspected every 90 days by the night shift.",
    "valves.txt": b"Valve A is serviced monthly. Valve B is serviced yearly.",
    "trucks.txt": b"Truck T-3 carries spare tyres and a jack.",
}
QUESTIONS = [
    {
        "question": "How often is pump P-7 inspected?",
        "answer": "every 90 days",
        "gold_sources": ["pumps.txt"],
        "expected_way": "SEARCH",
    },
    {
        "question": '=HYPERLINK("x") what does truck T-3 carry?',
        "answer": "spare tyres and a jack",
        "gold_sources": ["trucks.txt"],
    },
    {"question": "When is valve B serviced?", "gold_sources": ["Valves.TXT"]},
]


@pytest.fixture
def fleet(rt, run_jobs, tmp_path):
    topic = create_topic(rt, "Fleet", settings={"min_similarity_score": 0.0, "route_before_retrieval": False})
    for name, data in FILES.items():
        upload(rt, topic, name, data)
    run_jobs()
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(QUESTIONS))
    return path
