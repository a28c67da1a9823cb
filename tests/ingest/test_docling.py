"""Docling conversion of real DOCX, XLSX, PPTX and PDF files built in the test, offline.

Each sample is converted once per module through the converter process (its start,
importing docling, takes ~3-10 s once). One test runs the same conversion code in this
process while every outbound network connection is refused and recorded, which proves
that the embedded converter, OCR included, needs no models from and no network.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from PIL import Image

from ragtopics.documents.sniff import check_zip_archive
from ragtopics.errors import ConfigurationError, InvalidSettingError, ReadError
from ragtopics.ingest import docling as documents_docling
from ragtopics.ingest.convert_process import TERM_GRACE_S
from ragtopics.ingest.docling import (
    DOCUMENT_EXTENSIONS,
    ConvertedDocument,
    DoclingOptions,
    convert_document,
    parse_page_range,
)
from tests.ingest.scans import draw_page, image_pdf, scanned_invoice_pdf, squashed

MIB = 1024 * 1024


def png_bytes(color: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Quarterly Report", level=1)
    document.add_paragraph("The widget code is ZX-9000 and it ships in May.")
    document.add_heading("Figures", level=2)
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {(0, 0): "Region", (0, 1): "Revenue", (1, 0): "North", (1, 1): "4711"}.items():
        table.cell(row, col).text = text
    document.add_paragraph("The red square below marks the pilot plant.")
    document.add_picture(io.BytesIO(png_bytes((200, 30, 30))))
    document.add_paragraph("Figure 1: A red square", style="Caption")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def make_xlsx() -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    sales = workbook.active
    sales.title = "Sales"
    sales.append(["Product", "Units"])
    sales.append(["Gizmo-XL", 42])
    staff = workbook.create_sheet("Staff")
    staff.append(["Name", "Role"])
    staff.append(["Ada Quill", "Engineer"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def make_pptx() -> bytes:
    import pptx
    from pptx.util import Inches

    presentation = pptx.Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])
    first.shapes.title.text = "Kickoff"
    first.placeholders[1].text = "Project ORION-7 begins in June"
    second = presentation.slides.add_slide(presentation.slide_layouts[5])
    second.shapes.title.text = "Cooling loop diagram"
    second.shapes.add_picture(io.BytesIO(png_bytes((30, 30, 200))), Inches(1), Inches(2))
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def make_pdf() -> bytes:
    fpdf = pytest.importorskip("fpdf")  # fpdf2, a test-only dependency
    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.cell(text="Page one mentions ALPHA-111.")
    pdf.image(io.BytesIO(png_bytes((30, 200, 30))), x=20, y=40, w=40)
    pdf.add_page()
    pdf.cell(text="Page two mentions BRAVO-222.")
    return bytes(pdf.output())


def make_zip_bomb() -> bytes:
    """A .docx-named zip whose one member is 200 MiB of zeros (~0.9 MB compressed), written in 1 MiB steps."""
    buffer = io.BytesIO()
    zeros = bytes(MIB)
    # Level 1 deflates 200 MiB of zeros in ~0.7 s (level 6: ~2.5 s) and still at ~230:1.
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            for _ in range(200):
                member.write(zeros)
    return buffer.getvalue()


@contextlib.contextmanager
def network_blocked(attempts: list[object]):
    """Refuse (and record) every outbound TCP connection inside the block."""
    real_connect = socket.socket.connect

    def guarded_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(address)
            raise OSError(f"network blocked in test: {address}")
        return real_connect(sock, address)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", guarded_connect)
        patch.setattr(socket.socket, "connect_ex", lambda sock, address: guarded_connect(sock, address) or 0)
        yield


@pytest.fixture(scope="module")
def samples() -> dict[str, bytes]:
    return {"report.docx": make_docx(), "figures.xlsx": make_xlsx(), "kickoff.pptx": make_pptx()}


@pytest.fixture(scope="module")
def converted(samples) -> dict[str, ConvertedDocument]:
    return {name: convert_document(data, file_name=name) for name, data in samples.items()}


@pytest.fixture(scope="module")
def pdf_bytes() -> bytes:
    return make_pdf()


@pytest.fixture(scope="module")
def converted_pdf(pdf_bytes) -> dict[str, ConvertedDocument]:
    return {
        "all": convert_document(pdf_bytes, file_name="plant.pdf"),
        "page 2": convert_document(pdf_bytes, file_name="plant.pdf", options=DoclingOptions(page_range="2")),
    }


def assert_png(picture_bytes: bytes, size: tuple[int, int]) -> None:
    image = Image.open(io.BytesIO(picture_bytes))
    assert image.format == "PNG"
    assert image.size == size


def test_nothing_reaches_the_network_while_converting(samples, pdf_bytes):
    """The converter process's code, run in this process (where sockets can be watched), OCR included."""
    attempts: list[object] = []
    inputs = {**samples, "plant.pdf": pdf_bytes, "scan.pdf": scanned_invoice_pdf()}
    with network_blocked(attempts):
        results = {
            name: documents_docling._convert_embedded(data, name, name.rsplit(".", 1)[1], DoclingOptions(ocr=True))
            for name, data in inputs.items()
        }
    assert attempts == []
    assert "ZX-9000" in results["report.docx"].text and "ALPHA-111" in results["plant.pdf"].text
    assert results["scan.pdf"].ocr_pages == (1,) and "invoice4711" in squashed(results["scan.pdf"].text)


