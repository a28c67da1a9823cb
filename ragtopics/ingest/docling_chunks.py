"""Structure chunking: cut a Docling document along its own items, headings and pages.

A document converted by Docling (PDF, DOCX, XLSX, PPTX) arrives as a ``DoclingDocument``:
a tree of headings, paragraphs, lists, tables, code and pictures, each item with the
pages it sits on (``prov[].page_no``; a PPTX slide and an XLSX sheet count as a page,
a DOCX has none). Instead of re-cutting the exported Markdown, chunks are built from
these items:

1. docling-core's ``HierarchicalChunker`` walks the items in reading order and
   serialises each one (a whole list at a time) as the Markdown export writes it;
   tables as compact pipe tables, so a chunk reads like the Markdown the rest of the
   product shows.
2. Consecutive items are packed into one chunk while they share the **heading path**
   and the **page**, and while the chunk stays within Chunk Size characters. A new
   heading path or a new page starts a new chunk.
3. Every chunk starts with its heading path as Markdown heading lines (``## Manual``,
   ``### Spare parts``), as the Markdown chunker keeps a heading with the text below
   it and repeats it in each piece of a split code block; nothing else in the product
   presents a "Section > Subsection" line, so none is invented here.
4. An item larger than a chunk is cut with :func:`~ragtopics.ingest.chunking.split_recursive`:
   a table only between rows, each piece repeating the header and delimiter row; a
   long paragraph at sentences, then words.
5. Chunk Overlap applies between two chunks of the same section and page that were
   cut only because of the size, and never into or out of a table (as in
   :func:`~ragtopics.ingest.chunking.split_recursive`).

Pictures are tied to chunks through the structure, not by matching text: a picture
belongs to the chunk whose items surround it (a captioned or described picture is an
item of its own), else to the chunk that holds its caption right after it, else to the
chunk with the nearest text before it, else to the first chunk after it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from docling_core.transforms.chunker.hierarchical_chunker import HierarchicalChunker
from docling_core.transforms.serializer.base import BaseDocSerializer, BaseSerializerProvider
from docling_core.transforms.serializer.markdown import MarkdownDocSerializer, MarkdownParams
from docling_core.types.doc import CodeItem, ImageRefMode, PictureItem, SectionHeaderItem, TableItem, TitleItem

from ragtopics.errors import InvalidSettingError
from ragtopics.ingest.chunking import _MIN_BLOCK_BODY, Piece, split_recursive
from ragtopics.ingest.pictures import description_paragraph
from ragtopics.text.keywords import is_searchable

if TYPE_CHECKING:
    from docling_core.types.doc import DoclingDocument

    from ragtopics.ingest.docling import Picture

log = logging.getLogger(__name__)

#: The Markdown export's settings (see ``ragtopics.ingest.docling``), with unpadded tables.
_PARAMS = MarkdownParams(
    image_mode=ImageRefMode.PLACEHOLDER, image_placeholder="", escape_underscores=False, escape_html=False, compact_tables=True
)
#: How far past the expected place an item's Markdown is looked for in the export.
_SEARCH_SLACK_CHARS = 2000
#: A compact delimiter row (``| - | :-: |``), widened to the ``| --- | :---: |`` the export shows.
_DELIMITER_ROW = re.compile(r"^\|(?:[ \t]*:?-+:?[ \t]*\|)+[ \t]*$", re.MULTILINE)


class _ChunkingSerializer(MarkdownDocSerializer):
    """The Markdown serializer with the export's settings, pictures as their caption only."""

    params: MarkdownParams = _PARAMS


class _SerializerProvider(BaseSerializerProvider):
    def get_serializer(self, doc: DoclingDocument) -> BaseDocSerializer:
        return _ChunkingSerializer(doc=doc)


@dataclass(frozen=True, slots=True)
class _Unit:
    """One serialised item (or list, or piece of an item larger than a chunk), ready to pack."""

    text: str
    path: tuple[str, ...]  # self_refs of the headings above it
    first: int  # position of its first item in reading order
    last: int
    kind: str  # text | table | code | heading (a section with no content of its own)
    pages: tuple[int, ...] = ()
    pictures: tuple[int, ...] = ()
    span: tuple[int, int] | None = None  # where it sits in the Markdown export
    overlapped: bool = False  # a later piece of a cut item: it starts with the overlap already


@dataclass(slots=True)
class _Chunk:
    path: tuple[str, ...]
    units: list[_Unit] = field(default_factory=list)
    overlap: str = ""
    pictures: list[int] = field(default_factory=list)


