"""Structured files (JSON, JSON Lines, XML, YAML, TOML, CSV, TSV) read as records.

A structured file is split into *records* before anything else happens, so that a
record (a table row, an array entry, a section) is never cut in the middle:

- JSON / YAML / TOML: a top-level array gives one record per entry; an object whose
  values are all scalars is one record; any other object gives one record per
  top-level key, except that a key holding a list of objects/arrays (a TOML
  ``[[table]]``, a JSON ``{"results": [...]}``) gives one record per list entry, so a
  long list is not one giant record. Several YAML documents give one record each;
  a broken one among them is skipped with a warning, by the same rule as JSON Lines.
- JSON Lines: one record per non-blank line. A line that is not valid JSON (a line
  cut off mid-object) is skipped with a warning naming it; the file fails only when
  most of its lines are bad (then it is more likely the wrong file than a typo).
- CSV / TSV: one record per row, keyed by the header row. A row the CSV parser
  cannot read is skipped with a warning, by the same rule.
- XML: one record per child element of the root (``<book> 4`` is the fourth
  ``<book>``), so every repeated element is a record and a lone sibling such as
  ``<meta>`` is not dropped; the root's own attributes/text, if any, come first as
  ``<catalog>``. Attributes read ``@name``, nested elements are dotted paths
  (repeated siblings indexed: ``author.0``), a leaf's text is its value.

Nested values become ``(dotted path, text)`` fields: ``{"address": {"city": "Lyon"}}``
→ ``("address.city", "Lyon")``, list items get their index (``tags.0``). The parsed
tree is checked (depth and size) before it is flattened, and XML goes through
defusedxml, so hostile files fail with a :class:`ReadError` instead of exhausting
memory. Text decoding is done here rather than through ``ragtopics.ingest.readers`` so that the
readers module can import this one without an import cycle.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import logging
import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import yaml
from charset_normalizer import from_bytes
from defusedxml import DefusedXmlException
from defusedxml import ElementTree as SafeElementTree

from ragtopics.errors import InvalidSettingError, ReadError
from ragtopics.ingest.chunking import split_recursive
from ragtopics.text.keywords import is_searchable

log = logging.getLogger(__name__)

#: Extensions read as records (``ndjson`` is JSON Lines, ``yml`` is YAML).
STRUCTURED_EXTENSIONS: frozenset[str] = frozenset({"json", "jsonl", "ndjson", "xml", "yaml", "yml", "toml", "csv", "tsv"})

# A parsed tree may hold at most this many values per input byte (plus a floor):
# plain JSON/YAML/TOML stay far below, a YAML alias bomb ("billion laughs") does not.
_NODES_PER_BYTE = 64
_MIN_NODE_BUDGET = 4096
_SNIFF_CHARS = 65536
_SNIFF_DELIMITERS = ",;\t|"
#: Bad lines (rows, documents) named one by one in warnings; the rest are counted.
_NAMED_BAD_LINES = 10
#: A flattened field line: ``path: value``.
_FIELD_LINE = re.compile(r"([^\n:]{1,80}): (.*)", re.DOTALL)
#: Keys that identify a record (the last part of a dotted path).
_IDENTIFYING_KEY = re.compile(r"(?:^|[._ -])(?:id|sku|name|title|code|key|ref|reference|number|no|uuid|slug)$", re.IGNORECASE)
_YAML_DOCUMENT_START = re.compile(r"^---(?=[ \t]|$)", re.MULTILINE)

#: (label, path prefix, value) — one future record before flattening.
_Unit = tuple[str, str, Any]
Field = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a structured file.

    Attributes:
        index: position of the record in the file, from 0.
        label: where it came from, for people: ``"row 3"``, ``"item 2"``,
            ``"key 'server'"``, ``"line 7"``, ``"document 2"``, ``"<book> 4"`` (1-based).
        fields: ``(dotted path, value as text)`` pairs in file order.
    """

    index: int
    label: str
    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class _Limits:
    file_name: str
    max_depth: int
    max_records: int
    max_nodes: int


