"""Pictures of uploaded documents and image files: read, describe, link to chunks, place in answers.

Plain functions; :mod:`ragtopics.ingest.pipeline` and :mod:`ragtopics.answer.turn` call them in order.

* upload: an image file becomes one picture (:func:`read_image`); with Describe
  pictures on, a vision model describes each picture (:func:`describe_pictures`) and
  the descriptions become searchable text (:func:`text_with_descriptions`); each
  chunk is tagged with the pictures whose caption, description or neighbouring text
  it contains (:func:`link_pictures`).
* chat: the pictures of the kept chunks are offered to the model as ``[P1]``...
  (:func:`format_pictures`), and the codes the model placed become Markdown images
  (:func:`place_pictures`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PIL import Image

from ragtopics.errors import ConfigurationError, ReadError
from ragtopics.ingest.docling import Picture
from ragtopics.prompts.templates import PICTURE_LINE, PICTURES, PromptTemplate
from ragtopics.tracing.trace import Trace

if TYPE_CHECKING:
    from ragtopics.llm.gateway import ModelGateway

log = logging.getLogger(__name__)

#: How much of a caption, description or neighbouring text must occur in a chunk to link it.
LINK_CHARS = 60
#: Pillow modes PNG stores as they are; others (CMYK, YCbCr, ...) are converted to RGB first.
_PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"})
#: ``[P1]`` as the model writes it (also ``[ P1 ]``), with the spaces before it (dropped with a removed code).
_MARKER = re.compile(r"([ \t]*)\[\s*P(\d+)\s*\]")
#: Characters that would end a Markdown image's alt text early.
_ALT_UNSAFE = re.compile(r"[\[\]\s]+")

NO_VISION_MESSAGE = (
    "Describe pictures with a vision model is on, but the image describer model {model} is not marked as able to "
    "see pictures; a vision-capable model is needed (set LLM_SUPPORTS_IMAGES=true for a model that accepts "
    "images), or switch Describe pictures off"
)


@dataclass(frozen=True, slots=True)
class OfferedPicture:
    """A stored picture offered to the answer under a code.

    Attributes:
        code: ``P1``, ``P2``... in the prompt.
        picture_id: the stored picture's id (``pic-<hex>``).
        label: what the prompt and the image's alt text say about it.
        file_name: the document it comes from.
        blob_path: the PNG's path in the blob store.
    """

    code: str
    picture_id: str
    label: str
    file_name: str
    blob_path: str


def picture_id_for(document_id: str, index: int, image_png: bytes) -> str:
    """Content-hash picture id: ``pic-`` + 16 hex digits of SHA-1 over document, picture number and image."""
    digest = hashlib.sha256(image_png).hexdigest()
    return "pic-" + hashlib.sha1(f"{document_id}\0{index}\0{digest}".encode()).hexdigest()[:16]


def read_image(data: bytes, *, file_name: str) -> Picture:
    """An uploaded image file as one picture (PNG), captioned with its file name.

    Raises:
        ReadError: when the bytes are not an image Pillow can open.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            frame = image if image.mode in _PNG_MODES else image.convert("RGBA" if "A" in image.mode else "RGB")
            buffer = io.BytesIO()
            frame.save(buffer, format="PNG")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ReadError(f"{file_name} is not a readable image: {exc}") from exc
    return Picture(index=0, image_png=buffer.getvalue(), caption=file_name, page=None, neighbour_text="")