def test_the_converted_document_crosses_the_process_boundary_whole(converted_pdf):
    from docling_core.types.doc import DoclingDocument, PictureItem

    result = converted_pdf["all"]
    assert isinstance(result.document, DoclingDocument)
    assert result.document.num_pages() == 2
    (picture_item,) = [item for item, _ in result.document.iterate_items() if isinstance(item, PictureItem)]
    assert picture_item.get_image(result.document).size == (64, 48)
    assert result.unreadable_pages == () and result.ocr_pages == ()


def test_docx_gives_headings_paragraphs_and_table_cells(converted):
    result = converted["report.docx"]
    assert "## Quarterly Report" in result.text
    assert "The widget code is ZX-9000 and it ships in May." in result.text
    for cell in ("Region", "Revenue", "North", "4711"):
        assert cell in result.text
    assert "<!-- image -->" not in result.text
    assert "Figure 1: A red square" in result.text
    assert result.pipeline == "docling DOCX backend (MsWordDocumentBackend, simple pipeline, no models)"
    assert result.pages is None


def test_docx_picture_comes_out_as_png_with_caption_and_neighbour_text(converted):
    (picture,) = converted["report.docx"].pictures
    assert_png(picture.image_png, (64, 48))
    assert Image.open(io.BytesIO(picture.image_png)).convert("RGB").getpixel((5, 5)) == (200, 30, 30)
    assert picture.index == 0
    assert picture.caption == "Figure 1: A red square"
    assert picture.neighbour_text == "The red square below marks the pilot plant."
    assert picture.page is None


def test_table_rows_lose_their_column_padding():
    from ragtopics.ingest.docling import _tidy_markdown

    padded = "| Title      | Text              |\n|------------|:-----------------:|\n| A          | a long cell text  |"
    assert _tidy_markdown(padded) == "| Title | Text |\n| --- | :---: |\n| A | a long cell text |"


def test_xlsx_gives_both_sheets_as_tables(converted):
    result = converted["figures.xlsx"]
    for cell in ("Product", "Units", "Gizmo-XL", "42", "Name", "Role", "Ada Quill", "Engineer"):
        assert cell in result.text
    assert result.text.count("| --- |") >= 2  # one Markdown table per sheet
    assert "  " not in result.text  # cells are not padded to their column's width
    assert result.pipeline.startswith("docling XLSX backend")
    assert result.pages == 2
    assert result.pictures == ()