def read_records(data: bytes, *, file_name: str, max_depth: int = 64, max_records: int = 1_000_000) -> list[Record]:
    """Split a structured file into records whose fields are flattened to dotted paths.

    Args:
        data: the raw file bytes.
        file_name: the file's name; its extension picks the format (see
            :data:`STRUCTURED_EXTENSIONS`) and it is named in every error.
        max_depth: deepest nesting accepted (an object inside an object is depth 2).
        max_records: most records accepted; a longer file is refused, not truncated.

    Returns:
        The records in file order; an empty (or whitespace-only) file gives ``[]``.

    Raises:
        ReadError: unknown extension, undecodable text, a syntax error (with line
            and column where the parser gives them), nesting deeper than
            ``max_depth``, more than ``max_records`` records, a tree far larger than
            the file (YAML aliases), or XML that declares entities.
    """
    ext = _extension_of(file_name)
    reader = _READERS.get(ext)
    if reader is None:
        raise ReadError(f"{file_name}: .{ext} is not a structured file type")
    limits = _Limits(file_name, max_depth, max_records, max(_MIN_NODE_BUDGET, _NODES_PER_BYTE * len(data)))
    try:
        return reader(data, limits)
    except RecursionError as exc:  # the stdlib parsers recurse per nesting level
        raise ReadError(f"{file_name} is nested too deeply to read (parser recursion limit)") from exc


def flatten_record(record: Record) -> str:
    """Write a record as ``path: value`` lines (the Flatten import strategy).

    Args:
        record: the record to write.

    Returns:
        One line per field, e.g. ``"name: Ada\\naddress.city: Lyon"``. Line breaks
        inside a path or value become spaces, so each field stays one line.
    """
    return "\n".join(f"{_one_line(path)}: {_one_line(value)}" for path, value in record.fields)


def pack_records(texts: list[str], *, size: int) -> list[str]:
    """Group consecutive record texts into chunks without cutting a record (see :func:`pack_records_counted`).

    Returns:
        The chunk texts.

    Raises:
        InvalidSettingError: when ``size`` is below 1.
    """
    return [text for text, _count in pack_records_counted(texts, size=size)]


def pack_records_counted(texts: list[str], *, size: int) -> list[tuple[str, int]]:
    """Group consecutive record texts into chunks, never cutting a record that fits.

    Args:
        texts: record texts in file order (e.g. from :func:`flatten_record`); empty
            ones and ones without any letter or digit are skipped.
        size: Chunk Size in characters (>= 1).

    Returns:
        ``(chunk text, number of records in it)`` pairs. Records that fit are joined
        by a blank line into chunks of at most ``size`` characters. A record longer
        than ``size`` gets chunks of its own (count 1 each), split between fields
        (a long value at sentence or word ends, keeping its ``path:``), and every
        piece starts with the record's identifying fields (see :func:`identifying_lines`).

    Raises:
        InvalidSettingError: when ``size`` is below 1.
    """
    if size < 1:
        raise InvalidSettingError(f"chunk_size must be at least 1 character, got {size}")
    chunks: list[tuple[str, int]] = []
    current: list[str] = []
    used = 0
    for text in texts:
        if not text or not is_searchable(text):
            continue
        if len(text) > size:
            chunks.extend(_flush(current))
            current, used = [], 0
            chunks.extend((piece, 1) for piece in split_record(text, size=size))
            continue
        added = len(text) + (2 if current else 0)
        if used + added > size:
            chunks.extend(_flush(current))
            current, used, added = [], 0, len(text)
        current.append(text)
        used += added
    chunks.extend(_flush(current))
    return chunks


def records_per_chunk(counts: list[int]) -> list[int] | None:
    """``[fewest, most]`` records per chunk from the counts of :func:`pack_records_counted`; ``None`` for no chunks."""
    return [min(counts), max(counts)] if counts else None


def identifying_lines(text: str, *, size: int) -> list[str]:
    """The ``path: value`` lines that say which record a piece belongs to.

    Args:
        text: a flattened record (``path: value`` lines).
        size: Chunk Size in characters; together the lines take at most a third of it.

    Returns:
        The first field and the fields whose key reads like an identifier (``id``,
        ``sku``, ``name``, ``product_id``, ``Part Number`` …), in record order; ``[]``
        for a record that is not ``path: value`` lines (a narrated one).
    """
    lines = text.split("\n")
    keep = [
        n
        for n, line in enumerate(lines)
        if (m := _FIELD_LINE.fullmatch(line)) and (n == 0 or _IDENTIFYING_KEY.search(m.group(1).strip()))
    ]
    chosen: list[str] = []
    for n in keep:
        if sum(len(c) + 1 for c in chosen) + len(lines[n]) <= size // 3:
            chosen.append(lines[n])
    return chosen


