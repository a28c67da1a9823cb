"""Upload-time prompts honour the overrides the Prompts tab stores (per Topic, then shared)."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from ragtopics.documents.uploads import get_document
from ragtopics.prompts.resolve import SHARED, set_prompt
from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import upload

#: An override per upload-time prompt, using exactly the default's variables (as the Prompts tab requires).
OVERRIDES = {
    "context_line": "TOPIC-CONTEXT: where does this sit?\n$document\n---\n$chunk",
    "keywords": "TOPIC-KEYWORDS: list terms of\n$text",
    "narrate": "TOPIC-NARRATE: retell\n$record",
    "describe_picture": "TOPIC-DESCRIBE: caption $caption; near: $neighbour_text",
}
ENRICHING = {
    "chunking_strategy": "SEMANTIC",
    "retrieval_strategy": "HYBRID",
    "keyword_enrichment": "LLM",
    "import_strategy": "NARRATE",
    "describe_pictures": True,
}


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (20, 20), "blue").save(buffer, format="PNG")
    return buffer.getvalue()


def _first_text(body: dict) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else next(p["text"] for p in content if p["type"] == "text")


@pytest.fixture
def scripted(scripted_llm, reconfigure):
    reconfigure(LLM_SUPPORTS_IMAGES=True)
    scripted_llm.replies.update(
        {
            "context_line": "In the parts list.",
            "keywords": "bracket, Lyon",
            "narrate": "A bracket made in Lyon.",
            "describe_picture": "A blue square.",
        }
    )
    return scripted_llm


def test_every_upload_prompt_uses_the_topics_override(rt, run_jobs, scripted):
    topic = create_topic(rt, "Overridden", settings=ENRICHING)
    other = create_topic(rt, "Defaults", settings=ENRICHING)
    for name, text in OVERRIDES.items():
        set_prompt(rt, topic.id, name, text)
    records, _ = upload(rt, topic, "parts.json", json.dumps([{"part": "SK-1", "city": "Lyon"}]).encode())
    picture, _ = upload(rt, topic, "square.png", _png())
    run_jobs()
    assert get_document(rt, records.id).status == "indexed" and get_document(rt, picture.id).status == "indexed"
    for name, text in OVERRIDES.items():
        sent = [_first_text(body) for body in scripted.prompts(name)]
        assert sent, f"no {name} call"
        assert all(s.startswith(text.split(":")[0] + ":") for s in sent), (name, sent)

    scripted.requests.clear()
    upload(rt, other, "parts.json", json.dumps([{"part": "SK-2", "city": "Oslo"}]).encode())
    run_jobs()
    assert not any("TOPIC-" in _first_text(body) for _, body in scripted.requests)  # another Topic keeps the defaults


def test_a_shared_override_reaches_uploads_unless_the_topic_has_its_own(rt, run_jobs, scripted):
    topic = create_topic(rt, "Shared", settings={"import_strategy": "NARRATE"})
    set_prompt(rt, SHARED, "narrate", "SHARED-NARRATE: retell\n$record")
    upload(rt, topic, "parts.json", json.dumps([{"part": "SK-3"}]).encode())
    run_jobs()
    assert _first_text(scripted.prompts("narrate")[0]).startswith("SHARED-NARRATE:")
    set_prompt(rt, topic.id, "narrate", OVERRIDES["narrate"])
    scripted.requests.clear()
    upload(rt, topic, "parts.json", json.dumps([{"part": "SK-4"}]).encode())
    run_jobs()
    assert _first_text(scripted.prompts("narrate")[0]).startswith("TOPIC-NARRATE:")
