"""Readers that take the text out of an uploaded file, by file type.

* text files (plain text, Markdown, source code): decoded, encoding detected; HTML pages
  are converted to Markdown (see :mod:`ragtopics.ingest.html`) so tables and code stay whole;
* structured files (json, jsonl, xml, yaml, toml, csv, tsv): records, see :mod:`ragtopics.ingest.structured`;
* documents (pdf, docx, xlsx, pptx): converted by Docling, see :mod:`ragtopics.ingest.docling`;
* images (jpg, png, gif, ...): one picture, see :mod:`ragtopics.ingest.pictures`; the text is the
  file name until :mod:`ragtopics.ingest.pipeline` replaces it with the picture's description.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from charset_normalizer import from_bytes

from ragtopics.errors import ReadError
from ragtopics.ingest.docling import DoclingOptions, convert_document
from ragtopics.ingest.html import html_to_markdown
from ragtopics.ingest.pictures import read_image
from ragtopics.ingest.structured import flatten_record, read_records
from ragtopics.text.file_types import (
    DOCUMENT_TYPES,
    HTML_EXTENSIONS,
    IMAGE_READER,
    IMAGE_TYPES,
    STRUCTURED_TYPES,
    TEXT_EXTENSIONS,
    extension_of,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """The text of a file and how it was read.

    Attributes:
        text: the document text ("" when the file has no readable text).
        reader: which reader ran, e.g. ``"text"``.
        encoding: the detected character encoding, for text files.
        records: for structured files, one flattened ``key: value`` text per record
            (chunked without ever cutting a record); ``None`` for other files.
        pictures: pictures lifted out of a document, or the one picture of an image
            file (``ragtopics.ingest.docling.Picture``).
        document: for documents converted by Docling, the ``DoclingDocument`` (None otherwise).
        page_count: pages (slides, sheets) of a document; None for files without pages.
        unreadable_pages: 1-based pages of a document that gave no text.
        ocr_pages: 1-based pages of a document read by OCR.
    """

    text: str
    reader: str
    encoding: str = ""
    records: tuple[str, ...] | None = None
    pictures: tuple = ()
    document: Any = None
    page_count: int | None = None
    unreadable_pages: tuple[int, ...] = ()
    ocr_pages: tuple[int, ...] = ()


def read_text_bytes(data: bytes, *, file_name: str) -> ReadResult:
    """Decode a text file, detecting its encoding.

    UTF-8 (with or without BOM) is tried first; otherwise charset-normalizer picks
    the most plausible encoding.

    Raises:
        ReadError: when the bytes are binary (NUL bytes, or no plausible encoding).
    """
    if not data:
        return ReadResult(text="", reader="text", encoding="utf-8")
    if b"\x00" in data[:65536] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ReadError(
            f"{file_name} looks like a binary file (it contains NUL bytes), not text; upload it with its real extension"
        )
    try:
        return ReadResult(text=data.decode("utf-8-sig"), reader="text", encoding="utf-8")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None:
        raise ReadError(f"{file_name} is not readable text in any known encoding")
    text = str(best)
    if _control_ratio(text) > 0.05:
        raise ReadError(f"{file_name} looks like a binary file, not text")
    return ReadResult(text=text, reader="text", encoding=best.encoding)


def read_file(data: bytes, *, file_name: str, docling_server: str = "embedded", docling_options=None) -> ReadResult:
    """Read the text of an uploaded file by its extension.

    Args:
        data: the file's bytes.
        file_name: its (cleaned) name; the extension picks the reader.
        docling_server: ``embedded`` or a docling-serve URL, for documents.
        docling_options: ``ragtopics.ingest.docling.DoclingOptions`` for documents.

    Raises:
        ReadError: when the file cannot be read (the message names the file and why).
    """
    ext = extension_of(file_name)
    if ext in HTML_EXTENSIONS:
        page = read_text_bytes(data, file_name=file_name)
        return ReadResult(text=html_to_markdown(page.text), reader="html", encoding=page.encoding)
    if ext in TEXT_EXTENSIONS:
        return read_text_bytes(data, file_name=file_name)
    if ext in STRUCTURED_TYPES:
        records = tuple(flatten_record(r) for r in read_records(data, file_name=file_name))
        return ReadResult(text="\n\n".join(records), reader=f"{ext} records ({len(records)})", records=records)
    if ext in DOCUMENT_TYPES:
        converted = convert_document(
            data, file_name=file_name, options=docling_options or DoclingOptions(), docling_server=docling_server
        )
        return ReadResult(
            text=converted.text,
            reader=converted.pipeline,
            pictures=converted.pictures,
            document=converted.document,
            page_count=converted.pages,
            unreadable_pages=converted.unreadable_pages,
            ocr_pages=converted.ocr_pages,
        )
    if ext in IMAGE_TYPES:
        return ReadResult(text=file_name, reader=IMAGE_READER, pictures=(read_image(data, file_name=file_name),))
    raise ReadError(f"no reader for .{ext} files")


def _control_ratio(text: str) -> float:
    sample = text[:65536]
    if not sample:
        return 0.0
    bad = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\t\n\r\f\v")
    return bad / len(sample)
