"""Named prompt templates: the one place that holds prompt text.

Templates use ``string.Template`` placeholders (``$question``). Rendering fails with
:class:`PromptTemplateError` when a variable is missing or unknown, so a typo in a
template never reaches a model as a literal ``$name``. The defaults below can be
overridden for all Topics (Admin → LLM Configuration) or for one Topic (Prompts
tab); an override must use exactly the default's variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from ragtopics.errors import PromptTemplateError

#: What a DIRECT or ATTACHMENT answer says when it needs the documents after all.
NEEDS_DOCUMENTS = "NEEDS_DOCUMENTS"

#: Longest prompt text an operator may store, in characters (about 5,000 tokens: a prompt is sent with
#: every question, so a pasted document here would crowd out the retrieved chunks).
MAX_PROMPT_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A named template.

    Attributes:
        name: the prompt's name; it is also sent to the model server as ``X-Prompt-Name``.
        text: the template, with ``$variable`` placeholders.
        description: what the prompt is for (shown on the Prompts page).
    """

    name: str
    text: str
    description: str = ""

    def variables(self) -> set[str]:
        """Names of the placeholders in the template."""
        return {
            m.group("named") or m.group("braced")
            for m in Template.pattern.finditer(self.text)
            if m.group("named") or m.group("braced")
        }

    def render(self, **values: str) -> str:
        """Fill every placeholder.

        Raises:
            PromptTemplateError: naming missing or unexpected variables.
        """
        expected = self.variables()
        missing = expected - values.keys()
        extra = values.keys() - expected
        if missing or extra:
            raise PromptTemplateError(f"prompt {self.name!r}: missing variable(s) {sorted(missing)}, unexpected {sorted(extra)}")
        return Template(self.text).substitute(values)

    def with_text(self, text: str) -> PromptTemplate:
        """This prompt with another text that uses exactly the same variables.

        Raises:
            PromptTemplateError: when ``text`` adds or drops a variable, has a stray ``$``, or is longer
                than :data:`MAX_PROMPT_CHARS`.
        """
        if len(text) > MAX_PROMPT_CHARS:
            raise PromptTemplateError(
                f"prompt {self.name!r} is {len(text):,} characters long; at most {MAX_PROMPT_CHARS:,} are allowed "
                "(every question sends it to the model)"
            )
        candidate = PromptTemplate(self.name, text, self.description)
        try:
            Template(text).substitute(dict.fromkeys(candidate.variables(), ""))
        except ValueError as exc:
            raise PromptTemplateError(f"prompt {self.name!r}: {exc} (write $$ for a literal dollar sign)") from exc
        if candidate.variables() != self.variables():
            unknown, missing = candidate.variables() - self.variables(), self.variables() - candidate.variables()
            found = "; ".join(
                part
                for part in (
                    f"unknown: {', '.join('$' + v for v in sorted(unknown))}" if unknown else "",
                    f"missing: {', '.join('$' + v for v in sorted(missing))}" if missing else "",
                )
                if part
            )
            raise PromptTemplateError(
                f"prompt {self.name!r} must use exactly the variables {', '.join('$' + v for v in sorted(self.variables())) or '(none)'}"
                f" ({found})"
            )
        return candidate


SYSTEM = PromptTemplate(
    "system",
    'You are the assistant of a document collection called "$topic_name". '
    "Answer questions only from the numbered sources you are given. "
    "If the sources do not contain the answer, say that you could not find it.\n$custom_system_prompt",
    "The shared system prompt; the Topic's Custom System Prompt is inserted at $custom_system_prompt.",
)

CITING_RULES = PromptTemplate(
    "citing_rules",
    "Rules for citing: after each statement, put the code of the source it comes from in square "
    "brackets, for example [S1] or [S1][S3]. Cite only codes listed above. Do not invent sources.",
    "How the model must cite the numbered sources.",
)

ANSWER = PromptTemplate(
    "answer",
    "Sources:\n\n$sources\n\n$citing_rules\n\n$question",
    "The question with the retrieved chunks, each headed by its citation code.",
)

