"""Reading a file attached to a chat message, and turning it into message content.

An attachment is checked against the Topic's chat settings (accepted types,
largest size), then read: text files through :mod:`ragtopics.ingest.readers`, pictures
verified with Pillow and carried as a base64 data URL for a vision-capable model.

Errors: a refused attachment raises :class:`AttachmentError`, a subclass of
:class:`ragtopics.errors.RefusedFileError` (so callers that already show refused
uploads show these too); a text file whose bytes can't be decoded raises
:class:`ragtopics.errors.ReadError` from the reader, unchanged.
"""

from __future__ import annotations

import base64
import io
import logging
from dataclasses import dataclass
from typing import Any, Literal

from PIL import Image

from ragtopics.errors import RefusedFileError
from ragtopics.ingest.readers import read_file
from ragtopics.text.file_types import IMAGE_TYPES, SUPPORTED_EXTENSIONS, extension_of

log = logging.getLogger(__name__)

#: MIME type of each picture extension a chat message may carry.
IMAGE_MIME_TYPES: dict[str, str] = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
}

IMAGE_EXTENSIONS: frozenset[str] = frozenset(IMAGE_MIME_TYPES)

#: Pillow format name → MIME type, for the formats above.
_PILLOW_FORMAT_MIME: dict[str, str] = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
}

_BYTES_PER_MB = 1048576

NO_VISION_EXPLANATION = (
    "the chat model of this Topic can't see pictures; configure a vision-capable Language Model "
    "(LLM_SUPPORTS_IMAGES=true) or attach text"
)


class AttachmentError(RefusedFileError):
    """A file attached to a chat message is refused (type, size, content, or no reader for it yet)."""


@dataclass(frozen=True, slots=True)
class Attachment:
    """A chat attachment, read and ready to be sent to the chat model.

    Attributes:
        file_name: the name shown to the model and the operator.
        kind: ``"text"`` or ``"image"``.
        text: the file's text for ``"text"``; ``""`` for images.
        data_url: ``data:<mime>;base64,...`` for ``"image"``; ``""`` for text.
        size_bytes: size of the attached file in bytes.
    """

    file_name: str
    kind: Literal["text", "image"]
    text: str
    data_url: str
    size_bytes: int


def read_attachment(
    data: bytes, file_name: str, *, allowed_types: list[str], max_mb: float, model_sees_images: bool
) -> Attachment:
    """Check and read a file attached to a chat message.

    Args:
        data: the file's bytes.
        file_name: the file's name; its extension decides how it is read.
        allowed_types: accepted extensions without the dot (the Topic's
            ``chat_attachment_types``); compared case-insensitively.
        max_mb: largest accepted size in MB of 1,048,576 bytes
            (``largest_chat_attachment_mb``).
        model_sees_images: whether the chat model accepts image parts.

    Returns:
        An :class:`Attachment` of kind ``"text"`` (decoded text) or ``"image"``
        (base64 data URL whose MIME type is the one found in the bytes).

    Raises:
        AttachmentError: the type is not accepted, the file is empty or larger
            than ``max_mb``, it is a picture and the model can't see pictures, a
            picture is not a valid image, or the type has no attachment reader yet.
        ReadError: a text file's bytes are not readable text.
    """
    ext = extension_of(file_name)
    allowed = sorted({t.strip().lower().lstrip(".") for t in allowed_types if t.strip()})
    if ext not in allowed:
        accepted = ", ".join(allowed) if allowed else "none"
        raise AttachmentError(f"{file_name} can't be attached: this Topic accepts attachments of these types: {accepted}")
    if len(data) > max_mb * _BYTES_PER_MB:
        raise AttachmentError(
            f"{file_name} can't be attached: it is {len(data) / _BYTES_PER_MB:.1f} MB, "
            f"the largest chat attachment is {max_mb:g} MB"
        )
    if not data:
        raise AttachmentError(f"{file_name} can't be attached: the file is empty")
    if ext in IMAGE_EXTENSIONS:
        if not model_sees_images:
            raise AttachmentError(f"{file_name} can't be attached: {NO_VISION_EXPLANATION}")
        return _read_image(data, file_name)
    if ext in IMAGE_TYPES:
        raise AttachmentError(f"{file_name} can't be attached: pictures must be one of {', '.join(sorted(IMAGE_EXTENSIONS))}")
    if ext in SUPPORTED_EXTENSIONS:
        # The same readers as uploads: text, structured records, Docling for documents.
        text = read_file(data, file_name=file_name).text
        log.debug("read attachment %s: %s bytes, %s characters", file_name, len(data), len(text))
        return Attachment(file_name=file_name, kind="text", text=text, data_url="", size_bytes=len(data))
    raise AttachmentError(f"{file_name} can't be attached: .{ext} files cannot be read")


def attachment_message_parts(
    question: str, attachment: Attachment | None, *, max_chars: int = 20000
) -> str | list[dict[str, Any]]:
    """Build the content of the user message that carries a question and its attachment.

    Args:
        question: the operator's question.
        attachment: the read attachment, or ``None``.
        max_chars: most characters of an attached text sent to the model; a
            longer text is cut and the cut is stated in the message.

    Returns:
        ``question`` itself without an attachment; for a text attachment one
        string ``"Attached file <name>:\\n<text>\\n\\nQuestion: <question>"``; for an
        image the OpenAI content-part list
        ``[{"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": data_url}}]``.
    """
    if attachment is None:
        return question
    if attachment.kind == "image":
        return [
            {"type": "text", "text": question},
            {"type": "image_url", "image_url": {"url": attachment.data_url}},
        ]
    return text_attachment_message(question, attachment, max_chars=max_chars)


def text_attachment_message(question: str, attachment: Attachment, *, max_chars: int = 20000) -> str:
    """The user message for a question with an attached text file (see :func:`attachment_message_parts`).

    Returns:
        ``"Attached file <name>:\n<text>\n\nQuestion: <question>"``, the text cut at ``max_chars``
        characters (the cut is stated).
    """
    text = attachment.text
    if len(text) > max_chars:
        text = (
            text[:max_chars]
            + f"\n[... cut: the file has {len(attachment.text)} characters, only the first {max_chars} are shown]"
        )
    return f"Attached file {attachment.file_name}:\n{text}\n\nQuestion: {question}"


def _read_image(data: bytes, file_name: str) -> Attachment:
    """Verify that ``data`` is a picture in a supported format and wrap it as a data URL.

    The MIME type comes from the bytes, not the extension, so a JPEG saved as
    ``.png`` is still sent as ``image/jpeg``.

    Raises:
        AttachmentError: the bytes are not a complete picture in a supported format.
    """
    try:
        with Image.open(io.BytesIO(data)) as probe:
            image_format = probe.format or ""
            probe.verify()
        # verify() checks structure only (and hardly anything for JPEG); decoding catches truncated files.
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception as exc:  # Pillow raises many types on bad input (OSError, SyntaxError, ValueError, struct.error...)
        log.info("refused image attachment %s: %s", file_name, exc)
        raise AttachmentError(f"{file_name} can't be attached: it is not a valid picture ({exc})") from exc
    mime = _PILLOW_FORMAT_MIME.get(image_format)
    if mime is None:
        supported = ", ".join(sorted(IMAGE_EXTENSIONS))
        raise AttachmentError(f"{file_name} can't be attached: it is a {image_format} picture; supported pictures: {supported}")
    encoded = base64.b64encode(data).decode("ascii")
    return Attachment(file_name=file_name, kind="image", text="", data_url=f"data:{mime};base64,{encoded}", size_bytes=len(data))