def chunk_document(
    document: DoclingDocument,
    markdown: str,
    *,
    size: int,
    overlap: int,
    pictures: Sequence[Picture] = (),
    descriptions: Sequence[str] = (),
) -> list[Piece]:
    """Chunk a Docling document by its headings, pages and items (see the module docstring).

    Args:
        document: the ``DoclingDocument`` (``ReadResult.document``).
        markdown: its Markdown export (``ReadResult.text``), used only for the offsets.
        size: Chunk Size in characters (>= 1); a chunk is longer only when one table row
            is, or its heading lines leave less than 40 characters for the content.
        overlap: Chunk Overlap in characters, ``0 <= overlap < size``.
        pictures: the pictures lifted out of the document (``ReadResult.pictures``);
            only these are linked to chunks.
        descriptions: one vision-model description per picture ("" when none); a
            described picture becomes the paragraph ``Picture n: <caption>. <description>``
            where it sits in the document.

    Returns:
        The chunks in reading order, each a :class:`~ragtopics.ingest.chunking.Piece` with

        * ``text``: heading lines, then the items' Markdown, blank-line separated;
        * ``start``/``end``: the span of its own items (not the repeated heading lines,
          table header or overlap) in ``markdown``; ``(0, 0)`` when none of them could be
          found there;
        * ``pages``: the 1-based pages (slides, sheets) of its items, ascending; empty
          for a DOCX or when Docling kept no page;
        * ``pictures``: the ``Picture.index`` of each picture linked to it.

        Chunks with no letter or digit are dropped.

    Raises:
        InvalidSettingError: when ``size`` or ``overlap`` is out of range.
    """
    if size < 1:
        raise InvalidSettingError(f"chunk_size must be at least 1 character, got {size}")
    if not 0 <= overlap < size:
        raise InvalidSettingError(f"chunk_overlap must be >= 0 and < chunk_size ({size}), got {overlap}")
    serializer = _SerializerProvider().get_serializer(document)
    order, paths = _reading_order(document)
    headings = {ref: serializer.serialize(item=item).text.strip() for ref, item in _heading_items(document)}
    stored = {p.index for p in pictures}
    units = _units(document, order, paths, stored)
    units = sorted(units + _described(pictures, descriptions, order, paths), key=lambda u: (u.first, u.kind == "described"))
    units = _located(units, markdown, headings)
    chunks = _pack(_fitted(units, headings, size, overlap), headings, size, overlap)
    _link_loose_pictures(chunks, [p for p in pictures if not any(p.index in u.pictures for u in units)], order)
    pieces = [_piece(c, headings, size) for c in chunks]
    return [p for p in pieces if is_searchable(p.text)]


# --- reading order and units ---------------------------------------------------------------


def _reading_order(document: DoclingDocument) -> tuple[dict[str, int], dict[str, tuple[str, ...]]]:
    """Each item's position in reading order, and the heading path above it (as ``HierarchicalChunker`` keeps it)."""
    order: dict[str, int] = {}
    paths: dict[str, tuple[str, ...]] = {}
    above: dict[int, Any] = {}
    for n, (item, _) in enumerate(document.iterate_items(with_groups=True, included_content_layers=_PARAMS.layers)):
        order[item.self_ref] = n
        if isinstance(item, (TitleItem, SectionHeaderItem)):
            level = item.level if isinstance(item, SectionHeaderItem) else 0
            above = {k: v for k, v in above.items() if k < level}
            above[level] = item
        paths[item.self_ref] = tuple(above[k].self_ref for k in sorted(above) if above[k] is not item)
    return order, paths


def _heading_items(document: DoclingDocument) -> Iterable[tuple[str, Any]]:
    for item, _ in document.iterate_items(included_content_layers=_PARAMS.layers):
        if isinstance(item, (TitleItem, SectionHeaderItem)):
            yield item.self_ref, item


def _units(document: DoclingDocument, order: dict[str, int], paths: dict[str, tuple[str, ...]], stored: set[int]) -> list[_Unit]:
    """The serialised items, from ``HierarchicalChunker`` (one per item, a whole list at a time)."""
    chunker = HierarchicalChunker(serializer_provider=_SerializerProvider(), always_emit_headings=True)
    units: list[_Unit] = []
    for chunk in chunker.chunk(document):
        items = list(chunk.meta.doc_items)  # type: ignore[attr-defined]  # HierarchicalChunker yields DocChunk, whose meta is DocMeta
        heading_only = not chunk.text.strip() and all(isinstance(i, (TitleItem, SectionHeaderItem)) for i in items)
        if heading_only:
            path, kind = tuple(i.self_ref for i in items), "heading"
            items = items[-1:]  # the section's own heading: its place and pages (the others are above it)
        else:
            path = paths.get(items[0].self_ref, ())
            kind = next(
                (k for k, cls in (("table", TableItem), ("code", CodeItem)) if any(isinstance(i, cls) for i in items)), "text"
            )
        text = _DELIMITER_ROW.sub(_widened, chunk.text.strip()) if kind == "table" else chunk.text.strip()
        positions = [order[i.self_ref] for i in items if i.self_ref in order] or [units[-1].last if units else 0]
        found = tuple(n for n in (_picture_number(i) for i in items) if n is not None and n in stored)
        units.append(_Unit(text, path, min(positions), max(positions), kind, _pages(items), found))
    return units