SOURCE_BLOCK = PromptTemplate("source_block", "[$code] (from $file_name)\n$text", "One retrieved chunk in the prompt.")

DIRECT = PromptTemplate(
    "direct",
    "Answer the last message from the conversation alone, without any documents. If answering needs facts "
    f"from the documents of the collection, reply with exactly {NEEDS_DOCUMENTS} and nothing else.\n\n$question",
    "Chit-chat, thanks and rewording requests, answered without searching.",
)

ATTACHMENT = PromptTemplate(
    "attachment",
    "Answer from the attached file alone. If the attached file does not contain the answer, reply with exactly "
    f"{NEEDS_DOCUMENTS} and nothing else.\n\n$question",
    "Questions that only the attached file can answer.",
)

ROUTER = PromptTemplate(
    "router",
    "Decide how to answer the user's last message. Choose one route:\n$ways\n"
    "ATTACHMENT only if a file is attached (attached: $has_attachment).\n"
    "Reply as JSON with route, confidence between 0 and 1, a short reason, and entities: the named things "
    "in the message (people, places, organisations, parts, codes), or an empty list.\n\nMessage: $question",
    "Route before retrieval: one of the Topic kind's ways, with a confidence and the named things.",
)

RERANK = PromptTemplate(
    "rerank",
    "Order the passages by how well they answer the question, best first. Reply as JSON with the list "
    "of passage numbers in that order.\n\nQuestion: $question\n\nPassages:\n$passages",
    "LLM reranking of the retrieved candidates.",
)

SOURCE_CHECK = PromptTemplate(
    "source_check",
    "Does the answer use information from the document? Reply as JSON with used true or false.\n\n"
    "Answer:\n$answer\n\nDocument $file_name:\n$text",
    "Model check of one document, when the answer does not cite its sources clearly.",
)

TOOL_DESCRIPTION = PromptTemplate(
    "tool_description",
    'Ask the Topic "$topic_name" a question; it answers from its own documents, with sources. $description',
    "How a connected Topic is described to the model as a tool.",
)

KEYWORDS = PromptTemplate(
    "keywords",
    "List the search keywords of this passage: names, codes, numbers and key terms, separated by commas. "
    "Reply with the list only.\n\n$text",
    "Keyword Enrichment LLM: one call per chunk at upload.",
)

NARRATE = PromptTemplate(
    "narrate",
    "Rewrite this record as one short, factual paragraph. Keep every name, number and code exactly.\n\n$record",
    "Import Strategy NARRATE: one call per record of a structured file.",
)

DESCRIBE_PICTURE = PromptTemplate(
    "describe_picture",
    "Describe this picture in two or three factual sentences: what it shows, and every label, number or code "
    "written in it. Reply with the description only.\n\nCaption: $caption\nText near the picture: $neighbour_text",
    "Describe pictures with a vision model: one call per picture at upload.",
)

PICTURES = PromptTemplate(
    "pictures",
    "Pictures you may show:\n$pictures\n\nTo show a picture, put its code, for example [P1], on its own line "
    "where the picture belongs. Show a picture only when it helps the answer.",
    "The pictures of the retrieved chunks, offered to the answer (Show pictures in answers).",
)

PICTURE_LINE = PromptTemplate("picture_line", "[$code] $label (from $file_name)", "One offered picture in the prompt.")

CONTEXT_LINE = PromptTemplate(
    "context_line",
    "Here is the start of a document:\n$document\n\nHere is one passage of it:\n$chunk\n\n"
    "Write one short sentence that says where this passage belongs in the document (its section and topic). "
    "Reply with the sentence only.",
    "Chunking Strategy SEMANTIC: one call per chunk at upload.",
)

