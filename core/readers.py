"""Readers that take the text out of an uploaded file, by file type.

This module holds the text readers (plain text, Markdown, source code); other
file families register here as they are added.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from charset_normalizer import from_bytes

from core.errors import ReadError

log = logging.getLogger(__name__)

#: Plain text, markup and source code: read as text, no model calls.
TEXT_EXTENSIONS: frozenset[str] = frozenset(
    {
        "txt", "text", "md", "markdown", "rst", "adoc", "log", "ini", "cfg", "conf", "env",
        "py", "pyi", "ipynb", "js", "mjs", "cjs", "jsx", "ts", "tsx", "java", "kt", "kts", "scala", "go", "rs",
        "c", "h", "cc", "cpp", "cxx", "hpp", "hh", "cs", "fs", "swift", "m", "mm", "rb", "php", "pl", "pm",
        "lua", "r", "jl", "dart", "ex", "exs", "erl", "hs", "clj", "sh", "bash", "zsh", "fish", "ps1", "bat",
        "sql", "html", "htm", "css", "scss", "less", "vue", "svelte", "tex", "proto", "graphql", "gradle",
        "dockerfile", "makefile", "cmake",
    }
)  # fmt: skip

SUPPORTED_EXTENSIONS: frozenset[str] = TEXT_EXTENSIONS


@dataclass(frozen=True, slots=True)
class ReadResult:
    """The text of a file and how it was read.

    Attributes:
        text: the document text ("" when the file has no readable text).
        reader: which reader ran, e.g. ``"text"``.
        encoding: the detected character encoding, for text files.
    """

    text: str
    reader: str
    encoding: str = ""


def extension_of(file_name: str) -> str:
    """Lower-case extension without the dot (``"Report.PDF"`` → ``"pdf"``); a bare ``Makefile`` → ``"makefile"``."""
    stem, dot, ext = file_name.rpartition(".")
    if not dot or not stem:
        return file_name.lower()
    return ext.lower()


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
        raise ReadError(f"{file_name} looks like a binary file (it contains NUL bytes), not text; upload it with its real extension")
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


def read_file(data: bytes, *, file_name: str) -> ReadResult:
    """Read the text of an uploaded file by its extension.

    Raises:
        ReadError: when the file cannot be read.
    """
    ext = extension_of(file_name)
    if ext in TEXT_EXTENSIONS:
        return read_text_bytes(data, file_name=file_name)
    raise ReadError(f"no reader for .{ext} files")


def _control_ratio(text: str) -> float:
    sample = text[:65536]
    if not sample:
        return 0.0
    bad = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\t\n\r\f\v")
    return bad / len(sample)