def test_pptx_gives_slide_text_and_the_slide_picture(converted):
    result = converted["kickoff.pptx"]
    assert "# Kickoff" in result.text
    assert "Project ORION-7 begins in June" in result.text
    assert "Cooling loop diagram" in result.text
    assert result.pipeline.startswith("docling PPTX backend")
    assert result.pages == 2
    (picture,) = result.pictures
    assert_png(picture.image_png, (64, 48))
    assert picture.page == 2
    assert picture.neighbour_text == "Cooling loop diagram"
    assert picture.caption == ""


def test_pdf_goes_through_the_native_pipeline_with_text_of_both_pages(converted_pdf):
    result = converted_pdf["all"]
    assert "Page one mentions ALPHA-111." in result.text
    assert "Page two mentions BRAVO-222." in result.text
    assert "<!-- image -->" not in result.text
    assert result.pipeline == (
        "docling native PDF pipeline (no layout models, offline; docling-parse backend); table structure skipped (needs a model)"
    )
    assert result.pages == 2


def test_pdf_embedded_image_is_extracted(converted_pdf):
    (picture,) = converted_pdf["all"].pictures
    assert_png(picture.image_png, (64, 48))
    assert picture.page == 1
    assert picture.neighbour_text == "Page one mentions ALPHA-111."


def test_pdf_page_range_keeps_only_that_page(converted_pdf):
    result = converted_pdf["page 2"]
    assert "BRAVO-222" in result.text
    assert "ALPHA-111" not in result.text
    assert result.pictures == ()  # the only picture is on page 1
    assert result.pipeline.endswith("; pages 2")


def test_pdf_without_table_structure_says_nothing_was_skipped(pdf_bytes):
    result = convert_document(pdf_bytes, file_name="plant.pdf", options=DoclingOptions(table_structure=False))
    assert result.pipeline == "docling native PDF pipeline (no layout models, offline; docling-parse backend)"


def test_docx_page_range_is_reported_as_ignored(samples):
    result = convert_document(samples["report.docx"], file_name="report.docx", options=DoclingOptions(page_range="2"))
    assert "ZX-9000" in result.text
    assert result.pipeline.endswith("; page range ignored (DOCX has no pages)")


