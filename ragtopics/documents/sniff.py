"""Content checks of an upload before anything is stored: is the file what its extension says, and safe to open?

:func:`check_content` refuses, with a message naming the file and the problem:

* an empty file;
* a PDF that is not one (no ``%PDF-`` header), that is also a ZIP archive (a polyglot, which
  other programs would open as something else), that is encrypted, that has more than
  :data:`MAX_PDF_PAGES` pages, or a page larger than :data:`MAX_PAGE_POINTS` on a side;
* an Office file that is an OLE compound file: a password-protected DOCX/XLSX/PPTX is stored
  that way (MS-OFFCRYPTO), as are the old binary .doc/.xls/.ppt formats;
* a picture that is not a readable image of its type, or that decodes to more than
  :data:`MAX_IMAGE_PIXELS` pixels (a decompression bomb).

Zip archives (DOCX, XLSX, PPTX) are checked for bombs and members outside the archive by
:func:`check_zip_archive` (before docling opens them, and already at upload).
"""

from __future__ import annotations

import io
import zipfile

import pypdfium2 as pdfium
from PIL import Image, UnidentifiedImageError

from ragtopics.errors import ReadError

#: Office files are zip archives; refuse one that would unpack to more than this.
MAX_UNCOMPRESSED_BYTES = 500 * 1024 * 1024
#: A member larger than MAX_RATIO_MEMBER_BYTES that compresses better than this is a zip bomb.
MAX_COMPRESSION_RATIO = 100
MAX_RATIO_MEMBER_BYTES = 10 * 1024 * 1024
#: Most pages a PDF may have (a PDF with thousands of pages is refused before conversion).
MAX_PDF_PAGES = 2_000
#: Longest page side accepted, in PDF points (1/72 inch): 5,000 pt is about 1.76 m.
MAX_PAGE_POINTS = 5_000.0
#: Most pixels a picture may decode to: 100 megapixels (Pillow warns at 89 and refuses at 179).
MAX_IMAGE_PIXELS = 100_000_000
#: Magic bytes of an OLE compound file (encrypted Office files, .doc/.xls/.ppt).
OLE_MAGIC = bytes.fromhex("D0CF11E0A1B11AE1")
#: The image format Pillow must find for each picture extension.
IMAGE_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "gif": "GIF", "webp": "WEBP", "bmp": "BMP", "tiff": "TIFF"}


def check_content(name: str, ext: str, data: bytes) -> None:
    """Refuse a file whose bytes are empty, not of its type, encrypted or built to exhaust the reader.

    Args:
        name: the cleaned file name, for messages.
        ext: its lower-case extension.
        data: the file's bytes.

    Raises:
        ReadError: saying what is wrong and what to do.
    """
    if not data:
        raise ReadError(f"{name} is empty (0 bytes)")
    if ext == "pdf":
        _check_pdf(name, data)
    elif ext in ("docx", "xlsx", "pptx") and data.startswith(OLE_MAGIC):
        raise ReadError(
            f"{name} is password-protected, or an old binary Office file (.doc, .xls, .ppt) renamed: "
            f"save it as an unencrypted {ext.upper()} and upload it again"
        )
    elif ext in IMAGE_FORMATS:
        _check_image(name, ext, data)


def _check_pdf(name: str, data: bytes) -> None:
    if b"%PDF-" not in data[:1024]:
        raise ReadError(f"{name} is not a PDF (it does not start with a PDF header); check the file's type")
    if zipfile.is_zipfile(io.BytesIO(data)):
        raise ReadError(f"{name} is both a PDF and a ZIP archive (a polyglot file); upload the PDF alone")

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ReadError(f"{name} is encrypted (password-protected); save it without a password and upload it again") from exc
        raise ReadError(f"{name} is not a valid PDF: {exc}") from exc
    try:
        pages = len(document)
        if pages > MAX_PDF_PAGES:
            raise ReadError(f"{name} has {pages:,} pages, more than the {MAX_PDF_PAGES:,} a document may have; split it")
        for index in range(pages):
            width, height = document[index].get_size()
            if max(width, height) > MAX_PAGE_POINTS:
                raise ReadError(
                    f"{name}: page {index + 1} is {width / 72 * 2.54:.0f} × {height / 72 * 2.54:.0f} cm, larger than "
                    f"{MAX_PAGE_POINTS / 72 * 2.54:.0f} cm on a side; such a page cannot be read"
                )
    finally:
        document.close()


def _check_image(name: str, ext: str, data: bytes) -> None:
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only: the size is known before any decoding
            width, height, found = image.width, image.height, image.format
            if width * height > MAX_IMAGE_PIXELS:
                raise ReadError(
                    f"{name} is {width:,} × {height:,} pixels ({width * height / 1e6:,.0f} megapixels), more than "
                    f"{MAX_IMAGE_PIXELS / 1e6:.0f}; scale it down"
                )
            image.verify()
    except ReadError:
        raise
    except Image.DecompressionBombError as exc:
        raise ReadError(f"{name} decodes to too many pixels (a decompression bomb): {exc}") from exc
    except UnidentifiedImageError as exc:
        raise ReadError(
            f"{name} is not a readable {IMAGE_FORMATS[ext]} picture (it is cut short, damaged or not a picture)"
        ) from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ReadError(f"{name} is not a readable {IMAGE_FORMATS[ext]} picture: {exc}") from exc
    if found != IMAGE_FORMATS[ext] and not (ext in ("jpg", "jpeg") and found == "MPO"):
        raise ReadError(f"{name} is a {found} picture named .{ext}; rename it to its real type")


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
    for member in members:
        parts = member.filename.replace("\\", "/").split("/")
        if member.filename.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
            raise ReadError(f"{file_name} is refused: its member {member.filename!r} points outside the archive")
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


def _extension(file_name: str) -> str:
    stem, dot, extension = file_name.rpartition(".")
    return extension.lower() if dot and stem else ""


def _mib(size_bytes: int) -> int:
    return round(size_bytes / (1024 * 1024))