def split_record(text: str, *, size: int) -> list[str]:
    """Pieces of one record longer than ``size``, each starting with its identifying fields.

    Args:
        text: a flattened record (``path: value`` lines) or a narrated one.
        size: Chunk Size in characters (>= 1).

    Returns:
        Pieces in order; each is at most ``size`` characters unless one word is longer.
    """
    ident = identifying_lines(text, size=size)
    head = "".join(line + "\n" for line in ident)
    budget = max(size - len(head), 1)
    lines: list[str] = []
    for line in text.split("\n"):
        if line in ident:
            continue
        if len(line) <= budget:
            lines.append(line)
            continue
        field = _FIELD_LINE.fullmatch(line)
        key = f"{field.group(1)}: " if field and len(field.group(1)) < budget // 2 else ""
        value = field.group(2) if field and key else line
        lines.extend(key + p.text for p in split_recursive(value, size=max(budget - len(key), 1), overlap=0))
    return [head + group for group in _split_lines("\n".join(lines), budget)] if lines else [head.rstrip("\n")]


# --- packing helpers -------------------------------------------------------------


def _flush(texts: list[str]) -> list[tuple[str, int]]:
    return [("\n\n".join(texts), len(texts))] if texts else []


def _split_lines(text: str, size: int) -> list[str]:
    """Greedy groups of whole lines of at most ``size`` characters (a longer line stands alone)."""
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for line in text.split("\n"):
        added = len(line) + (1 if current else 0)
        if current and used + added > size:
            pieces.append("\n".join(current))
            current, used, added = [], 0, len(line)
        current.append(line)
        used += added
    if current:
        pieces.append("\n".join(current))
    return pieces


# --- shared helpers ----------------------------------------------------------------


def _extension_of(file_name: str) -> str:
    stem, dot, ext = file_name.rpartition(".")
    return ext.lower() if dot and stem else file_name.lower()


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def _decode(data: bytes, file_name: str) -> str:
    """UTF-8 (BOM or not) first, else the encoding charset-normalizer finds most plausible."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None:
        raise ReadError(f"{file_name} is not readable text in any known encoding")
    return str(best)


def _scalar_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _children(node: Any, path: str) -> list[tuple[str, Any]] | None:
    """``(path, child)`` pairs of a container, ``None`` for a scalar."""
    if isinstance(node, dict):
        return [(_join(path, _scalar_text(key)), value) for key, value in node.items()]
    if isinstance(node, (list, tuple)):
        return [(_join(path, str(i)), value) for i, value in enumerate(node)]
    return None


def _check_tree(doc: Any, limits: _Limits, where: str) -> None:
    """Refuse a tree deeper than ``max_depth`` or with more values than the budget, without recursion."""
    stack: list[tuple[Any, int]] = [(doc, 1)] if _is_container(doc) else []
    nodes = 1
    while stack:
        node, depth = stack.pop()
        if depth > limits.max_depth:
            raise ReadError(f"{limits.file_name}: {where} is nested too deeply (more than {limits.max_depth} levels)")
        values = node.values() if isinstance(node, dict) else node
        nodes += len(values)
        if nodes > limits.max_nodes:
            raise ReadError(
                f"{limits.file_name}: {where} expands to more than {limits.max_nodes} values, "
                "far more than the file holds (YAML aliases?); refused"
            )
        stack.extend((value, depth + 1) for value in values if _is_container(value))


def _flatten(value: Any, prefix: str) -> tuple[Field, ...]:
    """Dotted-path fields of a (depth-checked) value, in order; empty containers read ``[]`` / ``{}``."""
    fields: list[Field] = []
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack:
        path, node = stack.pop()
        children = _children(node, path)
        if children is None:
            fields.append((path or "value", _scalar_text(node)))
        elif not children:
            fields.append((path or "value", "{}" if isinstance(node, dict) else "[]"))
        else:
            stack.extend(reversed(children))
    return tuple(fields)


def _is_container(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple))


def _split_document(doc: Any) -> list[_Unit]:
    """The records of one parsed JSON/YAML/TOML document (rules in the module docstring)."""
    if doc is None or (_is_container(doc) and not doc):
        return []
    if isinstance(doc, (list, tuple)):
        return [(f"item {i + 1}", "", entry) for i, entry in enumerate(doc)]
    if not isinstance(doc, dict):
        return [("value", "", doc)]
    if not any(_is_container(value) for value in doc.values()):
        return [("object", "", doc)]
    units: list[_Unit] = []
    for key, value in doc.items():
        name = _scalar_text(key)
        if isinstance(value, (list, tuple)) and value and all(_is_container(entry) for entry in value):
            units.extend((f"key '{name}' item {i + 1}", f"{name}.{i}", entry) for i, entry in enumerate(value))
        else:
            units.append((f"key '{name}'", name, value))
    return units


def _to_records(units: list[_Unit], limits: _Limits) -> list[Record]:
    _check_count(len(units), limits)
    return [Record(index=i, label=label, fields=_flatten(value, prefix)) for i, (label, prefix, value) in enumerate(units)]


def _check_count(count: int, limits: _Limits) -> None:
    if count > limits.max_records:
        raise ReadError(f"{limits.file_name} holds more than {limits.max_records} records; split the file")


# --- JSON and JSON Lines --------------------------------------------------------------


class _DuplicateKey(ValueError):
    """A JSON object names one key twice (RFC 8259 says names SHOULD be unique; readers then disagree on the value)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _loads(text: str) -> Any:
    """``json.loads`` that refuses an object with a key given twice (raises :class:`_DuplicateKey`)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def _json_value_error(exc: ValueError) -> str:
    """The operator's words for a value json cannot convert (Python refuses integers over 4,300 digits)."""
    if "digits" in str(exc):
        return f"a number has more than {sys.get_int_max_str_digits():,} digits"
    return str(exc)


