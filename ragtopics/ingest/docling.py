"""Convert documents (PDF, DOCX, XLSX, PPTX) to Markdown text and pictures with Docling.

Two ways to run Docling, chosen by the Topic's Docling Server setting:

- ``"embedded"``: the docling library in this process. PDF layout, table and OCR
  models can not be downloaded here, so PDFs go through docling's model-free
  ``NativePdfPipeline`` (docling-parse text cells and embedded bitmaps; no reading
  order, headings or tables). DOCX, XLSX and PPTX use docling's own backends,
  which need no models.
- an ``http(s)://`` URL: a docling-serve instance, called on ``/v1/convert/file``.

Both ways end in a ``DoclingDocument``, from which the same code takes the Markdown
and the pictures, so the rest of the product does not care which one ran.
"""

from __future__ import annotations

import io
import logging
import os
import re
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ragtopics.errors import ConfigurationError, InvalidSettingError, ReadError

if TYPE_CHECKING:  # docling imports torch (~10 s), so it is only imported when a document is converted
    from docling_core.types.doc import DoclingDocument

log = logging.getLogger(__name__)

#: The file types this module converts (the caller picks the reader by extension).
DOCUMENT_EXTENSIONS: frozenset[str] = frozenset({"pdf", "docx", "xlsx", "pptx"})
#: Office files are zip archives; refuse one that would unpack to more than this.
MAX_UNCOMPRESSED_BYTES = 500 * 1024 * 1024
#: A member larger than MAX_RATIO_MEMBER_BYTES that compresses better than this is a zip bomb.
MAX_COMPRESSION_RATIO = 100
MAX_RATIO_MEMBER_BYTES = 10 * 1024 * 1024
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
        ocr: run OCR on PDFs (needs OCR models: refused by the embedded converter).
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

    The conversion runs in a daemon worker thread that is waited for at most
    ``options.timeout_s``; Python can not stop a thread, so after a timeout it may
    linger until docling finishes on its own (for PDFs docling's own
    ``document_timeout`` is set too, so it stops soon after).

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
            bomb, an unreachable or
            failing Docling server, or a conversion slower than ``options.timeout_s``.
    """
    extension = _extension(file_name)
    if extension not in DOCUMENT_EXTENSIONS:
        raise ReadError(f"{file_name}: Docling converts {', '.join(sorted(DOCUMENT_EXTENSIONS))}, not {extension!r}")
    server = docling_server.strip()
    if server != "embedded" and not _is_http_url(server):
        raise ConfigurationError(f"Docling Server must be 'embedded' or an http(s) URL, got {docling_server!r}")
    if extension != "pdf":  # also spares a Docling server the zip bombs
        check_zip_archive(data, file_name=file_name)
    work: Callable[[], ConvertedDocument]
    if server == "embedded":
        # A Topic stored with OCR on (before OCR was refused when set) still reads the text layer.
        _import_docling()  # ~10 s on first use (torch); not counted against timeout_s
        work = partial(_convert_embedded, data, file_name, extension, options)
    else:
        work = partial(_convert_on_server, data, file_name, options, server.rstrip("/"))
    converted = _run_with_timeout(work, timeout_s=options.timeout_s, file_name=file_name)
    log.info(
        "Converted %s with %s: %d chars, %d pictures", file_name, converted.pipeline, len(converted.text), len(converted.pictures)
    )
    return converted


def check_zip_archive(
    data: bytes,
    *,
    file_name: str,
    max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BYTES,
    max_ratio: int = MAX_COMPRESSION_RATIO,
) -> None:
    """Refuse an Office file that is not a zip archive or is a zip bomb, before docling opens it.

    Args:
        data: the file's bytes (DOCX, XLSX and PPTX are zip archives).
        file_name: for the error message.
        max_uncompressed_bytes: the most all members may unpack to, in bytes.
        max_ratio: the highest compression ratio allowed for a member above MAX_RATIO_MEMBER_BYTES.

    Raises:
        ReadError: when the bytes are no zip archive, unpack to too much, or compress suspiciously well.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise ReadError(
            f"{file_name} is not a valid {_extension(file_name).upper()} (not a readable zip archive): {exc}"
        ) from exc
    total = sum(member.file_size for member in members)
    if total > max_uncompressed_bytes:
        raise ReadError(
            f"{file_name} is refused: it would unpack to {_mib(total)} MiB, more than the {_mib(max_uncompressed_bytes)} MiB allowed"
        )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > MAX_RATIO_MEMBER_BYTES and ratio > max_ratio:
            raise ReadError(
                f"{file_name} is refused as a zip bomb: {member.filename} unpacks to {_mib(member.file_size)} MiB "
                f"from {member.compress_size} bytes (ratio {ratio:.0f}:1, more than {max_ratio}:1)"
            )


