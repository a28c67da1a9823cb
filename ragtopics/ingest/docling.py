"""Convert documents (PDF, DOCX, XLSX, PPTX) to Markdown text and pictures with Docling.

Two ways to run Docling, chosen by the Topic's Docling Server setting:

- ``"embedded"``: the docling library in a converter child process (see below). PDF
  layout and table models can not be downloaded here, so PDFs go through docling's
  model-free ``NativePdfPipeline`` (docling-parse text cells and embedded bitmaps; no
  reading order, headings or tables). DOCX, XLSX and PPTX use docling's own backends,
  which need no models.
- an ``http(s)://`` URL: a docling-serve instance, called on ``/v1/convert/file``, from
  this process (httpx's timeout stops the wait; the server stops its own work).

Both ways end in a ``DoclingDocument``, from which the same code takes the Markdown
and the pictures, so the rest of the product does not care which one ran.

What runs where (embedded):

- The worker (the RQ job, this process) checks the file (extension, zip bomb), hands
  the bytes to one long-lived **converter process** and waits at most ``timeout_s``
  (:mod:`ragtopics.ingest.convert_process`). That process imports docling once (~3-10 s,
  torch; not counted against the timeout) and converts document after document; on a
  timeout it is killed (SIGTERM, then SIGKILL) and a new one is started for the next
  document, so an overrunning conversion never keeps the worker busy.
- In the converter process, after docling: each PDF page of the page range that gave
  no text (no text item with provenance on it) is either read by **OCR** (Docling
  Settings ``ocr`` on) or reported in ``unreadable_pages`` with a warning. OCR renders
  the page with pypdfium2 at 200 dpi and recognises its lines with
  ``rapidocr-onnxruntime`` (:mod:`ragtopics.ingest.ocr`), inside the same timeout; the
  paragraphs go into the DoclingDocument as text items with page provenance, so the
  Markdown export and the structure chunker see them. That engine was chosen because
  its PP-OCRv4 ONNX models ship inside the PyPI wheel (nothing is downloaded, no
  network), it is Apache-2.0 licensed and runs on the CPU with ONNX Runtime.
  Only pages without any text are OCR'd (a page with a text layer and a scanned
  picture keeps just its text layer), and docling's own OCR (which needs its layout
  model) is not used.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import httpx

from ragtopics.documents.sniff import check_zip_archive
from ragtopics.errors import ConfigurationError, InvalidSettingError, ReadError
from ragtopics.ingest import ocr
from ragtopics.ingest.convert_process import ConverterProcess

if TYPE_CHECKING:  # docling imports torch (~10 s), so it is only imported when a document is converted
    from docling_core.types.doc import DoclingDocument

log = logging.getLogger(__name__)

#: The file types this module converts (the caller picks the reader by extension).
DOCUMENT_EXTENSIONS: frozenset[str] = frozenset({"pdf", "docx", "xlsx", "pptx"})
#: How much text near a picture is kept to link it to chunks later.
NEIGHBOUR_TEXT_CHARS = 500

_PIPELINE_BY_EXTENSION = {
    "docx": "docling DOCX backend (MsWordDocumentBackend, simple pipeline, no models)",
    "xlsx": "docling XLSX backend (MsExcelDocumentBackend, simple pipeline, no models)",
    "pptx": "docling PPTX backend (MsPowerpointDocumentBackend, simple pipeline, no models)",
}
_NATIVE_PDF_PIPELINE = "docling native PDF pipeline (no layout models, offline; docling-parse backend)"
_CAPTION_START = re.compile(r"^\s*(figure|fig\.|abbildung|abb\.|bild|image|picture|chart|diagram)\b", re.IGNORECASE)
_PAGE_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


@dataclass(frozen=True, slots=True)
class Picture:
    """A picture lifted out of a document.

    Attributes:
        index: docling's picture number in the document (0-based, document order).
        image_png: the picture as PNG bytes.
        caption: its caption ("" when it has none).
        page: the 1-based page (slide, sheet) it sits on; None for formats without pages.
        neighbour_text: the text just before the picture (or just after, when
            nothing precedes it), at most NEIGHBOUR_TEXT_CHARS characters.
    """

    index: int
    image_png: bytes
    caption: str
    page: int | None
    neighbour_text: str


@dataclass(frozen=True, slots=True)
class ConvertedDocument:
    """The result of converting one document.

    Attributes:
        text: Markdown export of the document, without picture placeholders
            (a caption stays in the text where docling put it).
        pictures: the pictures that carried an image, in document order.
        pipeline: what ran, for the upload log, including what was skipped.
        pages: pages (PDF), slides (PPTX) or sheets (XLSX) of the source file;
            None for DOCX, which has no pages.
        document: the ``DoclingDocument`` itself (structure, page provenance), for
            structure-aware chunking; None when a docling-serve answer had no JSON.
        unreadable_pages: 1-based pages that gave no text (no text layer and no OCR).
        ocr_pages: 1-based pages whose text came from OCR.
    """

    text: str
    pictures: tuple[Picture, ...]
    pipeline: str
    pages: int | None
    document: Any = None
    unreadable_pages: tuple[int, ...] = ()
    ocr_pages: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DoclingOptions:
    """The Topic's "Docling Settings (advanced)", passed through to the converter.

    Attributes:
        ocr: read PDF pages without a text layer by OCR (the embedded converter:
            rapidocr-onnxruntime on those pages only; a docling-serve URL: its own OCR).
        table_structure: recover PDF table structure (needs a model: skipped offline).
        page_range: ``""`` for all pages, ``"2"`` or ``"1-3"`` (1-based, inclusive);
            applies to PDF pages, PPTX slides and XLSX sheets, not to DOCX.
        timeout_s: the longest a conversion may take.

    Raises:
        InvalidSettingError: on a malformed page range or a timeout below 1 s.
    """

    ocr: bool = False
    table_structure: bool = True
    page_range: str = ""
    timeout_s: int = 300

    def __post_init__(self) -> None:
        if self.timeout_s < 1:
            raise InvalidSettingError(f"Docling timeout must be at least 1 s, got {self.timeout_s}")
        parse_page_range(self.page_range)


_DOCUMENT_KEY = re.compile(r"\s*(?:with key\s+)?(?:key=)?\b[0-9a-f]{32,}\b", re.IGNORECASE)


def _plain_reason(message: str) -> str:
    """A Docling error message without its internal document hash keys (64 hex digits, repeated).

    ``docling-parse could not load document 6d14...: Failed to load document with key key=6d14...``
    becomes ``docling-parse could not load document: Failed to load document``.
    """
    return _DOCUMENT_KEY.sub("", message).strip()


def parse_page_range(page_range: str) -> tuple[int, int] | None:
    """Parse ``"2"`` or ``"1-3"`` into 1-based inclusive bounds.

    Args:
        page_range: the setting's text; empty or blank means all pages.

    Returns:
        ``(first, last)``, or None for all pages.

    Raises:
        InvalidSettingError: when the text is not ``N`` or ``N-M`` with 1 <= N <= M.
    """
    if not page_range.strip():
        return None
    match = _PAGE_RANGE.match(page_range)
    first = int(match.group(1)) if match else 0
    last = int(match.group(2) or first) if match else 0
    if not match or first < 1 or last < first:
        raise InvalidSettingError(f"Docling page range {page_range!r} is not like '2' or '1-3' (1-based, first <= last)")
    return first, last


def convert_document(
    data: bytes,
    *,
    file_name: str,
    options: DoclingOptions = DoclingOptions(),
    docling_server: str = "embedded",
) -> ConvertedDocument:
    """Convert a document to Markdown text and pictures with Docling.

    The embedded converter runs in the converter process (started and warmed up
    first, which is not counted), waited for at most ``options.timeout_s``, OCR
    included; after a timeout that process is killed. PDF pages that gave no text
    are listed in ``unreadable_pages`` and named in a logged warning.

    Args:
        data: the file's bytes.
        file_name: the file name; its extension picks the format (see DOCUMENT_EXTENSIONS).
        options: the Topic's Docling settings.
        docling_server: ``"embedded"`` for the local library, or a docling-serve URL.

    Returns:
        The converted document.

    Raises:
        ConfigurationError: when docling_server is neither "embedded" nor an http(s) URL.
        ReadError: on an unsupported extension, a corrupt or truncated file, a zip
            bomb, an unreachable or failing Docling server, a conversion slower than
            ``options.timeout_s`` (its process is killed), or a converter process
            that died (``the converter process died (signal 9, SIGKILL) while converting X``).
    """
    extension = _extension(file_name)
    if extension not in DOCUMENT_EXTENSIONS:
        raise ReadError(f"{file_name}: Docling converts {', '.join(sorted(DOCUMENT_EXTENSIONS))}, not {extension!r}")
    server = docling_server.strip()
    if server != "embedded" and not _is_http_url(server):
        raise ConfigurationError(f"Docling Server must be 'embedded' or an http(s) URL, got {docling_server!r}")
    if extension != "pdf":  # also spares a Docling server the zip bombs
        check_zip_archive(data, file_name=file_name)
    if server == "embedded":
        converted = _CONVERTER.run(
            _convert_embedded, data, file_name, extension, options, timeout_s=options.timeout_s, file_name=file_name
        )
    else:
        converted = _convert_on_server(data, file_name, options, server.rstrip("/"))
        if extension == "pdf" and converted.document is not None:
            pages = _pages_to_check(options.page_range, converted.document)
            converted = replace(converted, unreadable_pages=ocr.pages_without_text(converted.document, pages))
    if converted.unreadable_pages:
        log.warning("%s", _unreadable_warning(file_name, converted.unreadable_pages, options, embedded=server == "embedded"))
    log.info(
        "Converted %s with %s: %d chars, %d pictures", file_name, converted.pipeline, len(converted.text), len(converted.pictures)
    )
    return converted


def _import_docling() -> None:
    """Import the docling library, telling the Hugging Face Hub client to stay offline first.

    Also the converter process's warm-up (~3-10 s, torch), run before any timeout starts.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hub; fail fast instead of hanging
    import docling.document_converter  # noqa: F401