def _described(
    pictures: Sequence[Picture], descriptions: Sequence[str], order: dict[str, int], paths: dict[str, tuple[str, ...]]
) -> list[_Unit]:
    """A paragraph per described picture, where the picture sits (pages: the picture's page)."""
    units = []
    for n, (picture, description) in enumerate(zip(pictures, descriptions), start=1):
        ref = f"#/pictures/{picture.index}"
        if description:  # a picture outside the reading order (page furniture) is described at the end
            at = order.get(ref, len(order))
            pages = (picture.page,) if picture.page else ()
            units.append(
                _Unit(
                    description_paragraph(n, picture, description),
                    paths.get(ref, ()),
                    at,
                    at,
                    "described",
                    pages,
                    (picture.index,),
                )
            )
    return units


def _widened(match: re.Match[str]) -> str:
    cells = [c.strip() for c in match.group(0).strip().strip("|").split("|")]
    return (
        "| "
        + " | ".join((":" if c.startswith(":") else "") + "---" + (":" if c.endswith(":") and len(c) > 1 else "") for c in cells)
        + " |"
    )


def _picture_number(item: Any) -> int | None:
    """Docling's picture number (``#/pictures/3`` → 3), the ``Picture.index`` of the reader."""
    return int(item.self_ref.rsplit("/", 1)[-1]) if isinstance(item, PictureItem) else None


def _pages(items: Iterable[Any]) -> tuple[int, ...]:
    return tuple(sorted({p.page_no for i in items for p in (getattr(i, "prov", None) or []) if p.page_no}))


def _located(units: list[_Unit], markdown: str, headings: dict[str, str]) -> list[_Unit]:
    """Units with their span in the Markdown export, searched in reading order (None where not found).

    A section without content of its own is found by its heading line. Each search looks
    only a little past where the units not found so far would end, so a unit the
    export writes differently costs no scan of the rest of a long document.
    """
    out = []
    cursor = missed = 0
    for unit in units:
        if unit.kind == "described":  # appended after the document text (``text_with_descriptions``)
            at = markdown.rfind(unit.text)
            out.append(replace(unit, span=(at, at + len(unit.text)) if at >= 0 else None))
            continue
        probe = unit.text if unit.kind != "heading" else headings.get(unit.path[-1], "")
        at = markdown.find(probe, cursor, cursor + missed + len(probe) + _SEARCH_SLACK_CHARS) if probe else -1
        if at >= 0:
            cursor, missed = at + len(probe), 0
        else:
            missed += len(probe) + 2
        out.append(replace(unit, span=(at, at + len(probe)) if at >= 0 else None))
    return out


# --- packing -------------------------------------------------------------------------------


def _heading_lines(path: tuple[str, ...], headings: dict[str, str], size: int) -> str:
    """The heading lines a chunk of ``path`` starts with: the whole path, else the nearest heading, else none."""
    lines = [headings[ref] for ref in path if headings.get(ref)]
    for candidate in (lines, lines[-1:]):
        text = "\n".join(candidate)
        if candidate and size - len(text) - 2 >= _MIN_BLOCK_BODY:
            return text
    return ""


def _fitted(units: list[_Unit], headings: dict[str, str], size: int, overlap: int) -> list[_Unit]:
    """Units no longer than a chunk: a larger one cut by ``split_recursive`` (tables between rows, text with overlap)."""
    out = []
    for unit in units:
        prefix = _heading_lines(unit.path, headings, size)
        budget = size - len(prefix) - 2 if prefix else size
        if unit.kind == "heading" or len(unit.text) <= budget:
            out.append(unit)
            continue
        for n, piece in enumerate(split_recursive(unit.text, size=budget, overlap=min(overlap, budget - 1))):
            span = (unit.span[0] + piece.start, unit.span[0] + piece.end) if unit.span else None
            kind = "code" if piece.is_code else unit.kind if unit.kind != "described" else "text"
            out.append(replace(unit, text=piece.text, kind=kind, span=span, overlapped=n > 0))
    return out


