"""OCR for PDF pages without a text layer (scans, faxes), with RapidOCR on ONNX Runtime.

The engine is ``rapidocr-onnxruntime`` 1.4.4 (Apache-2.0): PaddleOCR's PP-OCRv4 text
detection and recognition models (and a 0/180 degree line classifier, which is not
used: see ``_engine``) exported to ONNX and shipped *inside the wheel*
(``rapidocr_onnxruntime/models/*.onnx``, 16 MB), run by ONNX Runtime on the CPU. The
package has no download code: nothing is fetched at run time and no network is needed,
which is why it was chosen over engines that fetch their weights on first use (EasyOCR,
PaddleOCR). The recognition model's character set (6,623 characters, in the model's ONNX metadata) is
Chinese, ASCII and a few accented letters: ä, ü, é, è, à are in it, ö, ß, ç, ñ and €
are not, so those come out as a look-alike or are dropped. Pages scanned upside down
are not turned (the line classifier is off) and read as noise or nothing.

Everything here runs in the converter process (see :mod:`ragtopics.ingest.docling`),
inside the conversion's timeout. The engine is loaded once per process.

Functions:
    engine_unavailable_reason: why OCR can not run here ("" when it can).
    pages_without_text: the pages of a DoclingDocument that hold no text.
    read_pages_by_ocr: OCR those pages of a PDF into its DoclingDocument.
    render_pdf_page: one PDF page as a picture.
    ocr_image: the text lines recognised in a picture.
    group_paragraphs: lines that belong together, as paragraphs in reading order.
    add_ocr_text: paragraphs of one page added to a DoclingDocument, with provenance.
"""

from __future__ import annotations

import functools
import io
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pypdfium2 as pdfium
from PIL import Image, UnidentifiedImageError

from ragtopics.errors import ReadError

if TYPE_CHECKING:
    from docling_core.types.doc import DoclingDocument

log = logging.getLogger(__name__)

#: What runs, for the upload log.
OCR_ENGINE = "rapidocr-onnxruntime (PP-OCRv4, ONNX)"
#: Lines recognised with a lower confidence (0..1) are dropped: PaddleOCR's own default
#: ``drop_score`` (tools/infer/utility.py) and RapidOCR's ``Global.text_score`` are both 0.5.
MIN_CONFIDENCE = 0.5
#: Pages are rendered at this resolution for OCR (an A4 page: 1654 x 2339 px). RapidOCR
#: then shrinks a picture whose longer side exceeds 2000 px (its default ``max_side_len``,
#: kept), to ~170 dpi for A4. Measured here: 11 pt Liberation Sans/Serif lines of a
#: JPEG-compressed scan came out right to the character at this resolution.
RENDER_DPI = 200
#: A line joins the paragraph above when the gap between them is below this share of its height.
PARAGRAPH_GAP_SHARE = 0.8

_engine_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class OcrLine:
    """One line of text recognised in a picture.

    Attributes:
        text: the recognised text.
        bbox: ``(left, top, right, bottom)`` in pixels of the picture, origin top-left.
        confidence: the recogniser's score, 0..1.
    """

    text: str
    bbox: tuple[float, float, float, float]
    confidence: float


@functools.cache
def engine_unavailable_reason() -> str:
    """Why the OCR engine can not run in this installation, or "" when it can (checked once per process).

    Returns:
        "" when ``rapidocr_onnxruntime`` (and with it ONNX Runtime and OpenCV) imports,
        else the import error in words.
    """
    try:
        import rapidocr_onnxruntime  # noqa: F401
    except Exception as exc:
        return f"the OCR engine rapidocr-onnxruntime does not import ({type(exc).__name__}: {exc})"
    return ""


@functools.cache
def _engine() -> Any:
    """The RapidOCR engine, loaded once per process (~0.2 s: three ONNX sessions from the wheel)."""
    reason = engine_unavailable_reason()
    if reason:
        raise ReadError(reason)
    # deferred: ONNX Runtime and OpenCV load only when a page is read by OCR
    from rapidocr_onnxruntime import RapidOCR

    # text_score 0: every line comes back, and MIN_CONFIDENCE is applied here, where it is documented.
    # use_cls off: the 0/180 degree line classifier turned 2 of 12 upright lines of a test page
    # upside down (read as "o i n snxo b t"); scans are upright far more often than not.
    return RapidOCR(text_score=0.0, use_cls=False)