#: The process that runs embedded conversions (started on first use, replaced after a timeout or crash).
_CONVERTER = ConverterProcess(name="docling-converter", label="Docling conversion", warm_up=_import_docling)


def converter_pid() -> int | None:
    """The process id of the running converter process, or None while none runs (none started, or killed)."""
    return _CONVERTER.pid


@functools.cache
def _document_converter() -> Any:
    """docling's DocumentConverter for the embedded formats, built once per converter process."""
    # deferred: the docling library loads torch (seconds); only the embedded converter needs it
    from docling.datamodel.base_models import InputFormat
    from docling.datamodel.pipeline_options import NativePdfPipelineOptions
    from docling.document_converter import DocumentConverter, NativePdfFormatOption

    # No document_timeout: the converter process is the clock, and is killed when time is up.
    pdf_options = NativePdfPipelineOptions(generate_page_images=False, generate_picture_images=True)
    return DocumentConverter(
        allowed_formats=[InputFormat.PDF, InputFormat.DOCX, InputFormat.XLSX, InputFormat.PPTX],
        format_options={InputFormat.PDF: NativePdfFormatOption(pipeline_options=pdf_options)},
    )


def _convert_embedded(data: bytes, file_name: str, extension: str, options: DoclingOptions) -> ConvertedDocument:
    """Convert with the docling library in this process (the converter process), without models or network.

    PDF pages of the page range that gave no text are read by OCR when ``options.ocr``
    is on and the engine imports, else listed in ``unreadable_pages``.
    """
    _import_docling()
    # deferred: the docling library loads torch (seconds); only the embedded converter needs it
    from docling.datamodel.base_models import ConversionStatus, DocumentStream

    bounds = parse_page_range(options.page_range)
    kwargs = {"page_range": bounds} if bounds else {}
    try:
        result = _document_converter().convert(
            DocumentStream(name=file_name, stream=io.BytesIO(data)), raises_on_error=False, **kwargs
        )
    except Exception as exc:  # docling raises its own types for unreadable input
        raise ReadError(f"{file_name} could not be converted by Docling: {exc}") from exc
    reasons = [_plain_reason(error.error_message) for error in result.errors]
    if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
        reason = "; ".join(reasons) or f"status {result.status.value}"
        raise ReadError(f"{file_name} is not a valid {extension.upper()} or could not be converted: {reason}")
    if reasons:
        log.warning("Docling converted %s only partly: %s", file_name, "; ".join(reasons))
    pages = result.input.page_count or None
    empty: tuple[int, ...] = ()
    ocr_pages: tuple[int, ...] = ()
    if extension == "pdf":
        empty = ocr.pages_without_text(result.document, _pages_to_check(options.page_range, result.document, pages))
        if empty and options.ocr and not ocr.engine_unavailable_reason():
            ocr_pages = ocr.read_pages_by_ocr(result.document, data, empty)
    converted = _from_docling_document(result.document, _pipeline_note(extension, options), pages)
    unreadable = tuple(page for page in empty if page not in ocr_pages)
    return replace(converted, unreadable_pages=unreadable, ocr_pages=ocr_pages)