GRAPH_EXTRACTION = PromptTemplate(
    "graph_extraction",
    "List the entities and relationships in the text below.\n"
    "Entities: the people, organisations, places, products, parts, codes, events and key concepts it names. "
    "For each give its name exactly as written, a short upper-case type (PERSON, ORGANIZATION, PLACE, PRODUCT, "
    "PART, CODE, EVENT, CONCEPT), one or two sentences on what the text says about it, and other names or "
    "abbreviations the text uses for it.\n"
    "Relationships: pairs of listed entities that the text connects. Source and target must be names from your "
    "entity list. Give a short description in the text's words and a strength from 1 (mentioned together) "
    "to 10 (tightly bound).\n"
    "Reply as JSON with entities and relationships; use empty lists when the text names nothing.\n\nText:\n$text",
    "GraphRAG Graph Extraction (method LLM): one call per chunk at upload.",
)

COMMUNITY_REPORT = PromptTemplate(
    "community_report",
    "Below are the entities and relationships of one community of a knowledge graph: a group of closely "
    "connected things from the same documents.\n"
    "Write a report on it. Use only the facts listed.\n"
    "Reply as JSON with title (a short name for the group, at most ten words) and summary (three to six "
    "sentences on what the group is about and how its main members are connected).\n\n"
    "Entities:\n$entities\n\nRelationships:\n$relationships",
    "GraphRAG community reports: one call per changed community at a rebuild.",
)

PICTURE_ENTITIES = PromptTemplate(
    "picture_entities",
    "Look at the picture. Which of these entities does it show or depict? Answer only with names from the list.\n"
    "Caption: $caption\nDescription: $description\n\nEntities:\n$entities\n\n"
    "Reply as JSON with names (a list of names from the list; empty when it shows none of them).",
    "GraphRAG Picture in the graph: which entities of its chunk a picture shows (one call per picture).",
)

GLOBAL_MAP = PromptTemplate(
    "global_map",
    "Question: $question\n\nBelow is the summary of one group of related things from the documents.\n"
    "Title: $title\nSummary: $summary\nKey entities: $key_entities\nKey relationships:\n$key_relationships\n\n"
    "Does this summary help answer the question? Reply as JSON with helpful (true or false), points (the facts "
    "from the summary that answer the question, each one short sentence; empty when not helpful) and score "
    "(0-100, how much it helps).",
    "GraphRAG GLOBAL: the map step, one call per community summary.",
)

FOLLOW_UP_PLAN = PromptTemplate(
    "follow_up_plan",
    "Question: $question\n\nWhat summaries of the documents say:\n$summaries\n\nFound so far:\n$findings\n\n"
    "Already asked:\n$asked\n\nPlan up to $max_questions concrete follow-up questions about named things that "
    "the documents can answer and that are needed to answer the question. Ask nothing already asked. "
    "Reply as JSON with questions (a list; empty when nothing more is needed).",
    "GraphRAG HYBRID: plans the follow-up questions of one round.",
)

DEDUPLICATION = PromptTemplate(
    "deduplication",
    "Decide for each numbered pair whether the two names mean the same real-world thing (the same person, "
    "organisation, place, object or idea). Answer same only when you are sure. Things with similar names that "
    "are different (a city and a person named after it, two models of one product, a company and its founder) "
    "are not the same. Reply as JSON with decisions: one {pair, same, reason} per pair.\n\nPairs:\n$pairs",
    "GraphRAG deduplication: several unclear pairs of entity names per call of the Deduplication model at upload.",
)

DEFAULTS: dict[str, PromptTemplate] = {
    p.name: p
    for p in (
        SYSTEM,
        CITING_RULES,
        ANSWER,
        SOURCE_BLOCK,
        DIRECT,
        ATTACHMENT,
        ROUTER,
        RERANK,
        SOURCE_CHECK,
        TOOL_DESCRIPTION,
        KEYWORDS,
        NARRATE,
        DESCRIBE_PICTURE,
        PICTURES,
        PICTURE_LINE,
        CONTEXT_LINE,
        GRAPH_EXTRACTION,
        COMMUNITY_REPORT,
        PICTURE_ENTITIES,
        GLOBAL_MAP,
        FOLLOW_UP_PLAN,
        DEDUPLICATION,
    )
}
