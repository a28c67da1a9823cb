"""Pictures end to end: lifted out of a DOCX or uploaded as image files, described, stored, linked to
chunks, offered to the answer and shown where the model placed them."""

from __future__ import annotations

import io
import re

import docx
import pytest
from PIL import Image
from sqlmodel import select

from ragtopics.answer.history import session_turns, turn_trace
from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import get_document
from ragtopics.ingest.docling import Picture
from ragtopics.ingest.pictures import link_pictures
from ragtopics.jobs.queue import job_progress
from ragtopics.storage.metadata import PictureRow
from ragtopics.topics.topics import create_topic, update_settings
from tests.ingest.test_ingest import stored_chunks, upload

CAPTION = "Figure 1: pump wiring diagram"


def png(colour: str = "red", size: tuple[int, int] = (40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def pump_docx(*, with_picture: bool = True, intro: str = "The pump is wired as shown below.") -> bytes:
    document = docx.Document()
    document.add_paragraph(intro)
    if with_picture:
        document.add_picture(io.BytesIO(png()))
        document.add_paragraph(CAPTION)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def pictures_of(rt, doc_id: str) -> list[PictureRow]:
    with rt.metadata.session() as s:
        return list(s.exec(select(PictureRow).where(PictureRow.document_id == doc_id)).all())


def final(updates):
    *_, last = updates
    return last


@pytest.fixture
def vision_runtime(reconfigure):
    """The runtime with a language model marked as seeing pictures."""
    return reconfigure(LLM_SUPPORTS_IMAGES=True)


@pytest.fixture
def pump(rt, run_jobs):
    topic = create_topic(rt, "Pumps", settings={"min_similarity_score": 0.0})
    doc, _ = upload(rt, topic, "pump.docx", pump_docx())
    run_jobs()
    return topic, doc


def test_a_docx_picture_is_stored_and_linked_to_the_chunk_with_its_caption(rt, pump):
    topic, doc = pump
    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error
    [picture] = pictures_of(rt, doc.id)
    assert picture.id.startswith("pic-") and picture.caption == CAPTION and picture.topic_id == topic.id
    with Image.open(io.BytesIO(rt.blobs.read(picture.blob_path))) as image:
        assert image.size == (40, 30)
    tagged = [c for c in stored_chunks(rt, topic, doc.id) if CAPTION in c["text"].decode()]
    assert tagged and all(c["pictures"].decode() == picture.id for c in tagged)
    assert row.indexed_with["pictures"] == 1


def test_a_placed_picture_is_shown_at_its_position_with_a_signed_link(rt, pump, scripted_llm):
    topic, doc = pump
    [picture] = pictures_of(rt, doc.id)
    scripted_llm.replies["answer"] = "See the diagram [S1]\n[P1]"
    updates = list(ask(rt, topic, "How is the pump wired?"))
    prompt = scripted_llm.prompts("answer")[0]["messages"][-1]["content"]
    assert f"Pictures you may show:\n[P1] {CAPTION} (from pump.docx)" in prompt and "on its own line" in prompt
    result = updates[-1]
    assert result.text.startswith("See the diagram [pump.docx]\n![" + CAPTION + "](/files/")
    token = re.search(r"\(/files/([^)]+)\)", result.text).group(1)
    assert rt.signer.verify(token) == picture.blob_path
    trace = turn_trace(rt, session_turns(rt, result.session_id)[-1].id)
    shown = next(e for e in trace if e["step"] == "pictures")["data"]
    assert [p["picture_id"] for p in shown["offered"]] == [picture.id] and shown["placed"] == ["P1"]


def test_unknown_codes_are_removed_and_unplaced_pictures_not_shown(rt, pump, scripted_llm):
    topic, _ = pump
    scripted_llm.replies["answer"] = "Wired in series [S1] [P7]."
    result = final(ask(rt, topic, "How is the pump wired?"))
    assert result.text == "Wired in series [pump.docx]." and "![" not in result.text


def test_with_show_pictures_off_no_picture_is_offered(rt, pump, scripted_llm):
    topic, _ = pump
    topic = update_settings(rt, topic.id, {"show_pictures": False})
    scripted_llm.replies["answer"] = "See the diagram [S1]\n[P1]"
    result = final(ask(rt, topic, "How is the pump wired?"))
    assert "Pictures you may show" not in scripted_llm.prompts("answer")[0]["messages"][-1]["content"]
    assert "![" not in result.text and "[P1]" not in result.text


def test_describing_without_a_vision_model_fails_and_keeps_the_old_version(rt, pump, run_jobs):
    topic, doc = pump
    [old_picture] = pictures_of(rt, doc.id)
    old_chunks = [c["text"] for c in stored_chunks(rt, topic, doc.id)]
    update_settings(rt, topic.id, {"describe_pictures": True})
    _, job_id = upload(rt, topic, "pump.docx", pump_docx(intro="A second version of the pump notes."))
    run_jobs()
    progress = job_progress(rt, job_id)
    assert (
        progress.status == "failed" and "vision-capable model" in progress.error and "LLM_SUPPORTS_IMAGES=true" in progress.error
    )
    assert "previous version is still searchable" in get_document(rt, doc.id).error
    assert [c["text"] for c in stored_chunks(rt, topic, doc.id)] == old_chunks
    assert [p.id for p in pictures_of(rt, doc.id)] == [old_picture.id]
    assert rt.blobs.path(old_picture.blob_path).exists()


def test_descriptions_become_searchable_text_with_one_call_per_picture(vision_runtime, run_jobs, scripted_llm):
    rt = vision_runtime
    scripted_llm.replies["describe_picture"] = "A red square."
    topic = create_topic(rt, "Described", settings={"describe_pictures": True})
    doc, _ = upload(rt, topic, "pump.docx", pump_docx())
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed", get_document(rt, doc.id).error
    [call] = scripted_llm.prompts("describe_picture")
    assert call["messages"][0]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    [picture] = pictures_of(rt, doc.id)
    assert picture.description == "A red square."
    described = [c for c in stored_chunks(rt, topic, doc.id) if "A red square." in c["text"].decode()]
    assert described and f"Picture 1: {CAPTION}. A red square." in described[0]["text"].decode()
    assert described[0]["pictures"].decode() == picture.id


def test_an_image_file_is_one_chunk_named_by_its_file_or_its_description(vision_runtime, run_jobs, scripted_llm):
    rt = vision_runtime
    plain = create_topic(rt, "Photos")
    doc, _ = upload(rt, plain, "red-square.png", png())
    scripted_llm.replies["describe_picture"] = "A red square on white paper."
    described = create_topic(rt, "Described photos", settings={"describe_pictures": True})
    described_doc, _ = upload(rt, described, "photo.jpg", _jpeg())
    run_jobs()
    [chunk] = stored_chunks(rt, plain, doc.id)
    [picture] = pictures_of(rt, doc.id)
    assert chunk["text"].decode() == "red-square.png" and chunk["pictures"].decode() == picture.id
    assert get_document(rt, doc.id).indexed_with["reader"] == "image"
    [described_chunk] = stored_chunks(rt, described, described_doc.id)
    assert described_chunk["text"].decode() == "A red square on white paper."
    assert len(scripted_llm.prompts("describe_picture")) == 1


def test_reupload_without_the_picture_removes_its_row_and_blob(rt, pump, run_jobs):
    topic, doc = pump
    [old_picture] = pictures_of(rt, doc.id)
    upload(rt, topic, "pump.docx", pump_docx(with_picture=False))
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed"
    assert pictures_of(rt, doc.id) == []
    assert not rt.blobs.path(old_picture.blob_path).exists()
    assert all(c["pictures"].decode() == "" for c in stored_chunks(rt, topic, doc.id))


def test_link_pictures_matches_caption_description_or_neighbour_text():
    pictures = [Picture(0, b"", "Figure 1: pump", None, "Wire   the pump\nlike this."), Picture(1, b"", "", None, "")]
    chunks = ["Intro. Wire the pump like this. More.", "Figure 1: pump", "A blue circle.", "Nothing here."]
    assert link_pictures(chunks, pictures, ["", "A blue circle."]) == [[0], [0], [1], []]


def _jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_a_quoted_answer_shows_the_pictures_of_the_chunks_it_quotes(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Quoted pumps", settings={"min_similarity_score": 0.0, "answer_mode": "EXTRACTIVE"})
    doc, _ = upload(rt, topic, "pump.docx", pump_docx(intro="The pump is wired with a red live wire and a blue neutral wire."))
    run_jobs()
    [picture] = pictures_of(rt, doc.id)
    result = final(ask(rt, topic, "How is the pump wired?"))
    assert "red live wire" in result.text and "[pump.docx]" in result.text
    assert f"![{CAPTION}](/files/" in result.text and scripted_llm.prompts("answer") == []
    token = re.search(r"\(/files/([^)]+)\)", result.text).group(1)
    assert rt.signer.verify(token) == picture.blob_path
    assert result.text.index("![") < result.text.index("*Quoted from the sources")  # above the line under the quotes
