"""The file types the product reads, by extension: text and source code, structured files, documents, images.

The readers themselves live in :mod:`ragtopics.ingest.readers`; these tables are shared by the settings (which
file types a Topic accepts), upload checks and the console, none of which need the readers' libraries.
"""

from __future__ import annotations

#: Source code: chunked at top-level definitions first (see ragtopics.ingest.chunking).
SOURCE_CODE_EXTENSIONS: frozenset[str] = frozenset(
    [
        "py",
        "pyi",
        "js",
        "mjs",
        "cjs",
        "jsx",
        "ts",
        "tsx",
        "java",
        "kt",
        "kts",
        "scala",
        "go",
        "rs",
        "c",
        "h",
        "cc",
        "cpp",
        "cxx",
        "hpp",
        "hh",
        "cs",
        "fs",
        "swift",
        "m",
        "mm",
        "rb",
        "php",
        "pl",
        "pm",
        "lua",
        "r",
        "jl",
        "dart",
        "ex",
        "exs",
        "erl",
        "hs",
        "clj",
        "sh",
        "bash",
        "zsh",
        "fish",
        "ps1",
        "bat",
        "sql",
        "css",
        "scss",
        "less",
        "vue",
        "svelte",
        "proto",
        "graphql",
        "gradle",
        "dockerfile",
        "makefile",
        "cmake",
    ]
)

#: Plain text, markup and source code: read as text, no model calls.
TEXT_EXTENSIONS: frozenset[str] = (
    frozenset(["txt", "text", "md", "markdown", "rst", "adoc", "log", "ini", "cfg", "conf", "env", "ipynb", "html", "htm", "tex"])
    | SOURCE_CODE_EXTENSIONS
)
#: HTML pages: read as text, then converted to Markdown.
HTML_EXTENSIONS: frozenset[str] = frozenset({"html", "htm"})

#: Structured files and documents (kept in sync with the readers in ragtopics.ingest.structured and
#: ragtopics.ingest.docling).
STRUCTURED_TYPES: frozenset[str] = frozenset({"json", "jsonl", "ndjson", "xml", "yaml", "yml", "toml", "csv", "tsv"})
DOCUMENT_TYPES: frozenset[str] = frozenset({"pdf", "docx", "xlsx", "pptx"})
#: Image files: each is one picture (see ragtopics.ingest.pictures).
IMAGE_TYPES: frozenset[str] = frozenset({"jpg", "jpeg", "png", "gif", "webp", "bmp", "tiff"})
#: The reader name of an image file.
IMAGE_READER = "image"

SUPPORTED_EXTENSIONS: frozenset[str] = TEXT_EXTENSIONS | STRUCTURED_TYPES | DOCUMENT_TYPES | IMAGE_TYPES


def extension_of(file_name: str) -> str:
    """Lower-case extension without the dot (``"Report.PDF"`` → ``"pdf"``); a bare ``Makefile`` → ``"makefile"``."""
    stem, dot, ext = file_name.rpartition(".")
    if not dot or not stem:
        return file_name.lower()
    return ext.lower()