def test_truncated_pdf_is_a_read_error(pdf_bytes):
    with pytest.raises(ReadError, match=r"plant\.pdf is not a valid PDF or could not be converted: .*truncated"):
        convert_document(pdf_bytes[: len(pdf_bytes) // 2], file_name="plant.pdf")


def test_random_bytes_pdf_is_a_read_error():
    with pytest.raises(ReadError, match=r"noise\.pdf is not a valid PDF"):
        convert_document(bytes(range(256)) * 8, file_name="noise.pdf")


def test_random_bytes_docx_is_a_read_error():
    with pytest.raises(ReadError, match=r"noise\.docx is not a valid DOCX \(not a readable zip archive\)"):
        convert_document(bytes(range(256)) * 8, file_name="noise.docx")


def test_zip_bomb_docx_is_refused_before_docling_opens_it():
    bomb = make_zip_bomb()
    assert len(bomb) < 2 * MIB
    with pytest.raises(ReadError, match=r"bomb\.docx is refused as a zip bomb: word/document\.xml unpacks to 200 MiB"):
        convert_document(bomb, file_name="bomb.docx")
    with pytest.raises(ReadError, match=r"bomb\.docx is refused: it would unpack to 200 MiB, more than the 100 MiB allowed"):
        check_zip_archive(bomb, file_name="bomb.docx", max_uncompressed_bytes=100 * MIB)


def test_ocr_leaves_the_pages_of_a_pdf_with_a_text_layer_as_they_are(pdf_bytes):
    plain = convert_document(pdf_bytes, file_name="plant.pdf")
    result = convert_document(pdf_bytes, file_name="plant.pdf", options=DoclingOptions(ocr=True))
    assert result.text == plain.text and result.text.strip()
    assert result.ocr_pages == () and result.unreadable_pages == ()
    assert result.pipeline == (
        "docling native PDF pipeline (no layout models, offline; docling-parse backend); "
        "OCR: rapidocr-onnxruntime (PP-OCRv4, ONNX) on pages without a text layer; table structure skipped (needs a model)"
    )


def test_ocr_on_office_files_is_noted_as_not_applicable(samples):
    result = convert_document(samples["figures.xlsx"], file_name="figures.xlsx", options=DoclingOptions(ocr=True))
    assert result.pipeline.endswith("; OCR not applicable to XLSX")


def test_unsupported_extension_is_a_read_error():
    assert "txt" not in DOCUMENT_EXTENSIONS
    with pytest.raises(ReadError, match="not 'txt'"):
        convert_document(b"hello", file_name="notes.txt")


def test_unreachable_docling_server_is_a_read_error(samples):
    with pytest.raises(ReadError, match=r"Docling server at http://127\.0\.0\.1:9 is not reachable"):
        convert_document(samples["report.docx"], file_name="report.docx", docling_server="http://127.0.0.1:9")


@pytest.mark.parametrize("server", ["", "local", "ftp://docling:5001", "http://"])
def test_docling_server_that_is_neither_embedded_nor_a_url_is_a_configuration_error(server):
    with pytest.raises(ConfigurationError, match="Docling Server must be 'embedded' or an http"):
        convert_document(b"%PDF-1.4", file_name="a.pdf", docling_server=server)


@pytest.fixture(scope="module")
def slow_scan() -> bytes:
    """Ten scanned pages: OCR takes seconds per page (~3-10 s each on 2 cores), far over a 1 s timeout."""
    return image_pdf([draw_page()] * 10)


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def converter_children() -> list[int]:
    """Running child processes of this process that serve conversions (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
            if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"convert_process" in cmdline:
                found.append(int(stat.parent.name))
    return found


def test_conversion_slower_than_the_timeout_is_stopped_with_its_process(samples, slow_scan):
    convert_document(samples["report.docx"], file_name="report.docx")  # the converter is warm: only the conversion is timed
    pid = documents_docling.converter_pid()
    assert pid is not None and converter_children() == [pid]
    started = time.monotonic()
    stopped = r"^scan\.pdf: Docling conversion took longer than 1 s and was stopped \(its process was killed\)$"
    with pytest.raises(ReadError, match=stopped):
        convert_document(slow_scan, file_name="scan.pdf", options=DoclingOptions(ocr=True, timeout_s=1))
    assert time.monotonic() - started < 1 + TERM_GRACE_S
    assert not is_running(pid)
    assert documents_docling.converter_pid() is None
    assert "ZX-9000" in convert_document(samples["report.docx"], file_name="report.docx").text
    assert documents_docling.converter_pid() not in (None, pid)


def test_after_a_timeout_the_worker_keeps_no_docling_thread_or_process(slow_scan):
    """What the RQ worker is left with after an overrunning conversion: nothing of it."""
    threads_before = {thread.ident for thread in threading.enumerate()}
    with pytest.raises(ReadError, match="took longer than 1 s and was stopped"):
        convert_document(slow_scan, file_name="scan.pdf", options=DoclingOptions(ocr=True, timeout_s=1))
    left = [thread.name for thread in threading.enumerate() if thread.ident not in threads_before]
    assert left == []
    assert not [thread.name for thread in threading.enumerate() if "docling" in thread.name.lower()]
    assert converter_children() == []
    assert documents_docling.converter_pid() is None


def test_a_converter_killed_while_converting_is_a_read_error_and_the_next_conversion_works(samples, slow_scan):
    """SIGKILL is what the kernel's out-of-memory killer sends."""
    convert_document(samples["report.docx"], file_name="report.docx")
    pid = documents_docling.converter_pid()
    killer = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))
    killer.start()
    with pytest.raises(ReadError, match=r"^the converter process died \(signal 9, SIGKILL.*\) while converting scan\.pdf$"):
        convert_document(slow_scan, file_name="scan.pdf", options=DoclingOptions(ocr=True, timeout_s=120))
    killer.join()
    assert not is_running(pid)
    assert "ZX-9000" in convert_document(samples["report.docx"], file_name="report.docx").text


