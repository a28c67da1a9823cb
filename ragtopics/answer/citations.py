"""Citation codes: the prompt shows each evidence item under a short code, and the answer's codes become file names."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ragtopics.answer.context import Evidence
from ragtopics.prompts.templates import SOURCE_BLOCK, PromptTemplate

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


def format_sources(coded: Mapping[str, Evidence], template: PromptTemplate = SOURCE_BLOCK) -> str:
    """The prompt's source list: one block per evidence item, headed by its code and file name(s).

    Args:
        coded: citation code → evidence, in prompt order (see :func:`~ragtopics.answer.context.assign_codes`).
        template: the ``source_block`` prompt (``$code``, ``$file_name``, ``$text``); an item with
            no file (a community summary) is headed by its kind instead (``community report``).
    """
    return "\n\n".join(
        template.render(code=code, file_name=", ".join(item.file_names) or item.kind.replace("_", " "), text=item.prompt_text)
        for code, item in coded.items()
    )


def code_files(coded: Mapping[str, Evidence]) -> dict[str, list[str]]:
    """Citation code → the file names a citation of it stands for."""
    return {code: item.file_names for code, item in coded.items()}


def cited_codes(answer: str) -> list[str]:
    """Codes cited in ``answer``, in order of first appearance, without repeats."""
    seen: list[str] = []
    for match in _CITATION.finditer(answer):
        for code in _CODE.findall(match.group(1)):
            if code not in seen:
                seen.append(code)
    return seen


def render_citations(answer: str, code_to_file: Mapping[str, str | list[str]]) -> str:
    """Replace citation codes with file names: ``[S1][S2]`` → ``[a.txt]`` (one bracket per distinct file).

    Unknown codes (not in the prompt) are removed rather than shown, together with the
    words that only joined them: ``is [S8] or [S9].`` → ``is.``, not ``is or .``.
    """

    def replace(match: re.Match[str]) -> str:
        files: list[str] = []
        for code in _CODE.findall(match.group(1)):
            names = code_to_file.get(code) or []
            for name in [names] if isinstance(names, str) else names:
                if name not in files:
                    files.append(name)
        return "".join(f"[{f}]" for f in files) or _REMOVED

    rendered = _CITATION.sub(replace, answer)
    rendered = _REMOVED_RUN.sub("", rendered).replace(_REMOVED, "")
    # Collapse a file cited twice in a row ("[a.txt][a.txt]") into one badge.
    return re.sub(r"(\[[^\[\]]+\])(?:\1)+", r"\1", rendered)