def pages_without_text(document: DoclingDocument, pages: range | Sequence[int]) -> tuple[int, ...]:
    """The pages on which no text item (or table cell) of the document's body has provenance.

    Args:
        document: a converted document.
        pages: the 1-based pages to check (those that were converted).

    Returns:
        The pages among ``pages`` without any non-blank text, ascending.
    """
    # deferred: docling_core takes seconds to import; only a converted document needs it
    from docling_core.types.doc import TableItem, TextItem

    with_text: set[int] = set()
    for item, _level in document.iterate_items():
        has_text = (isinstance(item, TextItem) and item.text.strip()) or (
            isinstance(item, TableItem) and any(cell.text.strip() for cell in item.data.table_cells)
        )
        if has_text:
            with_text.update(prov.page_no for prov in item.prov)  # type: ignore[attr-defined]  # text and table items have provenance
    return tuple(page for page in sorted(pages) if page not in with_text)


def read_pages_by_ocr(document: DoclingDocument, data: bytes, pages: Sequence[int]) -> tuple[int, ...]:
    """Render and OCR each page of a PDF, adding the text found to its DoclingDocument.

    Args:
        document: the PDF converted by docling; changed in place (see :func:`add_ocr_text`).
        data: the PDF's bytes.
        pages: the 1-based pages to read (those without a text layer).

    Returns:
        The pages on which OCR found text, ascending.

    Raises:
        ReadError: when the engine does not import or pdfium can not render a page.
    """
    # deferred: docling_core takes seconds to import; only a converted document needs it
    from docling_core.types.doc import Size

    found = []
    for page_no in sorted(pages):
        started = time.monotonic()
        image = render_pdf_page(data, page_no)
        paragraphs = group_paragraphs(ocr_image(image))
        log.info("OCR of page %d: %d paragraphs in %.1f s", page_no, len(paragraphs), time.monotonic() - started)
        if not paragraphs:
            continue
        if page_no not in document.pages:  # a page docling could not parse still has a size in pdfium
            scale = 72 / RENDER_DPI
            document.add_page(page_no=page_no, size=Size(width=image.width * scale, height=image.height * scale))
        add_ocr_text(document, page_no, paragraphs, image.size)
        found.append(page_no)
    return tuple(found)


def render_pdf_page(data: bytes, page_no: int, *, dpi: int = RENDER_DPI) -> Image.Image:
    """Render one page of a PDF as an RGB picture with pypdfium2.

    Args:
        data: the PDF's bytes.
        page_no: the 1-based page number.
        dpi: the resolution, in dots per inch (PDF user space is 72 per inch).

    Returns:
        The page as a PIL RGB image, ``round(width_pt * dpi / 72)`` pixels wide.

    Raises:
        ReadError: when pdfium can not open the PDF or has no such page.
    """
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise ReadError(f"pdfium could not open the PDF to render page {page_no} for OCR: {exc}") from exc
    try:
        if not 1 <= page_no <= len(pdf):
            raise ReadError(f"the PDF has {len(pdf)} pages, so page {page_no} can not be rendered for OCR")
        page = pdf[page_no - 1]
        try:
            return page.render(scale=dpi / 72).to_pil().convert("RGB")
        finally:
            page.close()
    finally:
        pdf.close()


def ocr_image(image: Image.Image | bytes, *, min_confidence: float = MIN_CONFIDENCE) -> list[OcrLine]:
    """Recognise the lines of text in a picture.

    Args:
        image: a PIL image, or the bytes of an image file (PNG, JPEG, ...).
        min_confidence: lines scored below this (0..1) are dropped.

    Returns:
        The lines, top to bottom and left to right within a row (RapidOCR's order);
        empty when the picture holds no recognisable text.

    Raises:
        ReadError: when the engine does not import here, or the bytes are no image.
    """
    engine = _engine()
    if isinstance(image, bytes):
        try:
            image = Image.open(io.BytesIO(image))
            image.load()
        except (UnidentifiedImageError, OSError) as exc:
            raise ReadError(f"OCR got bytes that are no readable image: {exc}") from exc
    with _engine_lock:  # RapidOCR keeps per-call settings on the engine object
        found, _elapsed = engine(image.convert("RGB"))
    lines = []
    for box, text, score in found or ():
        xs, ys = [float(point[0]) for point in box], [float(point[1]) for point in box]
        if float(score) >= min_confidence and text.strip():
            lines.append(OcrLine(text=text.strip(), bbox=(min(xs), min(ys), max(xs), max(ys)), confidence=float(score)))
    return lines


