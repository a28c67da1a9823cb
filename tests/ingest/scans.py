"""Scanned PDFs built in the test: text drawn into a picture, saved as an image-only PDF (no text layer)."""

from __future__ import annotations

import io

from PIL import Image, ImageDraw, ImageFont

#: The scan's resolution; A4 at this resolution is 1654 x 2339 px.
SCAN_DPI = 200
A4_PX = (1654, 2339)
#: What the invoice scan says; OCR tests look for its distinctive tokens.
INVOICE_LINES = ("Invoice 4711", "Total due: 95.20 EUR", "Payable within 30 days to", "Quillfeather Ltd, Harbour Road 7")
#: Where the first line starts, in pixels from the top-left corner, and the line pitch.
FIRST_LINE_PX = (150, 200)
LINE_PITCH_PX = 60


def draw_page(lines: tuple[str, ...] = INVOICE_LINES, *, font_px: int = 40, pitch_px: int = LINE_PITCH_PX) -> Image.Image:
    """A white A4 page with the lines drawn in black (Pillow's bundled scalable font; 40 px is ~14 pt at SCAN_DPI)."""
    font = ImageFont.load_default(size=font_px)
    page = Image.new("RGB", A4_PX, "white")
    draw = ImageDraw.Draw(page)
    for number, line in enumerate(lines):
        draw.text((FIRST_LINE_PX[0], FIRST_LINE_PX[1] + number * pitch_px), line, fill="black", font=font)
    return page


def image_pdf(pages: list[Image.Image]) -> bytes:
    """An image-only PDF, one picture per page, as a scanner writes it."""
    buffer = io.BytesIO()
    pages[0].save(buffer, "PDF", resolution=SCAN_DPI, save_all=True, append_images=pages[1:])
    return buffer.getvalue()


def scanned_invoice_pdf() -> bytes:
    """One scanned page with INVOICE_LINES and no text layer."""
    return image_pdf([draw_page()])


def text_scan_text_pdf() -> bytes:
    """Three pages: a text layer ("ALPHA-111"), the invoice scan, a text layer again ("CHARLIE-333")."""
    import fpdf  # fpdf2, a test-only dependency

    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.cell(text="Page one mentions ALPHA-111.")
    pdf.add_page()
    pdf.image(draw_page(), x=0, y=0, w=pdf.w, h=pdf.h)
    pdf.add_page()
    pdf.cell(text="Page three mentions CHARLIE-333.")
    return bytes(pdf.output())


def squashed(text: str) -> str:
    """Lower case without whitespace: PP-OCR sometimes drops the space between words ("Invoice4711")."""
    return "".join(text.lower().split())
