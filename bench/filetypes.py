"""Sample files of every uploadable type, built from the eval passages, for the per-type ingest benchmark.

Each builder takes a list of ``(title, text)`` passages and returns the bytes of one file that
holds all of them in that format's natural shape: paragraphs for text and office documents, one
record per passage for structured files, one slide per passage, one table row per passage, one
PDF page per few passages. Pictures get a PNG drawn with Pillow (nothing in it is text).

The office and PDF builders use the libraries of the ``test`` extra (python-docx, openpyxl,
python-pptx, fpdf2), which ``make bench`` installs.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from xml.sax.saxutils import escape

Passages = list[tuple[str, str]]


def build_txt(passages: Passages) -> bytes:
    """Plain text: a title line and a paragraph per passage."""
    return "\n\n".join(f"{t}\n{x}" for t, x in passages).encode()


def build_md(passages: Passages) -> bytes:
    """Markdown: a ``##`` heading per passage."""
    return "\n\n".join(f"## {t}\n\n{x}" for t, x in passages).encode()


def build_csv(passages: Passages) -> bytes:
    """CSV with a header row; one row per passage."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["title", "text"])
    writer.writerows(passages)
    return out.getvalue().encode()


def build_json(passages: Passages) -> bytes:
    """A JSON array, one object per passage."""
    return json.dumps([{"title": t, "text": x} for t, x in passages], ensure_ascii=False, indent=1).encode()


def build_xml(passages: Passages) -> bytes:
    """XML with a repeated ``<passage>`` element."""
    body = "".join(f"<passage><title>{escape(t)}</title><text>{escape(x)}</text></passage>" for t, x in passages)
    return f"<?xml version='1.0' encoding='utf-8'?><passages>{body}</passages>".encode()


def build_docx(passages: Passages) -> bytes:
    """DOCX: a heading and a paragraph per passage."""
    import docx

    document = docx.Document()
    for title, text in passages:
        document.add_heading(title, level=2)
        document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def build_xlsx(passages: Passages) -> bytes:
    """XLSX: one sheet, a header row and one row per passage."""
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Passages"
    sheet.append(["Title", "Text"])
    for row in passages:
        sheet.append(list(row))
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def build_pptx(passages: Passages) -> bytes:
    """PPTX: one title-and-content slide per passage."""
    import pptx

    presentation = pptx.Presentation()
    for title, text in passages:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = text
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def build_pdf(passages: Passages) -> bytes:
    """PDF (fpdf2, core Helvetica): bold titles and wrapped paragraphs, pages added as they fill."""
    import fpdf

    pdf = fpdf.FPDF()
    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.add_page()
    for title, text in passages:
        pdf.set_font("helvetica", style="B", size=12)
        pdf.multi_cell(0, 7, _latin1(title), new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("helvetica", size=11)
        pdf.multi_cell(0, 6, _latin1(text), new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
    return bytes(pdf.output())


def build_png(passages: Passages) -> bytes:
    """A 640x480 PNG with one coloured band per passage (its content does not matter: no vision model runs)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (640, 480), "white")
    draw = ImageDraw.Draw(image)
    band = max(1, 480 // max(1, len(passages)))
    for i, (title, _) in enumerate(passages):
        shade = sum(map(ord, title)) % 200
        draw.rectangle([0, i * band, 640, (i + 1) * band], fill=(shade, 255 - shade, 120))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _latin1(text: str) -> str:
    """The core PDF fonts cover Latin-1 only; other characters become ``?``."""
    return text.encode("latin-1", "replace").decode("latin-1")


#: Extension -> builder, in the order the benchmark prints them.
BUILDERS: dict[str, Callable[[Passages], bytes]] = {
    "txt": build_txt,
    "md": build_md,
    "csv": build_csv,
    "json": build_json,
    "xml": build_xml,
    "docx": build_docx,
    "xlsx": build_xlsx,
    "pptx": build_pptx,
    "pdf": build_pdf,
    "png": build_png,
}
