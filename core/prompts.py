"""Named prompt templates: the one place that holds prompt text.

Templates use ``string.Template`` placeholders (``$question``). Rendering fails with
:class:`PromptTemplateError` when a variable is missing or unknown, so a typo in a
template never reaches a model as a literal ``$name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from core.errors import PromptTemplateError


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A named template.

    Attributes:
        name: the prompt's name; it is also sent to the model server as ``X-Prompt-Name``.
        text: the template, with ``$variable`` placeholders.
    """

    name: str
    text: str

    def variables(self) -> set[str]:
        """Names of the placeholders in the template."""
        return {m.group("named") or m.group("braced") for m in Template.pattern.finditer(self.text)
                if m.group("named") or m.group("braced")}  # fmt: skip

    def render(self, **values: str) -> str:
        """Fill every placeholder.

        Raises:
            PromptTemplateError: naming missing or unexpected variables.
        """
        expected = self.variables()
        missing = expected - values.keys()
        extra = values.keys() - expected
        if missing or extra:
            raise PromptTemplateError(
                f"prompt {self.name!r}: missing variable(s) {sorted(missing)}, unexpected {sorted(extra)}"
            )
        return Template(self.text).substitute(values)


SYSTEM = PromptTemplate(
    "system",
    "You are the assistant of a document collection called \"$topic_name\". "
    "Answer questions only from the numbered sources you are given. "
    "If the sources do not contain the answer, say that you could not find it.\n$custom_system_prompt",
)

CITING_RULES = (
    "Rules for citing: after each statement, put the code of the source it comes from in square "
    "brackets, for example [S1] or [S1][S3]. Cite only codes listed above. Do not invent sources."
)

ANSWER = PromptTemplate(
    "answer",
    "Sources:\n\n$sources\n\n$citing_rules\n\nQuestion: $question",
)

SOURCE_BLOCK = PromptTemplate("source_block", "[$code] (from $file_name)\n$text")

DEFAULTS: dict[str, PromptTemplate] = {p.name: p for p in (SYSTEM, ANSWER, SOURCE_BLOCK)}
