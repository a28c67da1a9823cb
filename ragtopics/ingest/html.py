"""HTML to Markdown for indexing: headings, paragraphs, lists, code and tables, without markup.

An HTML page read as plain text would be chunked as tag soup: a ``<table>`` cut in the
middle of a row, ``<script>`` bodies indexed as words. Converted to Markdown, a table
becomes a pipe table (which chunking splits only between rows, repeating the header),
``<pre>`` becomes a fenced block, and scripts, styles and comments are dropped.
Standard library only (``html.parser``), so it never fails on broken markup.
"""

from __future__ import annotations

import logging
import re
from html.parser import HTMLParser

log = logging.getLogger(__name__)

_SKIPPED = frozenset({"script", "style", "head", "title", "noscript", "template", "svg", "iframe"})
_BLOCKS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "header",
        "footer",
        "main",
        "nav",
        "aside",
        "blockquote",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "figure",
        "figcaption",
        "form",
        "hr",
        "address",
    }
)
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "base", "source"})


def html_to_markdown(html: str) -> str:
    """Convert an HTML page to Markdown text.

    Args:
        html: the decoded page.

    Returns:
        Markdown: ``#`` headings, paragraphs, ``- `` list items, fenced ``<pre>`` blocks
        and pipe tables (the first row is the header; a table without rows gives nothing).
    """
    parser = _Converter()
    parser.feed(html)
    parser.close()
    text = "".join(parser.out)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


class _Converter(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0
        self.pre = 0
        self.table: list[list[str]] | None = None
        self.cell: list[str] | None = None
        self.tables: list[tuple[list[list[str]] | None, list[str] | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self.skip += tag not in _VOID
            return
        if self.skip:
            return
        if tag == "table":
            self.tables.append((self.table, self.cell))
            self.table, self.cell = [], None
        elif tag == "tr" and self.table is not None:
            self.table.append([])
        elif tag in ("td", "th") and self.table is not None:
            if not self.table:
                self.table.append([])
            self.cell = []
        elif re.fullmatch(r"h[1-6]", tag):
            self._write("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "pre":
            self.pre += 1
            self._write("\n\n```\n")
        elif tag == "li":
            self._write("\n- ")
        elif tag == "br":
            self._write(" " if self.cell is not None else "\n")
        elif tag in _BLOCKS:
            self._write("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag in ("td", "th") and self.table is not None and self.cell is not None:
            self.table[-1].append(" ".join("".join(self.cell).split()).replace("|", "\\|"))
            self.cell = None
        elif tag == "table" and self.table is not None:
            rows = [r for r in self.table if r]
            self.table, self.cell = self.tables.pop() if self.tables else (None, None)
            self._write(_pipe_table(rows))
        elif re.fullmatch(r"h[1-6]", tag) or tag in _BLOCKS:
            self._write("\n\n")
        elif tag == "pre" and self.pre:
            self.pre -= 1
            self._write("\n```\n\n")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.cell is not None:
            self.cell.append(data)
        elif self.table is not None:
            return  # text between cells (whitespace, stray text) is not part of the grid
        elif self.pre:
            self.out.append(data)
        else:
            self._write(re.sub(r"\s+", " ", data))

    def _write(self, text: str) -> None:
        if self.cell is not None:
            self.cell.append(text if text.strip() else " ")
        elif self.table is None:
            self.out.append(text)


def _pipe_table(rows: list[list[str]]) -> str:
    """Rows of cells as a Markdown pipe table, padded to the widest row ("" for no rows)."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    padded = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(padded[0]) + " |", "|" + "---|" * width]
    lines.extend("| " + " | ".join(r) + " |" for r in padded[1:])
    return "\n\n" + "\n".join(lines) + "\n\n"
