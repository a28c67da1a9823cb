"""Pages without a text layer: read by the real OCR engine (rapidocr-onnxruntime) or reported, never a silent success.

The scans are drawn in the test (Pillow's bundled font) and saved as image-only
PDFs; OCR runs the PP-OCRv4 ONNX models shipped in the wheel. A sparse A4 page takes
~3-9 s to OCR on 2 CPU cores, so conversions are shared per module.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from pathlib import Path

import pytest
from PIL import Image

from ragtopics.ingest import ocr
from ragtopics.ingest.docling import ConvertedDocument, DoclingOptions, convert_document, ocr_unavailable_reason
from ragtopics.ingest.ocr import OcrLine, group_paragraphs, ocr_image
from ragtopics.ingest.readers import read_file
from tests.ingest.scans import (
    FIRST_LINE_PX,
    INVOICE_LINES,
    LINE_PITCH_PX,
    SCAN_DPI,
    draw_page,
    image_pdf,
    scanned_invoice_pdf,
    squashed,
    text_scan_text_pdf,
)

#: Tokens of INVOICE_LINES that OCR must get right (compared without case and spaces).
KEY_TOKENS = ("invoice4711", "95.20", "quillfeather", "harbourroad7")
NO_TEXT_WARNING = "scan.pdf: page 1 has no text layer and was not read (turn on OCR in Docling Settings to read it)"


@pytest.fixture(scope="module")
def scan() -> bytes:
    return scanned_invoice_pdf()


@pytest.fixture(scope="module")
def mixed() -> bytes:
    return text_scan_text_pdf()


@pytest.fixture(scope="module")
def scan_ocr(scan) -> ConvertedDocument:
    return convert_document(scan, file_name="scan.pdf", options=DoclingOptions(ocr=True))


@pytest.fixture(scope="module")
def mixed_ocr(mixed) -> ConvertedDocument:
    return convert_document(mixed, file_name="mixed.pdf", options=DoclingOptions(ocr=True))


@contextlib.contextmanager
def network_blocked(attempts: list[object]):
    """Refuse (and record) every outbound TCP connection inside the block."""

    def guarded_connect(sock, address):
        attempts.append(address)
        raise OSError(f"network blocked in test: {address}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", guarded_connect)
        patch.setattr(socket.socket, "connect_ex", guarded_connect)
        yield


# --- the engine ---------------------------------------------------------------------------------------------


def test_the_engine_loads_its_models_from_the_wheel_without_network():
    assert ocr.engine_unavailable_reason() == ""
    assert ocr_unavailable_reason("embedded") == ""
    ocr._engine.cache_clear()
    attempts: list[object] = []
    with network_blocked(attempts):
        engine = ocr._engine()
    assert attempts == []
    import rapidocr_onnxruntime

    models = Path(rapidocr_onnxruntime.__file__).parent / "models"
    paths = [
        Path(engine.text_det.infer.session._model_path),
        Path(engine.text_rec.session.session._model_path),
        Path(engine.text_cls.infer.session._model_path),
    ]
    names = ["ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx"]
    assert [p.name for p in paths] == names
    assert all(p.parent == models and p.stat().st_size > 500_000 for p in paths)


def test_ocr_image_reads_the_drawn_lines_where_they_were_drawn():
    lines = ocr_image(draw_page())
    assert [squashed(line.text) for line in lines] == [squashed(text) for text in INVOICE_LINES]
    assert all(ocr.MIN_CONFIDENCE <= line.confidence <= 1 for line in lines)
    for number, line in enumerate(lines):
        left, top, right, bottom = line.bbox
        assert abs(left - FIRST_LINE_PX[0]) < 15
        assert abs(top - (FIRST_LINE_PX[1] + number * LINE_PITCH_PX)) < 15
        assert 25 < bottom - top < 60 and right > left + 200


def test_ocr_image_takes_png_bytes_and_finds_nothing_on_a_blank_picture():
    import io

    top = draw_page().crop((0, 150, 1000, 300))  # the first two lines
    buffer = io.BytesIO()
    top.save(buffer, format="PNG")
    lines = ocr_image(buffer.getvalue())
    assert squashed(" ".join(line.text for line in lines)) == "invoice4711totaldue:95.20eur"  # "EUR" may be a line of its own
    assert ocr_image(Image.new("RGB", (800, 600), "white")) == []


def test_every_line_of_a_dense_upright_page_is_read_in_order():
    """11 pt lines 45 px apart: with the 0/180 degree line classifier on, 2 of these 12 came out upside-down noise."""
    lines = tuple(f"Line {n}: the quick brown fox jumps over the lazy dog 12.{n:02d}" for n in range(12))
    page = draw_page(lines, font_px=30, pitch_px=45).crop((0, 100, 1000, 800))
    found = ocr_image(page)
    assert [squashed(line.text) for line in found] == [squashed(line) for line in lines]
    (paragraph,) = group_paragraphs(found)
    assert len(paragraph) == 12


def test_lines_below_the_confidence_floor_are_dropped():
    top = draw_page().crop((0, 150, 1000, 300))
    assert ocr_image(top, min_confidence=1.01) == []


def test_lines_group_into_paragraphs_per_column():
    def line(text, left, top, width=300, height=30):
        return OcrLine(text=text, bbox=(left, top, left + width, top + height), confidence=0.9)

    left_column = [line("L1", 100, 100), line("L2", 100, 140), line("L3", 100, 300)]  # a gap after L2
    right_column = [line("R1", 600, 102), line("R2", 600, 141)]
    paragraphs = group_paragraphs(left_column + right_column)
    assert [[item.text for item in paragraph] for paragraph in paragraphs] == [["L1", "L2"], ["R1", "R2"], ["L3"]]


# --- scanned PDFs through the converter process ---------------------------------------------------------


def test_a_scan_without_ocr_is_reported_unreadable_with_a_warning(scan, caplog):
    with caplog.at_level(logging.WARNING, logger="ragtopics"):
        result = convert_document(scan, file_name="scan.pdf")
    assert result.text == ""
    assert result.unreadable_pages == (1,) and result.ocr_pages == ()
    assert len(result.pictures) == 1  # the scanned page itself, for the picture describer
    assert [r.getMessage() for r in caplog.records if r.name == "ragtopics.ingest.docling"] == [NO_TEXT_WARNING]


def test_a_scan_with_ocr_gives_its_text_with_page_provenance(scan_ocr):
    from docling_core.types.doc import CoordOrigin, TextItem

    text = squashed(scan_ocr.text)
    assert all(token in text for token in KEY_TOKENS), scan_ocr.text
    assert scan_ocr.ocr_pages == (1,) and scan_ocr.unreadable_pages == ()
    assert "OCR: rapidocr-onnxruntime (PP-OCRv4, ONNX) on pages without a text layer" in scan_ocr.pipeline
    (item,) = [item for item, _ in scan_ocr.document.iterate_items() if isinstance(item, TextItem)]
    assert squashed(item.text).startswith("invoice4711")
    (prov,) = item.prov
    page_height = scan_ocr.document.pages[1].size.height
    points_per_px = 72 / SCAN_DPI
    assert prov.page_no == 1 and prov.bbox.coord_origin == CoordOrigin.BOTTOMLEFT
    assert abs(prov.bbox.l - FIRST_LINE_PX[0] * points_per_px) < 5
    assert abs(prov.bbox.t - (page_height - FIRST_LINE_PX[1] * points_per_px)) < 5
    assert prov.bbox.b < prov.bbox.t - 3 * LINE_PITCH_PX * points_per_px  # the four lines are one paragraph


def test_ocr_text_sits_between_the_pages_around_it(mixed_ocr):
    text = squashed(mixed_ocr.text)
    assert text.index("alpha-111") < text.index("invoice4711") < text.index("quillfeather") < text.index("charlie-333")
    assert mixed_ocr.ocr_pages == (2,) and mixed_ocr.unreadable_pages == ()
    pages = [prov.page_no for item, _ in mixed_ocr.document.iterate_items() for prov in item.prov]
    assert pages == sorted(pages) and 2 in pages


def test_without_ocr_only_the_scanned_page_is_named(mixed, caplog):
    with caplog.at_level(logging.WARNING, logger="ragtopics"):
        result = convert_document(mixed, file_name="mixed.pdf")
    assert "ALPHA-111" in result.text and "CHARLIE-333" in result.text and "4711" not in result.text
    assert result.unreadable_pages == (2,)
    assert "mixed.pdf: page 2 has no text layer and was not read (turn on OCR in Docling Settings to read it)" in caplog.messages


def test_ocr_reads_only_pages_in_the_page_range(mixed):
    third = convert_document(mixed, file_name="mixed.pdf", options=DoclingOptions(ocr=True, page_range="3"))
    assert third.text == "Page three mentions CHARLIE-333." and third.ocr_pages == () and third.unreadable_pages == ()
    second = convert_document(mixed, file_name="mixed.pdf", options=DoclingOptions(ocr=True, page_range="2"))
    assert "invoice4711" in squashed(second.text) and "ALPHA" not in second.text
    assert second.ocr_pages == (2,)


def test_a_blank_page_stays_unreadable_after_ocr_and_is_named(caplog):
    pdf = image_pdf([Image.new("RGB", draw_page().size, "white"), draw_page(("Second page says 8830",))])
    with caplog.at_level(logging.WARNING, logger="ragtopics"):
        result = convert_document(pdf, file_name="scan.pdf", options=DoclingOptions(ocr=True))
    assert result.ocr_pages == (2,) and result.unreadable_pages == (1,)
    assert squashed(result.text) == "secondpagesays8830"
    assert "scan.pdf: page 1 has no text layer and OCR found no text on it" in caplog.messages


def test_read_file_passes_the_page_report_on(scan, caplog):
    with caplog.at_level(logging.WARNING, logger="ragtopics"):
        plain = read_file(scan, file_name="scan.pdf")
    assert plain.text == "" and plain.unreadable_pages == (1,) and plain.page_count == 1
    assert NO_TEXT_WARNING in caplog.messages
    read = read_file(scan, file_name="scan.pdf", docling_options=DoclingOptions(ocr=True))
    assert "invoice4711" in squashed(read.text) and read.ocr_pages == (1,) and read.unreadable_pages == ()
    assert read.document is not None and read.reader.startswith("docling native PDF pipeline")
