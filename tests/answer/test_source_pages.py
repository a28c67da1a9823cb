"""Page numbers as part of sources: a PDF uploaded through the real pipeline, searched and cited,
gives a source with its page, a download link that opens that page, and keeps both when saved."""

from __future__ import annotations

import re

import pytest

from ragtopics.answer.context import Source, page_link, pages_label
from ragtopics.answer.history import saved_turns
from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import get_document
from ragtopics.text.keywords import query_keywords
from ragtopics.topics.topics import create_topic
from tests.ingest.test_docling_chunks import three_page_pdf
from tests.ingest.test_ingest import stored_chunks, upload


def cite_the_turbine_source(body: dict) -> str:
    """A scripted answer that cites the source block holding TANGO-4242."""
    blocks = re.split(r"^(?=\[S\d+\] \(from )", body["messages"][-1]["content"], flags=re.MULTILINE)
    [code] = [re.match(r"\[(S\d+)\]", b).group(1) for b in blocks if b.startswith("[S") and "TANGO-4242" in b]
    return f"The turbine code is TANGO-4242 [{code}]."


@pytest.fixture
def plant(rt, run_jobs):
    topic = create_topic(rt, "Plant", settings={"min_similarity_score": 0.0, "chunk_size": 300, "chunk_overlap": 30})
    doc, _ = upload(rt, topic, "plant.pdf", three_page_pdf())
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error
    return topic, doc


def test_chunks_are_stored_with_their_pages_and_every_search_returns_them(rt, plant):
    topic, doc = plant
    stored = {c["text"].decode(): c["pages"].decode() for c in stored_chunks(rt, topic, doc.id)}
    assert [pages for text, pages in stored.items() if "TANGO-4242" in text] == ["2"]
    assert sorted(stored.values()) == ["1", "2", "3"]
    index = rt.chunk_index(topic.id)
    vector = rt.gateway.embed(["What is the turbine code?"])[0]
    assert {h.pages for h in index.search_vector(vector, 3)} == {(1,), (2,), (3,)}
    [keyword_hit] = index.search_keywords(query_keywords("TANGO-4242"), 3)
    assert keyword_hit.pages == (2,) and "TANGO-4242" in keyword_hit.text


def test_the_answer_source_names_page_two_and_its_link_opens_it(rt, plant, scripted_llm):
    topic, doc = plant
    scripted_llm.replies["answer"] = cite_the_turbine_source
    *_, result = ask(rt, topic, "What is the turbine code?")
    assert result.text == "The turbine code is TANGO-4242 [plant.pdf]."
    [source] = [s for s in result.sources if s.reason == "cited"]
    assert (source.file, source.pages, source.location, source.cited_as) == ("plant.pdf", (2,), "p. 2", "plant.pdf, p. 2")
    assert source.link.startswith("/files/") and source.link.endswith("#page=2")
    token = source.link.removeprefix("/files/").removesuffix("#page=2")
    assert rt.signer.verify(token) == get_document(rt, doc.id).blob_path  # the fragment is not part of the signed token
    public = source.to_public()
    assert (public["pages"], public["location"]) == ([2], "p. 2")

    [saved] = [s for s in saved_turns(rt, result.session_id)[0].sources if s.reason == "cited"]
    assert saved.pages == (2,) and saved.link.endswith("#page=2") and saved.status == "current"

    from ragtopics.ui.chat_tab import sources_html, sources_line

    assert "plant.pdf, p. 2 · " in sources_html(result) and "#page=2" in sources_html(result)
    assert re.search(r'<a href="/files/[^"]+#page=2" target="_blank">plant\.pdf, p\. 2</a>', sources_line(result))


def test_pages_are_labelled_by_what_a_page_is_in_that_file():
    assert pages_label("report.pdf", [3]) == "p. 3"
    assert pages_label("report.pdf", [4, 3, 3]) == "pp. 3–4"
    assert pages_label("report.pdf", [2, 5, 6, 7]) == "pp. 2, 5–7"
    assert pages_label("deck.PPTX", [2]) == "slide 2" and pages_label("book.xlsx", [1, 2]) == "sheets 1–2"
    assert pages_label("notes.docx", []) == ""


def test_only_a_pdf_link_with_pages_gets_a_page_anchor():
    assert page_link("/files/tok", "report.pdf", (3, 4)) == "/files/tok#page=3"
    assert page_link("/files/tok", "deck.pptx", (3,)) == "/files/tok"
    assert page_link("/files/tok", "report.pdf", ()) == "/files/tok"
    assert page_link("", "report.pdf", (3,)) == ""
    source = Source("report.pdf", "chunk-1", 0.5, "S1", "doc-1", pages=(4,))
    assert source.with_link("/files/tok").link == "/files/tok#page=4"