def _read_json(data: bytes, limits: _Limits) -> list[Record]:
    text = _decode(data, limits.file_name)
    if not text.strip():
        return []
    try:
        doc = _loads(text)
    except _DuplicateKey as exc:
        raise ReadError(
            f"{limits.file_name}: an object gives the key {exc.args[0]!r} twice, so its value is ambiguous; keep one"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ReadError(f"{limits.file_name} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    except ValueError as exc:  # an integer longer than Python converts (sys.get_int_max_str_digits)
        raise ReadError(f"{limits.file_name} is not readable JSON: {_json_value_error(exc)}") from exc
    _check_tree(doc, limits, "the document")
    return _to_records(_split_document(doc), limits)


def _read_jsonl(data: bytes, limits: _Limits) -> list[Record]:
    text = _decode(data, limits.file_name)
    units: list[_Unit] = []
    bad: list[str] = []
    # split("\n"), not splitlines(): U+2028 and friends may stand raw inside JSON strings.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            doc = _loads(line)
        except _DuplicateKey as exc:
            bad.append(f"line {number} gives the key {exc.args[0]!r} twice")
            continue
        except json.JSONDecodeError as exc:
            bad.append(f"line {number} is not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        except ValueError as exc:
            bad.append(f"line {number} is not readable JSON ({_json_value_error(exc)})")
            continue
        _check_tree(doc, limits, f"line {number}")
        units.append((f"line {number}", "", doc))
        _check_count(len(units), limits)
    _skip_bad(bad, len(units), "lines", limits.file_name)
    return _to_records(units, limits)


def _skip_bad(bad: list[str], good: int, what: str, file_name: str) -> None:
    """Warn about each skipped part (``bad``: why, per part); refuse the file when most parts are bad.

    Raises:
        ReadError: when the bad parts outnumber the good ones.
    """
    if not bad:
        return
    if len(bad) > good:
        raise ReadError(f"{file_name}: {len(bad)} of {len(bad) + good} {what} are unreadable ({bad[0]}); the file was not read")
    for reason in bad[:_NAMED_BAD_LINES]:
        log.warning("%s: %s; skipped, the rest of the file was read", file_name, reason)
    if len(bad) > _NAMED_BAD_LINES:
        log.warning("%s: %d more unreadable %s skipped", file_name, len(bad) - _NAMED_BAD_LINES, what)


# --- YAML and TOML ---------------------------------------------------------------------


def _read_yaml(data: bytes, limits: _Limits) -> list[Record]:
    text = _decode(data, limits.file_name)
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        docs = _read_yaml_documents(text, limits.file_name, exc)
    numbered = [(number, doc) for number, doc in enumerate(docs, start=1) if doc is not None]
    if len(numbered) == 1:
        _check_tree(numbered[0][1], limits, "the document")
        return _to_records(_split_document(numbered[0][1]), limits)
    for number, doc in numbered:
        _check_tree(doc, limits, f"document {number}")
    return _to_records([(f"document {number}", "", doc) for number, doc in numbered], limits)


def _yaml_error(exc: yaml.YAMLError, line_offset: int = 0) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1 + line_offset}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem or exc.context}{where}"
    return str(exc)


def _read_yaml_documents(text: str, file_name: str, exc: yaml.YAMLError) -> list[Any]:
    """Several ``---`` documents, one of them broken: parse each alone and skip the broken ones.

    A ``---`` at column 0 always starts a new document (even inside a block scalar),
    so cutting the text there gives the same documents the parser sees.

    Raises:
        ReadError: the file is one document, or most documents are broken.
    """
    starts = [m.start() for m in _YAML_DOCUMENT_START.finditer(text)]
    bounds = sorted({0, *starts, len(text)})
    parts = [text[a:b] for a, b in itertools.pairwise(bounds) if text[a:b].strip()]
    if len(parts) < 2:
        raise ReadError(f"{file_name} is not valid YAML: {_yaml_error(exc)}") from exc
    docs: list[Any] = []
    bad: list[str] = []
    for number, part in enumerate(parts, start=1):
        try:
            docs.extend(yaml.safe_load_all(part))
        except yaml.YAMLError as part_exc:
            line = text.count("\n", 0, text.index(part)) if text.count(part) == 1 else 0
            bad.append(f"document {number} is not valid YAML: {_yaml_error(part_exc, line)}")
            docs.append(None)
    _skip_bad(bad, len(parts) - len(bad), "documents", file_name)
    return docs


def _read_toml(data: bytes, limits: _Limits) -> list[Record]:
    text = _decode(data, limits.file_name)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line L, column C)"
        raise ReadError(f"{limits.file_name} is not valid TOML: {exc}") from exc
    _check_tree(doc, limits, "the document")
    return _to_records(_split_document(doc), limits)


