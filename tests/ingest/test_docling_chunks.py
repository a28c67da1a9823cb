"""Structure chunking of real documents built in the test: headings, pages, tables whole, pictures by position."""

from __future__ import annotations

import io
import itertools

import docx
import pytest

from ragtopics.ingest.chunking import Piece
from ragtopics.ingest.docling import convert_document
from ragtopics.ingest.docling_chunks import chunk_document
from ragtopics.ingest.token_cap import cap_tokens
from tests.ingest.test_docling import png_bytes

PAGE_TWO_FACT = "The turbine code on the second page is TANGO-4242 and it is serviced every spring."


def three_page_pdf() -> bytes:
    """A PDF with a heading and a paragraph on each of its 3 pages; only page 2 names TANGO-4242."""
    fpdf = pytest.importorskip("fpdf")
    pdf = fpdf.FPDF()
    paragraphs = {
        1: "The plant was opened in 1998 and runs three lines.",
        2: PAGE_TWO_FACT,
        3: "Closing remarks about staffing and the canteen.",
    }
    for page, text in paragraphs.items():
        pdf.add_page()
        pdf.set_font("helvetica", size=20)
        pdf.cell(text=f"Section {page}")
        pdf.ln(20)
        pdf.set_font("helvetica", size=12)
        pdf.multi_cell(w=0, text=text)
    return bytes(pdf.output())