def _pages_to_check(page_range: str, document: DoclingDocument, page_count: int | None = None) -> range | list[int]:
    """The 1-based pages that were converted: the page range within the file's pages, else all pages."""
    total = page_count or max(document.pages, default=0)
    bounds = parse_page_range(page_range)
    return range(bounds[0], min(bounds[1], total) + 1) if bounds else range(1, total + 1)


def _unreadable_warning(file_name: str, pages: tuple[int, ...], options: DoclingOptions, *, embedded: bool) -> str:
    """``scan.pdf: pages 2, 3 have no text layer and were not read (turn on OCR in Docling Settings to read them)``."""
    many = len(pages) > 1
    subject = f"{file_name}: page{'s' if many else ''} {', '.join(map(str, pages))} {'have' if many else 'has'} no text layer"
    them, verb = ("them", "were") if many else ("it", "was")
    if not options.ocr:
        return f"{subject} and {verb} not read (turn on OCR in Docling Settings to read {them})"
    reason = ocr.engine_unavailable_reason() if embedded else ""
    if reason:
        return f"{subject} and {verb} not read (OCR is on but can not run: {reason})"
    engine = "OCR" if embedded else "the Docling server's OCR"
    return f"{subject} and {engine} found no text on {them}"


def ocr_unavailable_reason(docling_server: str) -> str:
    """Why OCR cannot run for a Docling Server setting, or "" when it can (a docling-serve URL decides itself).

    The embedded converter reads pages without a text layer with rapidocr-onnxruntime
    (see :mod:`ragtopics.ingest.ocr`); it can run when that engine imports.
    """
    if docling_server.strip() != "embedded":
        return ""
    return ocr.engine_unavailable_reason()