def group_paragraphs(lines: Sequence[OcrLine]) -> list[list[OcrLine]]:
    """Group lines into paragraphs: a line joins the paragraph whose last line sits just above it.

    "Just above" means the vertical gap is below PARAGRAPH_GAP_SHARE of the line's
    height and the two overlap horizontally, so the columns of a two-column page stay
    apart. There is no layout model: paragraphs are ordered by their top edge (then
    left edge), which reads a two-column page paragraph by paragraph across columns.

    Args:
        lines: lines of one page, as :func:`ocr_image` returns them.

    Returns:
        Paragraphs, each a non-empty list of lines top to bottom.
    """
    paragraphs: list[list[OcrLine]] = []
    for line in sorted(lines, key=lambda item: (item.bbox[1], item.bbox[0])):
        left, top, right, _bottom = line.bbox
        height = line.bbox[3] - top
        for paragraph in paragraphs:
            last = paragraph[-1].bbox
            gap = top - last[3]
            if -height / 2 < gap < PARAGRAPH_GAP_SHARE * height and left < last[2] and right > last[0]:
                paragraph.append(line)
                break
        else:
            paragraphs.append([line])
    return sorted(paragraphs, key=lambda paragraph: (paragraph[0].bbox[1], paragraph[0].bbox[0]))


def add_ocr_text(
    document: DoclingDocument, page_no: int, paragraphs: Sequence[Sequence[OcrLine]], image_size: tuple[int, int]
) -> int:
    """Add a page's OCR paragraphs to a DoclingDocument as text items, where that page's content sits.

    Each paragraph becomes one ``text`` item whose provenance is the page and the
    union of its lines' boxes, converted from picture pixels (origin top-left) to the
    page's PDF points with origin bottom-left, as docling's PDF pipelines write them.
    The items go before the first top-level item of a later page (after a full-page
    scan picture of this page), so the Markdown export keeps page order.

    Args:
        document: the converted document; changed in place.
        page_no: the 1-based page the picture was rendered from (must be in ``document.pages``).
        paragraphs: from :func:`group_paragraphs`.
        image_size: ``(width, height)`` of the rendered picture, in pixels.

    Returns:
        The number of text items added.
    """
    # deferred: docling_core takes seconds to import; only a converted document needs it
    from docling_core.types.doc import BoundingBox, CoordOrigin, DocItemLabel, ProvenanceItem

    page = document.pages[page_no].size
    scale_x, scale_y = page.width / image_size[0], page.height / image_size[1]
    successor = _first_item_after_page(document, page_no)
    for paragraph in paragraphs:
        text = " ".join(line.text for line in paragraph)
        left, top = min(line.bbox[0] for line in paragraph), min(line.bbox[1] for line in paragraph)
        right, bottom = max(line.bbox[2] for line in paragraph), max(line.bbox[3] for line in paragraph)
        bbox = BoundingBox(
            l=left * scale_x,
            t=page.height - top * scale_y,
            r=right * scale_x,
            b=page.height - bottom * scale_y,
            coord_origin=CoordOrigin.BOTTOMLEFT,
        )
        prov = ProvenanceItem(page_no=page_no, bbox=bbox, charspan=(0, len(text)))
        if successor is None:
            document.add_text(label=DocItemLabel.TEXT, text=text, prov=prov)
        else:
            document.insert_text(sibling=successor, label=DocItemLabel.TEXT, text=text, prov=prov, after=False)
    return len(paragraphs)


def _first_item_after_page(document: DoclingDocument, page_no: int) -> Any:
    """The first top-level body item whose content starts on a page after page_no, or None."""
    for ref in document.body.children:
        node = ref.resolve(document)
        pages = [
            prov.page_no
            for item, _level in document.iterate_items(root=node, with_groups=False)
            for prov in getattr(item, "prov", ())
        ]
        if pages and min(pages) > page_no:
            return node
    return None