def _run_with_timeout(work: Callable[[], ConvertedDocument], *, timeout_s: int, file_name: str) -> ConvertedDocument:
    """Run work in a daemon thread and wait for it at most timeout_s (the thread may linger)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except Exception as exc:  # noqa: BLE001 - handed over to the waiting thread, re-raised there
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"docling-{file_name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ReadError(f"{file_name}: Docling conversion took longer than {timeout_s} s and was abandoned")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _import_docling() -> None:
    """Import the docling library, telling the Hugging Face Hub client to stay offline first."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hub; fail fast instead of hanging
    import docling.document_converter  # noqa: F401


def _convert_embedded(data: bytes, file_name: str, extension: str, options: DoclingOptions) -> ConvertedDocument:
    """Convert with the docling library in this process, without models or network."""
    _import_docling()
    from docling.datamodel.base_models import ConversionStatus, DocumentStream, FailureCategory, InputFormat
    from docling.datamodel.pipeline_options import NativePdfPipelineOptions
    from docling.document_converter import DocumentConverter, NativePdfFormatOption

    pdf_options = NativePdfPipelineOptions(
        generate_page_images=False, generate_picture_images=True, document_timeout=float(options.timeout_s)
    )
    # A fresh converter per call: cheap (pipelines are built lazily), and a thread
    # abandoned after a timeout never shares one with the next conversion.
    converter = DocumentConverter(
        allowed_formats=[InputFormat.PDF, InputFormat.DOCX, InputFormat.XLSX, InputFormat.PPTX],
        format_options={InputFormat.PDF: NativePdfFormatOption(pipeline_options=pdf_options)},
    )
    bounds = parse_page_range(options.page_range)
    kwargs = {"page_range": bounds} if bounds else {}
    try:
        result = converter.convert(DocumentStream(name=file_name, stream=io.BytesIO(data)), raises_on_error=False, **kwargs)
    except Exception as exc:  # docling raises its own types for unreadable input
        raise ReadError(f"{file_name} could not be converted by Docling: {exc}") from exc
    reasons = [_plain_reason(error.error_message) for error in result.errors]
    if any(error.category == FailureCategory.TIMEOUT for error in result.errors):
        raise ReadError(f"{file_name}: Docling conversion took longer than {options.timeout_s} s: {reasons[0]}")
    if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
        reason = "; ".join(reasons) or f"status {result.status.value}"
        raise ReadError(f"{file_name} is not a valid {extension.upper()} or could not be converted: {reason}")
    if reasons:
        log.warning("Docling converted %s only partly: %s", file_name, "; ".join(reasons))
    pages = result.input.page_count or None
    return _from_docling_document(result.document, _pipeline_note(extension, options), pages)


def ocr_unavailable_reason(docling_server: str) -> str:
    """Why OCR cannot run for a Docling Server setting, or "" when it can (a docling-serve URL decides itself).

    The embedded converter runs docling's model-free native PDF pipeline: OCR needs the
    layout model and an OCR engine's weights, which are not installed and cannot be
    downloaded at run time.
    """
    if docling_server.strip() != "embedded":
        return ""
    return ("the embedded Docling has no OCR engine or layout model offline (their model weights are not installed "
            "and cannot be downloaded); PDFs are read from their text layer")  # fmt: skip


def _pipeline_note(extension: str, options: DoclingOptions) -> str:
    """Say what the embedded converter ran and what it skipped, for the upload log."""
    if extension == "pdf":
        notes = [_NATIVE_PDF_PIPELINE]
        if options.ocr:
            notes.append("OCR skipped (not available in the embedded converter)")
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
    import httpx
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
    return ConvertedDocument(text=_tidy_markdown(markdown), pictures=_extract_pictures(document), pipeline=pipeline, pages=pages,
                             document=document)


def _extract_pictures(document: DoclingDocument) -> tuple[Picture, ...]:
    """Lift every picture that carries an image out as PNG, with caption and neighbouring text."""
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


def _mib(size_bytes: int) -> int:
    return round(size_bytes / (1024 * 1024))