def _pipeline_note(extension: str, options: DoclingOptions) -> str:
    """Say what the embedded converter ran and what it skipped, for the upload log."""
    if extension == "pdf":
        notes = [_NATIVE_PDF_PIPELINE]
        if options.ocr:
            reason = ocr.engine_unavailable_reason()
            notes.append(f"OCR skipped ({reason})" if reason else f"OCR: {ocr.OCR_ENGINE} on pages without a text layer")
        if options.table_structure:
            notes.append("table structure skipped (needs a model)")
    else:
        notes = [_PIPELINE_BY_EXTENSION[extension]]
        if options.ocr:
            notes.append(f"OCR not applicable to {extension.upper()}")
    if options.page_range.strip():
        applies = extension != "docx"
        notes.append(f"pages {options.page_range.strip()}" if applies else "page range ignored (DOCX has no pages)")
    return "; ".join(notes)


def _convert_on_server(data: bytes, file_name: str, options: DoclingOptions, server: str) -> ConvertedDocument:
    """Convert on a docling-serve instance (``POST /v1/convert/file``, multipart)."""
    # deferred: docling_core takes seconds to import; only a converted document needs it
    from docling_core.types.doc import DoclingDocument

    form: dict[str, Any] = {
        "to_formats": ["md", "json"],
        "image_export_mode": "embedded",
        "include_images": "true",
        "do_ocr": str(options.ocr).lower(),
        "do_table_structure": str(options.table_structure).lower(),
        "document_timeout": str(options.timeout_s),
        "abort_on_error": "false",
    }
    bounds = parse_page_range(options.page_range)
    if bounds:
        form["page_range"] = [str(bounds[0]), str(bounds[1])]
    url = f"{server}/v1/convert/file"
    try:
        response = httpx.post(
            url,
            data=form,
            files={"files": (file_name, data, "application/octet-stream")},
            timeout=httpx.Timeout(options.timeout_s, connect=min(10.0, options.timeout_s)),
        )
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ReadError(f"{file_name}: Docling server at {server} is not reachable: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise ReadError(f"{file_name}: Docling server at {server} took longer than {options.timeout_s} s") from exc
    except httpx.HTTPError as exc:
        raise ReadError(f"{file_name}: Docling server at {server} failed: {exc}") from exc
    if response.status_code != 200:
        raise ReadError(f"{file_name}: Docling server at {server} answered HTTP {response.status_code}: {response.text[:300]}")
    try:
        body = response.json()
        document = body["document"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReadError(f"{file_name}: Docling server at {server} sent an unexpected answer: {response.text[:300]}") from exc
    if body.get("status") not in ("success", "partial_success"):
        raise ReadError(
            f"{file_name} could not be converted by the Docling server at {server}: {body.get('errors') or body.get('status')}"
        )
    pipeline = f"docling-serve at {server} (OCR {'on' if options.ocr else 'off'}, table structure {'on' if options.table_structure else 'off'})"
    if not document.get("json_content"):
        return ConvertedDocument(
            text=_tidy_markdown(document.get("md_content") or ""), pictures=(), pipeline=pipeline, pages=None
        )
    try:
        docling_document = DoclingDocument.model_validate(document["json_content"])
    except ValueError as exc:
        raise ReadError(f"{file_name}: Docling server at {server} sent a document that does not parse: {exc}") from exc
    return _from_docling_document(docling_document, pipeline, docling_document.num_pages() or None)


def _from_docling_document(document: DoclingDocument, pipeline: str, pages: int | None) -> ConvertedDocument:
    """Take the Markdown and the pictures out of a DoclingDocument."""
    markdown = document.export_to_markdown(image_placeholder="", escape_underscores=False, escape_html=False)
    return ConvertedDocument(
        text=_tidy_markdown(markdown), pictures=_extract_pictures(document), pipeline=pipeline, pages=pages, document=document
    )


def _extract_pictures(document: DoclingDocument) -> tuple[Picture, ...]:
    """Lift every picture that carries an image out as PNG, with caption and neighbouring text."""
    # deferred: docling_core takes seconds to import; only a converted document needs it
    from docling_core.types.doc import PictureItem, TextItem

    items = [item for item, _level in document.iterate_items() if isinstance(item, (PictureItem, TextItem))]
    pictures = []
    for position, item in enumerate(items):
        if not isinstance(item, PictureItem):
            continue
        image = item.get_image(document)
        if image is None:
            log.info("Picture %s has no image data; skipped", item.self_ref)
            continue
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        caption = item.caption_text(document) or _caption_after(items, position)
        pictures.append(
            Picture(
                index=int(item.self_ref.rsplit("/", 1)[-1]),
                image_png=buffer.getvalue(),
                caption=caption,
                page=item.prov[0].page_no if item.prov else None,
                neighbour_text=_neighbour_text(items, position, caption),
            )
        )
    return tuple(pictures)


def _caption_after(items: list[Any], position: int) -> str:
    """A caption docling did not recognise: the next paragraph, when it reads like one ("Figure 1: …")."""
    following = items[position + 1] if position + 1 < len(items) else None
    text = getattr(following, "text", "") or ""
    return text.strip() if _CAPTION_START.match(text) else ""


def _neighbour_text(items: list[Any], position: int, caption: str) -> str:
    """The nearest text before the picture, else after it (captions excluded)."""
    before = reversed(items[:position])
    after = items[position + 1 :]
    for candidates in (before, after):
        for item in candidates:
            text = (getattr(item, "text", "") or "").strip()
            if text and text != caption:
                return text[:NEIGHBOUR_TEXT_CHARS]
    return ""


#: A pipe-table line (``| a | b |``) as docling exports it, padded so that the columns align.
_TABLE_LINE = re.compile(r"^[ \t]*\|.*\|[ \t]*$", re.MULTILINE)


def _tidy_markdown(markdown: str) -> str:
    """Drop docling's picture placeholders and the blank lines they leave, and unpad pipe tables.

    Docling pads every cell of a table to its column's widest value; a column of long
    texts then turns each row into thousands of spaces, which fill chunks (and repeat in
    every chunk's copy of the header) without adding a word.
    """
    markdown = markdown.replace("<!-- image -->", "")
    markdown = _TABLE_LINE.sub(lambda m: _unpadded_row(m.group(0)), markdown)
    return re.sub(r"\n{3,}", "\n\n", markdown).strip()


def _unpadded_row(line: str) -> str:
    """``|  a   |  b |`` → ``| a | b |``; a delimiter row becomes ``|---|---|`` (alignment colons kept)."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
        cells = [("" if not c.startswith(":") else ":") + "---" + (":" if c.endswith(":") and len(c) > 1 else "") for c in cells]
    return "| " + " | ".join(cells) + " |"


def _is_http_url(value: str) -> bool:
    parsed = urlparse(value)
    return parsed.scheme in ("http", "https") and bool(parsed.netloc)


def _extension(file_name: str) -> str:
    stem, dot, extension = file_name.rpartition(".")
    return extension.lower() if dot and stem else ""