@pytest.mark.parametrize(("text", "bounds"), [("", None), ("  ", None), ("2", (2, 2)), ("1-3", (1, 3)), (" 2 - 5 ", (2, 5))])
def test_page_range_parses(text, bounds):
    assert parse_page_range(text) == bounds


@pytest.mark.parametrize("text", ["0", "3-1", "a", "1-", "1,3", "-2"])
def test_malformed_page_range_is_an_invalid_setting(text):
    with pytest.raises(InvalidSettingError, match="page range"):
        DoclingOptions(page_range=text)


def test_timeout_below_one_second_is_an_invalid_setting():
    with pytest.raises(InvalidSettingError, match="at least 1 s"):
        DoclingOptions(timeout_s=0)


class _ScriptedDoclingServe(BaseHTTPRequestHandler):
    """Answers /v1/convert/file like docling-serve, with a scripted DoclingDocument."""

    answer: ClassVar[dict] = {}
    requests: ClassVar[list[bytes]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests.append(self.path.encode() + b"\n" + body)
        payload = json.dumps(type(self).answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted_docling_serve(samples):
    from docling.datamodel.base_models import DocumentStream
    from docling.document_converter import DocumentConverter

    document = DocumentConverter().convert(DocumentStream(name="report.docx", stream=io.BytesIO(samples["report.docx"]))).document
    _ScriptedDoclingServe.answer = {
        "document": {"md_content": document.export_to_markdown(), "json_content": document.export_to_dict()},
        "status": "success",
        "errors": [],
    }
    _ScriptedDoclingServe.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedDoclingServe)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _ScriptedDoclingServe.requests
    server.shutdown()
    server.server_close()


def test_docling_server_answer_gives_text_and_pictures(scripted_docling_serve, samples):
    url, requests = scripted_docling_serve
    result = convert_document(
        samples["report.docx"], file_name="report.docx", options=DoclingOptions(page_range="1-3"), docling_server=url + "/"
    )
    assert "ZX-9000" in result.text and "North" in result.text
    assert result.pipeline == f"docling-serve at {url} (OCR off, table structure on)"
    (picture,) = result.pictures
    assert_png(picture.image_png, (64, 48))
    assert picture.caption == "Figure 1: A red square"
    (request,) = requests
    assert request.startswith(b"/v1/convert/file\n")
    assert b'filename="report.docx"' in request
    for field, value in [("to_formats", b"json"), ("page_range", b"1"), ("page_range", b"3"), ("do_ocr", b"false")]:
        assert f'name="{field}"'.encode() + b"\r\n\r\n" + value + b"\r\n" in request


@pytest.mark.parametrize(
    ("ocr_on", "reason"),
    [
        (False, "was not read (turn on OCR in Docling Settings to read it)"),
        (True, "the Docling server's OCR found no text on it"),
    ],
)
def test_docling_server_answer_without_text_on_a_page_names_the_page(scripted_docling_serve, caplog, ocr_on, reason):
    url, _requests = scripted_docling_serve
    scan = convert_document(scanned_invoice_pdf(), file_name="scan.pdf").document
    _ScriptedDoclingServe.answer = {
        "document": {"md_content": "", "json_content": scan.export_to_dict()},
        "status": "success",
        "errors": [],
    }
    with caplog.at_level("WARNING", logger="ragtopics"):
        result = convert_document(
            b"%PDF-1.4 stand-in", file_name="scan.pdf", options=DoclingOptions(ocr=ocr_on), docling_server=url
        )
    assert result.text == "" and result.unreadable_pages == (1,) and result.ocr_pages == ()
    assert f"scan.pdf: page 1 has no text layer and {reason}" in caplog.messages
