"""Chat attachments: type and size refusals, text read into the message, pictures as data URLs."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from ragtopics.answer.attachments import (
    IMAGE_EXTENSIONS,
    Attachment,
    AttachmentError,
    attachment_message_parts,
    read_attachment,
)
from ragtopics.errors import ReadError, RefusedFileError
from ragtopics.settings.topic import RagTopicSettings

DEFAULTS = RagTopicSettings()
ALLOWED = DEFAULTS.chat_attachment_types  # docx, jpg, md, pdf, png, txt
MAX_MB = DEFAULTS.largest_chat_attachment_mb  # 10


def _read(
    data: bytes, name: str, *, sees_images: bool = True, allowed: list[str] | None = None, max_mb: float = MAX_MB
) -> Attachment:
    allowed_types = ALLOWED if allowed is None else allowed
    return read_attachment(data, name, allowed_types=allowed_types, max_mb=max_mb, model_sees_images=sees_images)


def _image_bytes(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 30, 40)).save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def png() -> bytes:
    return _image_bytes("PNG")


def test_txt_attachment_text_is_in_the_message():
    data = b"The launch code is 4711.\nSecond line."
    att = _read(data, "notes.txt")
    assert (att.kind, att.file_name, att.data_url, att.size_bytes) == ("text", "notes.txt", "", len(data))
    message = attachment_message_parts("What is the launch code?", att)
    assert message == "Attached file notes.txt:\nThe launch code is 4711.\nSecond line.\n\nQuestion: What is the launch code?"


def test_md_attachment_in_utf8_keeps_accents():
    text = "# Café crème\n\nÉlève naïve à Zürich — ça coûte 5 €.\n"
    att = _read(text.encode("utf-8"), "Résumé.MD")
    assert att.kind == "text"
    assert att.text == text
    assert "Élève naïve à Zürich — ça coûte 5 €." in attachment_message_parts("Où?", att)


def test_type_not_allowed_is_refused_naming_the_allowed_types():
    with pytest.raises(AttachmentError) as err:
        _read(b"MZ\x90\x00", "notes.exe")
    expected = "notes.exe can't be attached: this Topic accepts attachments of these types: docx, jpg, md, pdf, png, txt"
    assert str(err.value) == expected
    assert isinstance(err.value, RefusedFileError)


def test_allowed_types_are_compared_without_case_or_dot():
    att = _read(b"x = 1\n", "script.PY", allowed=[".Py", " TXT "])
    assert att.text == "x = 1\n"


def test_text_type_missing_from_the_allowed_list_is_refused():
    with pytest.raises(AttachmentError, match="accepts attachments of these types: png, txt"):
        _read(b"print(1)\n", "script.py", allowed=["txt", "png"])


def test_oversize_file_is_refused_naming_the_limit_in_mb():
    data = b"a" * int(12.3 * 1048576)
    with pytest.raises(AttachmentError) as err:
        _read(data, "big.txt")
    assert str(err.value) == "big.txt can't be attached: it is 12.3 MB, the largest chat attachment is 10 MB"


def test_file_exactly_at_the_limit_is_accepted():
    att = _read(b"b" * 1048576, "edge.txt", max_mb=1)
    assert att.size_bytes == 1048576
    assert len(att.text) == 1048576


def test_fractional_limit_is_named_as_configured():
    with pytest.raises(AttachmentError, match=r"it is 0\.6 MB, the largest chat attachment is 0\.5 MB$"):
        _read(b"c" * 600_000, "half.txt", max_mb=0.5)


def test_empty_file_is_refused():
    with pytest.raises(AttachmentError, match="empty.txt can't be attached: the file is empty"):
        _read(b"", "empty.txt")


def test_png_becomes_an_image_data_url_and_an_image_part(png):
    att = _read(png, "chart.png")
    assert att.kind == "image"
    assert att.text == ""
    assert att.size_bytes == len(png)
    assert att.data_url.startswith("data:image/png;base64,")
    assert base64.b64decode(att.data_url.removeprefix("data:image/png;base64,")) == png
    parts = attachment_message_parts("What colour is this?", att)
    assert parts == [
        {"type": "text", "text": "What colour is this?"},
        {"type": "image_url", "image_url": {"url": att.data_url}},
    ]


def test_jpeg_mime_comes_from_the_bytes_not_the_extension():
    jpeg = _image_bytes("JPEG")
    assert _read(jpeg, "photo.jpg").data_url.startswith("data:image/jpeg;base64,")
    # A JPEG saved under .png is still sent with its real type.
    assert _read(jpeg, "photo.png").data_url.startswith("data:image/jpeg;base64,")


def test_png_refused_when_the_model_cannot_see_pictures(png):
    with pytest.raises(AttachmentError) as err:
        _read(png, "chart.png", sees_images=False)
    message = str(err.value)
    assert message.startswith("chart.png can't be attached: the chat model of this Topic can't see pictures")
    assert "LLM_SUPPORTS_IMAGES=true" in message
    assert "or attach text" in message


def test_bytes_that_are_not_a_png_are_refused():
    with pytest.raises(AttachmentError, match="fake.png can't be attached: it is not a valid picture"):
        _read(b"this is plain text, not a picture at all", "fake.png")


def test_truncated_png_is_refused(png):
    with pytest.raises(AttachmentError, match="not a valid picture"):
        _read(png[: len(png) // 2], "cut.png")


def test_picture_format_outside_the_supported_set_is_refused():
    tiff = _image_bytes("TIFF")
    with pytest.raises(AttachmentError, match="it is a TIFF picture; supported pictures: bmp, gif, jpeg, jpg, png, webp"):
        _read(tiff, "scan.png")


def test_all_picture_extensions_have_a_mime_type():
    assert {"jpg", "jpeg", "png", "gif", "webp", "bmp"} == IMAGE_EXTENSIONS
    for fmt, ext in [("GIF", "gif"), ("WEBP", "webp"), ("BMP", "bmp")]:
        att = _read(_image_bytes(fmt), f"p.{ext}", allowed=[ext])
        assert att.data_url.startswith(f"data:image/{ext};base64,")


def test_a_docx_attachment_is_read_like_an_upload():
    import docx

    document = docx.Document()
    document.add_paragraph("Shift report: compressor C-7 was restarted twice.")
    buffer = io.BytesIO()
    document.save(buffer)
    att = _read(buffer.getvalue(), "report.docx")
    assert att.kind == "text" and "compressor C-7 was restarted twice" in att.text


def test_a_corrupt_pdf_attachment_says_why():
    with pytest.raises(ReadError, match="report.pdf"):
        _read(b"%PDF-1.7\n...", "report.pdf")


def test_binary_bytes_under_txt_raise_read_error():
    with pytest.raises(ReadError, match="data.txt looks like a binary file"):
        _read(b"\x89\x00\x01\x02\x00\xff\xfe\x00binary", "data.txt")


def test_long_text_is_cut_and_the_cut_is_stated():
    att = _read(("0123456789" * 50).encode(), "long.txt")
    message = attachment_message_parts("Q?", att, max_chars=25)
    assert message == (
        "Attached file long.txt:\n0123456789012345678901234"
        "\n[... cut: the file has 500 characters, only the first 25 are shown]\n\nQuestion: Q?"
    )
    assert attachment_message_parts("Q?", att, max_chars=500) == f"Attached file long.txt:\n{att.text}\n\nQuestion: Q?"


def test_no_attachment_gives_the_question_itself():
    assert attachment_message_parts("Just asking", None) == "Just asking"


def test_attachment_is_frozen():
    att = _read(b"hi", "a.txt")
    with pytest.raises(AttributeError):
        att.text = "changed"  # type: ignore[misc]