def _pack(units: list[_Unit], headings: dict[str, str], size: int, overlap: int) -> list[_Chunk]:
    """Consecutive units of one heading path and page, packed greedily up to ``size`` characters."""
    chunks: list[_Chunk] = []
    for unit in units:
        last = chunks[-1] if chunks else None
        prefix = _heading_lines(unit.path, headings, size)
        if last is not None and _fits(last, unit, prefix, size):
            last.units.append(unit)
            continue
        chunk = _Chunk(unit.path, [unit])
        if last is not None and overlap and _continues(last, unit):
            room = size - _length(prefix, "", [unit.text]) - 2
            chunk.overlap = _tail(last.units[-1].text, min(overlap, room))
        chunks.append(chunk)
    return chunks


def _length(prefix: str, overlap: str, texts: list[str]) -> int:
    """Characters of a chunk made of these parts (blank-line separated)."""
    return len("\n\n".join(t for t in [prefix, overlap, *texts] if t))


def _fits(chunk: _Chunk, unit: _Unit, prefix: str, size: int) -> bool:
    """Whether ``unit`` may join ``chunk``: same path, not a page later, not a bare heading, and within ``size``."""
    if unit.path != chunk.path or unit.kind == "heading" or chunk.units[-1].kind == "heading":
        return False
    if _later_page(chunk.units, unit):
        return False
    return _length(prefix, chunk.overlap, [*(u.text for u in chunk.units), unit.text]) <= size


def _later_page(units: list[_Unit], unit: _Unit) -> bool:
    """Whether ``unit`` starts on a page after every page of ``units`` (pages unknown: no)."""
    pages = [p for u in units for p in u.pages]
    return bool(unit.pages and pages and min(unit.pages) > max(pages))


def _continues(previous: _Chunk, unit: _Unit) -> bool:
    """A chunk cut only for its size (same path and page, text on both sides) repeats the end of the one before."""
    before = previous.units[-1]
    text_kinds = ("text", "described")
    return (
        previous.path == unit.path
        and before.kind in text_kinds
        and unit.kind in text_kinds
        and not unit.overlapped
        and not _later_page(previous.units, unit)
    )


def _tail(text: str, chars: int) -> str:
    """The last ``chars`` characters of ``text``, moved forward to the start of a word ("" when none fits)."""
    if chars <= 0:
        return ""
    tail = text[-chars:]
    if len(tail) < len(text) and not text[-chars - 1].isspace():
        space = re.search(r"\s", tail)
        tail = tail[space.end() :] if space else ""
    return tail.strip()


def _piece(chunk: _Chunk, headings: dict[str, str], size: int) -> Piece:
    """The chunk as a :class:`Piece`: its text, the span of its own units, their pages and pictures."""
    if chunk.units[0].kind == "heading":
        text = "\n".join(headings[ref] for ref in chunk.path if headings.get(ref))
    else:
        prefix = _heading_lines(chunk.path, headings, size)
        text = "\n\n".join(t for t in [prefix, chunk.overlap, *(u.text for u in chunk.units)] if t)
    spans = [u.span for u in chunk.units if u.span is not None]
    start, end = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else (0, 0)
    pages = tuple(sorted({p for u in chunk.units for p in u.pages}))
    pictures = tuple(dict.fromkeys([*(n for u in chunk.units for n in u.pictures), *chunk.pictures]))
    return Piece(
        text=text, start=start, end=end, is_code=any(u.kind == "code" for u in chunk.units), pages=pages, pictures=pictures
    )


# --- pictures outside any item -------------------------------------------------------------


def _link_loose_pictures(chunks: list[_Chunk], pictures: Sequence[Picture], order: dict[str, int]) -> None:
    """Tie each picture that is no item of a chunk to the chunk around it, its caption's, or its neighbour's.

    In order: the chunk whose items surround the picture; the chunk holding the item
    right after it when that item is its caption; the chunk with the nearest item
    before it; the first chunk after it. A picture outside the reading order is not linked.
    """
    spans = [(min(u.first for u in c.units), max(u.last for u in c.units)) for c in chunks]
    for picture in pictures:
        at = order.get(f"#/pictures/{picture.index}")
        if at is None or not chunks:
            continue
        target = next((n for n, (a, b) in enumerate(spans) if a <= at <= b), None)
        if target is None and picture.caption:
            following = min(((u.first, n, u.text) for n, c in enumerate(chunks) for u in c.units if u.first > at), default=None)
            if following is not None and _normalised(picture.caption) in _normalised(following[2]):
                target = following[1]
        if target is None:
            before = [n for n, (_, b) in enumerate(spans) if b < at]
            target = max(before, key=lambda n: spans[n][1]) if before else min(range(len(chunks)), key=lambda n: spans[n][0])
        chunks[target].pictures.append(picture.index)


def _normalised(text: str) -> str:
    return " ".join(text.split())
