"""Citation codes: give each chunk in the prompt a short code and turn codes into file names."""

from __future__ import annotations

import re

from ragtopics.prompts.templates import SOURCE_BLOCK, PromptTemplate
from ragtopics.storage.chunk_index import ChunkHit

#: ``[S1]``, ``[S1, S3]`` or ``[S1][S2]`` as the model writes them.
_CITATION = re.compile(r"\[\s*(S\d+(?:\s*[,;]\s*S\d+)*)\s*\]")
_CODE = re.compile(r"S\d+")
_REMOVED = "\x00"  # stands in for a citation of unknown codes until the run around it is dropped
#: A run of removed citations and the connectors between them, with the spaces before it.
_JOIN = r"[ \t]*(?:,|;|&|\band\b|\bor\b)"
_REMOVED_RUN = re.compile(
    rf"(?<=\]){_JOIN}[ \t]*\x00(?:(?:{_JOIN})?[ \t]*\x00)*"  # after a kept citation: "[a.txt] and <removed>"
    rf"|[ \t]*\x00(?:(?:{_JOIN})?[ \t]*\x00)*(?:{_JOIN}(?=[ \t]*\[))?"  # "<removed>, <removed> and [a.txt]"
)


def code_for(position: int) -> str:
    """Citation code of the chunk at 0-based ``position`` in the prompt: ``S1``, ``S2``, ..."""
    return f"S{position + 1}"


def format_sources(hits: list[ChunkHit], template: PromptTemplate = SOURCE_BLOCK) -> str:
    """The prompt's source list: one block per chunk, headed by its code and file name."""
    return "\n\n".join(
        template.render(code=code_for(i), file_name=h.file_name, text=(f"{h.context}\n{h.text}" if h.context else h.text))
        for i, h in enumerate(hits)
    )


def cited_codes(answer: str) -> list[str]:
    """Codes cited in ``answer``, in order of first appearance, without repeats."""
    seen: list[str] = []
    for match in _CITATION.finditer(answer):
        for code in _CODE.findall(match.group(1)):
            if code not in seen:
                seen.append(code)
    return seen


def render_citations(answer: str, code_to_file: dict[str, str]) -> str:
    """Replace citation codes with file names: ``[S1][S2]`` → ``[a.txt]`` (one bracket per distinct file).

    Unknown codes (not in the prompt) are removed rather than shown, together with the
    words that only joined them: ``is [S8] or [S9].`` → ``is.``, not ``is or .``.
    """

    def replace(match: re.Match[str]) -> str:
        files: list[str] = []
        for code in _CODE.findall(match.group(1)):
            name = code_to_file.get(code)
            if name and name not in files:
                files.append(name)
        return "".join(f"[{f}]" for f in files) or _REMOVED

    rendered = _CITATION.sub(replace, answer)
    rendered = _REMOVED_RUN.sub("", rendered).replace(_REMOVED, "")
    # Collapse a file cited twice in a row ("[a.txt][a.txt]") into one badge.
    return re.sub(r"(\[[^\[\]]+\])(?:\1)+", r"\1", rendered)