def describe_pictures(
    gateway: ModelGateway, pictures: list[Picture], *, template: PromptTemplate, trace: Trace | None = None
) -> list[str]:
    """Describe each picture with one call to the ``image_describer`` model.

    Args:
        gateway: the model gateway.
        pictures: the pictures, in order.
        template: the ``describe_picture`` prompt as resolved for the Topic (its override
            from the Prompts tab, else the shared one, else the default); no default here,
            so a caller cannot skip the Topic's override by accident.
        trace: receives one ``model_call`` per picture.

    Returns:
        One description per picture, in order ("" when the model replied nothing).

    Raises:
        ConfigurationError: when the image describer model is not marked as seeing pictures.
        ModelUnavailableError: when the model is unreachable or fails.
    """
    if not pictures:
        return []
    endpoint = gateway.endpoint("image_describer")
    if not endpoint.supports_images:
        raise ConfigurationError(NO_VISION_MESSAGE.format(model=endpoint.model))
    out = []
    for picture in pictures:
        prompt = template.render(
            caption=picture.caption or "(none)", neighbour_text=_normalised(picture.neighbour_text) or "(none)"
        )
        url = "data:image/png;base64," + base64.b64encode(picture.image_png).decode("ascii")
        content = [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}]
        reply = gateway.chat(
            "image_describer", [{"role": "user", "content": content}], prompt_name=template.name, trace=trace, max_tokens=300
        )
        out.append(_normalised(reply.text))
    return out


def text_with_descriptions(text: str, pictures: list[Picture], descriptions: list[str]) -> str:
    """The document text followed by one paragraph per described picture: ``Picture 2: <caption>. <description>``."""
    numbered = enumerate(zip(pictures, descriptions, strict=True), start=1)
    paragraphs = [description_paragraph(n, picture, description) for n, (picture, description) in numbered if description]
    return "\n\n".join(p for p in [text.strip(), *paragraphs] if p)


def description_paragraph(n: int, picture: Picture, description: str) -> str:
    """The searchable paragraph of the ``n``-th (1-based) described picture: ``Picture 2: <caption>. <description>``."""
    caption = picture.caption.strip().rstrip(".")
    return f"Picture {n}: {caption}. {description}" if caption else f"Picture {n}: {description}"


def link_pictures(chunk_texts: list[str], pictures: list[Picture], descriptions: list[str] | None = None) -> list[list[int]]:
    """Which pictures each chunk is tagged with.

    A chunk is tagged with a picture when the first :data:`LINK_CHARS` characters of
    its caption, description or neighbouring text (whitespace normalised) occur in
    the chunk's text.

    Args:
        chunk_texts: the chunks' texts, in order.
        pictures: the document's pictures.
        descriptions: one description per picture ("" or None when not described).

    Returns:
        Per chunk, the 0-based positions in ``pictures`` of its pictures, ascending.
    """
    descriptions = descriptions or [""] * len(pictures)
    needles = [
        [n for n in (_normalised(t)[:LINK_CHARS] for t in (p.caption, d, p.neighbour_text)) if n]
        for p, d in zip(pictures, descriptions, strict=True)
    ]
    links = []
    for text in chunk_texts:
        haystack = _normalised(text)
        links.append([i for i, candidates in enumerate(needles) if any(n in haystack for n in candidates)])
    return links


def format_pictures(
    offered: list[OfferedPicture], *, template: PromptTemplate = PICTURES, line: PromptTemplate = PICTURE_LINE
) -> str:
    """The prompt block that offers pictures to the answer ("" when none are offered)."""
    if not offered:
        return ""
    lines = "\n".join(line.render(code=p.code, label=p.label, file_name=p.file_name) for p in offered)
    return template.render(pictures=lines)


def place_pictures(answer: str, links: dict[str, tuple[str, str]]) -> tuple[str, list[str]]:
    """Replace the picture codes the model placed with Markdown images.

    Args:
        answer: the answer text with ``[P1]``-style codes.
        links: code → ``(alt text, link)``.

    Returns:
        ``(text, placed codes)``: each known code becomes ``![alt](link)`` where it
        was first placed; unknown and repeated codes are removed.
    """
    placed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        code = f"P{match.group(2)}"
        if code not in links or code in placed:
            return ""
        placed.append(code)
        alt, link = links[code]
        return f"{match.group(1)}![{_ALT_UNSAFE.sub(' ', alt).strip()}]({link})"

    if not _MARKER.search(answer):
        return answer, placed
    text = _MARKER.sub(replace, answer)
    return re.sub(r"[ \t]+\n", "\n", text).strip(), placed


def _normalised(text: str) -> str:
    return " ".join((text or "").split())