# --- CSV and TSV ---------------------------------------------------------------------


def _read_csv(data: bytes, limits: _Limits) -> list[Record]:
    text = _decode(data, limits.file_name)
    return _read_rows(text, _sniff_dialect(text), limits)


def _read_tsv(data: bytes, limits: _Limits) -> list[Record]:
    return _read_rows(_decode(data, limits.file_name), csv.excel_tab, limits)


def _sniff_dialect(text: str) -> type[csv.Dialect]:
    """The delimiter under which the first rows agree best with the header's field count.

    ``csv.Sniffer`` guesses from character frequencies and is often wrong on prose cells
    (a quoted passage full of commas and semicolons). Here each candidate delimiter parses
    the sample with standard double-quote rules; the winner is the one whose header has at
    least two fields and the largest share of following rows with as many fields. Ties go
    to the earlier candidate (comma first); with no winner the file is read as excel CSV.
    """
    sample = text[:_SNIFF_CHARS]
    if len(text) > _SNIFF_CHARS and "\n" in sample:
        sample = sample[: sample.rindex("\n")]  # a cut last line would skew the count
    best, best_share = ",", -1.0
    for delimiter in _SNIFF_DELIMITERS:
        try:
            rows = [r for r in itertools.islice(csv.reader(io.StringIO(sample, newline=""), delimiter=delimiter), 50) if r]
        except csv.Error:
            continue
        if not rows or len(rows[0]) < 2:
            continue
        rest = rows[1:]
        share = sum(len(r) == len(rows[0]) for r in rest) / len(rest) if rest else 0.5
        if share > best_share:
            best, best_share = delimiter, share
    return type("SniffedDialect", (csv.excel,), {"delimiter": best})


def _read_rows(text: str, dialect: type[csv.Dialect] | csv.Dialect, limits: _Limits) -> list[Record]:
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    records: list[Record] = []
    try:
        header = next((row for row in reader if row), None)
        if header is None:
            return []
        names = [name.strip() or f"column_{i + 1}" for i, name in enumerate(header)]
    except csv.Error as exc:
        raise ReadError(f"{limits.file_name}: line {reader.line_num} is not valid CSV: {exc}") from exc
    bad: list[str] = []
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # the reader goes on with the next line
            bad.append(f"line {reader.line_num} is not valid CSV ({exc})")
            continue
        if not row:
            continue
        fields = _row_fields(names, row, limits.file_name, reader.line_num)
        records.append(Record(index=len(records), label=f"row {len(records) + 1}", fields=fields))
        _check_count(len(records), limits)
    _skip_bad(bad, len(records), "rows", limits.file_name)
    return records