def parts_docx(rows: int = 40) -> bytes:
    document = docx.Document()
    document.add_heading("Manual", level=1)
    document.add_paragraph("This manual lists the spare parts of the pump.")
    document.add_heading("Spare parts", level=2)
    table = document.add_table(rows=1, cols=3)
    for cell, name in zip(table.rows[0].cells, ["Part", "Code", "Price"]):
        cell.text = name
    for i in range(rows):
        for cell, value in zip(table.add_row().cells, [f"Gasket {i}", f"GK-{700 + i}", f"{i}.50 EUR"]):
            cell.text = value
    document.add_paragraph("Prices are without VAT.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def docx_bytes(build) -> bytes:
    document = docx.Document()
    build(document)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def chunks_of(data: bytes, file_name: str, *, size: int = 1000, overlap: int = 0) -> tuple[list[Piece], object]:
    converted = convert_document(data, file_name=file_name)
    pieces = chunk_document(
        converted.document,
        converted.text,
        size=size,
        overlap=overlap,
        pictures=converted.pictures,
        descriptions=[""] * len(converted.pictures),
    )
    return pieces, converted


@pytest.fixture(scope="module")
def pdf_chunks():
    return chunks_of(three_page_pdf(), "plant.pdf", size=300, overlap=30)


def test_the_chunk_with_the_page_two_text_has_page_two_only(pdf_chunks):
    pieces, converted = pdf_chunks
    [holder] = [p for p in pieces if "TANGO-4242" in p.text]
    assert holder.pages == (2,)
    assert [p.pages for p in pieces] == [(1,), (2,), (3,)]  # a new page starts a new chunk
    assert holder.text == f"Section 2\n\n{PAGE_TWO_FACT}"  # nothing of page 1 is repeated into it
    assert converted.text[holder.start : holder.end] == holder.text  # offsets are spans of the Markdown export


def test_docx_table_rows_stay_whole_with_header_and_heading_path_in_every_piece():
    pieces, converted = chunks_of(parts_docx(), "parts.docx", size=300, overlap=30)
    rows = [f"| Gasket {i} | GK-{700 + i} | {i}.50 EUR |" for i in range(40)]
    with_rows = [p for p in pieces if "GK-7" in p.text]
    assert len(with_rows) > 3
    for piece in with_rows:
        lines = piece.text.split("\n")
        assert lines[:5] == ["## Manual", "### Spare parts", "", "| Part | Code | Price |", "| --- | --- | --- |"], piece.text
        table_lines = [line for line in lines if line.startswith("|")]
        assert all(line in rows for line in table_lines[2:]), piece.text  # every row line is a whole row
        assert len(piece.text) <= 300 and piece.pages == ()  # a DOCX has no pages
    assert sorted(line for p in with_rows for line in p.text.split("\n") if line in rows) == sorted(rows)  # each row once
    assert pieces[0].text == "## Manual\n\nThis manual lists the spare parts of the pump."
    assert "Prices are without VAT." in pieces[-1].text and pieces[-1].text.startswith("## Manual\n### Spare parts\n\n")
    for piece in with_rows:  # a piece's span is its own rows in the Markdown export
        assert converted.text[piece.start : piece.end] in piece.text


def test_a_long_section_repeats_the_overlap_between_its_chunks_only():
    sentences = " ".join(f"Sentence {i} describes step {i} of the descaling." for i in range(30))

    def build(document):
        document.add_heading("Descaling", level=1)
        document.add_paragraph(sentences)
        document.add_heading("Storage", level=1)
        document.add_paragraph("Keep the pump dry.")

    pieces, _ = chunks_of(docx_bytes(build), "care.docx", size=400, overlap=60)
    descaling = [p for p in pieces if p.text.startswith("## Descaling")]
    assert len(descaling) > 2 and all(len(p.text) <= 400 for p in pieces)
    for before, after in itertools.pairwise(descaling):
        body = after.text.removeprefix("## Descaling\n\n")
        repeated = max((k for k in range(1, len(body)) if before.text.endswith(body[:k])), default=0)
        assert 20 <= repeated <= 60, (before.text, after.text)  # the end of the chunk before, up to Chunk Overlap
    assert pieces[-1].text == "## Storage\n\nKeep the pump dry."  # a new section repeats nothing


def test_a_picture_is_linked_to_the_chunk_it_sits_in_not_to_others_with_the_same_words():
    def build(document):
        document.add_heading("Wiring", level=1)
        document.add_paragraph("See the figure below.")
        document.add_picture(io.BytesIO(png_bytes((200, 30, 30))))
        document.add_heading("Cleaning", level=1)
        document.add_paragraph("See the figure below.")  # the same words; text matching would link here too

    pieces, converted = chunks_of(docx_bytes(build), "pump.docx")
    [picture] = converted.pictures
    assert [p.pictures for p in pieces] == [(picture.index,), ()]
    assert pieces[0].text.startswith("## Wiring")


def test_a_picture_between_chunks_goes_to_the_chunk_with_its_caption():
    def build(document):
        document.add_paragraph("The pump is wired as shown in the next diagram, with the mains on the left side.")
        document.add_picture(io.BytesIO(png_bytes((30, 30, 200))))
        document.add_paragraph("Figure 1: pump wiring diagram")

    pieces, converted = chunks_of(docx_bytes(build), "pump.docx", size=100)
    [picture] = converted.pictures
    assert picture.caption == "Figure 1: pump wiring diagram"
    assert len(pieces) == 2 and "Figure 1" not in pieces[0].text
    assert [p.pictures for p in pieces] == [(), (picture.index,)]


def test_a_described_picture_is_a_paragraph_where_it_sits():
    def build(document):
        document.add_heading("Wiring", level=1)
        document.add_paragraph("The pump is wired as shown.")
        document.add_picture(io.BytesIO(png_bytes((200, 30, 30))))
        document.add_heading("Cleaning", level=1)
        document.add_paragraph("Rinse with water.")

    converted = convert_document(docx_bytes(build), file_name="pump.docx")
    pieces = chunk_document(
        converted.document, converted.text, size=1000, overlap=0, pictures=converted.pictures, descriptions=["A red square."]
    )
    assert pieces[0].text == "## Wiring\n\nThe pump is wired as shown.\n\nPicture 1: A red square."
    assert pieces[0].pictures == (converted.pictures[0].index,) and pieces[1].pictures == ()


def test_pptx_slides_are_pages_and_a_picture_only_slide_keeps_its_title_and_picture():
    from tests.ingest.test_docling import make_pptx

    pieces, converted = chunks_of(make_pptx(), "kickoff.pptx")
    [picture] = converted.pictures
    assert [(p.text, p.pages, p.pictures) for p in pieces] == [
        ("# Kickoff\n\n- Project ORION-7 begins in June", (1,), ()),
        ("# Cooling loop diagram", (2,), (picture.index,)),
    ]


def test_xlsx_sheets_are_pages_and_their_rows_stay_whole():
    import openpyxl

    workbook = openpyxl.Workbook()
    stock = workbook.active
    stock.title = "Stock"
    stock.append(["Item", "Count"])
    for i in range(30):
        stock.append([f"Bolt M{i}", i * 10])
    workbook.create_sheet("Staff").append(["Name", "Role"])
    workbook["Staff"].append(["Ada Quill", "Engineer"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    pieces, _ = chunks_of(buffer.getvalue(), "stock.xlsx", size=200)
    stock_pieces = [p for p in pieces if "Bolt" in p.text]
    assert len(stock_pieces) > 1 and all(p.pages == (1,) for p in stock_pieces)
    assert all(p.text.startswith("| Item | Count |\n| --- | --- |\n") for p in stock_pieces)
    bolts = [line for p in stock_pieces for line in p.text.split("\n") if "Bolt" in line]
    assert bolts == [f"| Bolt M{i} | {i * 10} |" for i in range(30)]
    [staff] = [p for p in pieces if "Ada Quill" in p.text]
    assert staff.pages == (2,) and "Bolt" not in staff.text


def test_chunks_split_to_fit_the_embedder_keep_their_pages_and_pictures():
    words = lambda texts: [len(t.split()) + 2 for t in texts]  # noqa: E731 - a word counter as the tokenizer
    piece = Piece(text=" ".join(f"word{i}." for i in range(50)), start=0, end=0, pages=(3, 4), pictures=(1,))
    capped = cap_tokens([piece], max_tokens=20, count_tokens=words)
    assert capped.split_chunks == 1 and len(capped.pieces) > 2
    assert {(p.pages, p.pictures) for p in capped.pieces} == {((3, 4), (1,))}


def test_invalid_sizes_are_refused(pdf_chunks):
    from ragtopics.errors import InvalidSettingError

    _, converted = pdf_chunks
    with pytest.raises(InvalidSettingError, match="chunk_overlap"):
        chunk_document(converted.document, converted.text, size=100, overlap=100)
    with pytest.raises(InvalidSettingError, match="chunk_size"):
        chunk_document(converted.document, converted.text, size=0, overlap=0)


def test_an_empty_section_keeps_its_place_and_a_picture_under_it():
    def build(document):
        document.add_heading("Pump manual", level=0)  # a title: every section below sits under it
        document.add_paragraph("General notes on the pump.")
        document.add_picture(io.BytesIO(png_bytes((30, 200, 30))))
        document.add_heading("Wiring", level=1)
        document.add_picture(io.BytesIO(png_bytes((200, 30, 30))))
        document.add_heading("Cleaning", level=1)
        document.add_paragraph("Rinse with water.")

    pieces, converted = chunks_of(docx_bytes(build), "pump.docx")
    first, second = (p.index for p in converted.pictures)
    assert [(p.text, p.pictures) for p in pieces] == [
        ("# Pump manual\n\nGeneral notes on the pump.", (first,)),
        ("# Pump manual\n## Wiring", (second,)),
        ("# Pump manual\n## Cleaning\n\nRinse with water.", ()),
    ]