def _row_fields(names: list[str], row: list[str], file_name: str, line: int) -> tuple[Field, ...]:
    """Pair a row with the header; extra values go under ``_extra.N``, missing ones read ``""``."""
    if len(row) != len(names):
        what = "extra values kept as _extra.N" if len(row) > len(names) else "missing values left empty"
        log.warning("%s: line %d has %d fields but the header has %d; %s", file_name, line, len(row), len(names), what)
    fields = [(name, row[i] if i < len(row) else "") for i, name in enumerate(names)]
    fields.extend((f"_extra.{k}", value) for k, value in enumerate(row[len(names) :]))
    return tuple(fields)


# --- XML ---------------------------------------------------------------------------------


def _read_xml(data: bytes, limits: _Limits) -> list[Record]:
    if not data.strip():
        return []
    root = _parse_xml(data, limits.file_name)
    _check_xml_depth(root, limits)
    units: list[tuple[str, Element]] = []
    if root.attrib or _element_text(root):
        units.append((f"<{_local(root.tag)}>", root))
    seen: dict[str, int] = {}
    for child in root:
        tag = _local(child.tag)
        seen[tag] = seen.get(tag, 0) + 1
        units.append((f"<{tag}> {seen[tag]}", child))
    _check_count(len(units), limits)
    return [
        Record(index=i, label=label, fields=_element_fields(el, with_children=el is not root))
        for i, (label, el) in enumerate(units)
    ]


def _parse_xml(data: bytes, file_name: str) -> Element:
    try:
        return SafeElementTree.fromstring(data)
    except DefusedXmlException as exc:
        raise ReadError(
            f"{file_name}: the XML uses entities or external references ({type(exc).__name__}), "
            "which are refused for safety (entity expansion, external files)"
        ) from exc
    except ParseError as exc:  # its message ends "line L, column C"
        raise ReadError(f"{file_name} is not well-formed XML: {exc}") from exc


def _check_xml_depth(root: Element, limits: _Limits) -> None:
    stack: list[tuple[Element, int]] = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        if depth > limits.max_depth:
            raise ReadError(f"{limits.file_name}: the XML is nested too deeply (more than {limits.max_depth} levels)")
        stack.extend((child, depth + 1) for child in el)


def _local(tag: str) -> str:
    """``{namespace}book`` → ``book``."""
    return tag.rpartition("}")[2]


def _element_text(el: Element) -> str:
    """The element's own text, including text between its children (mixed content)."""
    parts = [el.text or ""] + [child.tail or "" for child in el]
    return " ".join(part.strip() for part in parts if part.strip())


def _element_fields(record_el: Element, *, with_children: bool) -> tuple[Field, ...]:
    """Fields of one record element: ``@attr``, own text as ``#text``, children as dotted paths."""
    fields: list[Field] = []
    stack: list[tuple[str, Element]] = [("", record_el)]
    while stack:
        path, el = stack.pop()
        fields.extend((_join(path, "@" + _local(key)), value) for key, value in el.attrib.items())
        text = _element_text(el)
        if text or (path and not el.attrib and len(el) == 0):
            fields.append((path or "#text", text))
        if not with_children and el is record_el:
            continue  # the root's own record holds its attributes and text, not its children
        counts: dict[str, int] = {}
        for child in el:
            counts[_local(child.tag)] = counts.get(_local(child.tag), 0) + 1
        index: dict[str, int] = {}
        children: list[tuple[str, Element]] = []
        for child in el:
            tag = _local(child.tag)
            index[tag] = index.get(tag, -1) + 1
            children.append((_join(path, f"{tag}.{index[tag]}" if counts[tag] > 1 else tag), child))
        stack.extend(reversed(children))
    return tuple(fields)


_READERS: dict[str, Callable[[bytes, _Limits], list[Record]]] = {
    "json": _read_json,
    "jsonl": _read_jsonl,
    "ndjson": _read_jsonl,
    "yaml": _read_yaml,
    "yml": _read_yaml,
    "toml": _read_toml,
    "csv": _read_csv,
    "tsv": _read_tsv,
    "xml": _read_xml,
}
