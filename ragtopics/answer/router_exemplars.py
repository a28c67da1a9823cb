"""What each routing way looks like: exemplar utterances and lexical cues, for the embedding router.

Written for this project from the ways' descriptions in the GraphRAG specification
(Phase C, "The six ways") and the RAG specification (Phase B step 3): DIRECT is
thanks, small talk and requests to reshape the previous answer; ATTACHMENT is a
question that only the attached file answers; PATH is "how is A related to B?";
LOCAL is facts about named things; GLOBAL is an overview of all documents; HYBRID
is overview and detail together. Names and codes in them are made up or common
knowledge. None is taken from, or modelled on, the router evaluation questions
(``shared/eval/router/questions.json``), which only measure the router.

:data:`DEV_QUESTIONS` is a second, separate set of our own questions: the
embedding router's confidence calibration (``CALIBRATION_*`` in
:mod:`ragtopics.answer.routing`) was fitted on it, so the evaluation set stays
unseen by every fitted number.

The lexical cues at the end are general rules taken from the specifications' wording
(PATH needs "two named entities" and a connection question; ATTACHMENT is about "the
file you attached"; DIRECT reshapes "the previous answer"; HYBRID is "overview and detail").
"""

from __future__ import annotations

import re

#: Way name → exemplar utterances (English). Keys are the GraphRAG ways; a RAG Topic
#: collapses PATH, LOCAL, GLOBAL and HYBRID into SEARCH.
EXEMPLARS: dict[str, tuple[str, ...]] = {
    "DIRECT": (
        "Thanks!",
        "Thank you, that was really helpful.",
        "Many thanks for your help.",
        "Cheers, appreciated.",
        "Hi there",
        "Good morning!",
        "Hey, how is it going?",
        "Nice to meet you.",
        "Who are you?",
        "Okay, got it.",
        "Alright, sounds good.",
        "Perfect, that's all I needed.",
        "Cool.",
        "Bye, see you later.",
        "Make it shorter.",
        "Can you shorten your last answer?",
        "Rewrite that as a bulleted list.",
        "Format your reply as a table with two columns.",
        "Explain that again in simpler words.",
        "Translate your previous reply into German.",
        "Rephrase the last response more formally.",
        "Give me that in two sentences.",
        "Can you repeat what you just said?",
        "Condense the answer above into one short paragraph.",
        "Turn your answer into a numbered list.",
        "Say it again but more politely.",
        "No, that's fine, thank you.",
        "Great job, that answers my question.",
    ),
    "ATTACHMENT": (
        "What is this attachment about?",
        "Give me a short summary of the document I uploaded here.",
        "What does the file I just sent say about deadlines?",
        "Translate this document into French.",
        "Extract all the dates mentioned in the attached file.",
        "List the names of the people that appear in this document.",
        "What is the total amount on this invoice?",
        "Read the attached contract and tell me when it ends.",
        "Convert the attached table into JSON.",
        "Which sections does this report have?",
        "What is the main point of the attached letter?",
        "Describe the chart in the image I sent.",
        "Check this code file for bugs.",
        "Does the uploaded CV mention any Python experience?",
        "Shorten the attached text to half its length.",
        "What questions does this email ask me?",
        "Find the phone numbers in this file.",
        "What is the title of the attached paper?",
        "Rewrite my attached paragraph in a friendlier tone.",
        "According to the file I attached, who signed it?",
    ),
    "PATH": (
        "How is Marie Curie related to Pierre Curie?",
        "What is the connection between the Apollo program and the Soviet Union?",
        "What links the Acme Corporation to the London office?",
        "How are Project Atlas and the Berlin team connected?",
        "Is there a link between compressor C-3 and alarm A-17?",
        "Through which people is Tesla connected to Panasonic?",
        "How does the University of Oxford connect to Stephen Hawking?",
        "Trace the chain from supplier Alpha Metals to product line Z.",
        "In what way is component X-9 linked with failure mode F-2?",
        "What relates the Treaty of Rome to the European Union?",
        "Explain how Amazon and Whole Foods are related.",
        "Are the Smith family and the Jones Trust connected in any way?",
        "What ties the Paris subsidiary to the parent company?",
        "How is the protein p53 associated with the gene BRCA1?",
        "Show how department A and vendor B are linked.",
        "What is the relationship between Kepler and Tycho Brahe?",
        "Which path leads from router R-4 to server S-12?",
        "What do Mozart and Salzburg have to do with each other?",
    ),
    "LOCAL": (
        "When was the Eiffel Tower built?",
        "Who founded the Acme Corporation?",
        "What is the maximum operating pressure of valve V-200?",
        "Where is the headquarters of Siemens located?",
        "What is the price of product SKU-1234?",
        "Who is the manager of the Oslo branch?",
        "What dosage of ibuprofen is recommended for adults?",
        "Which model number does the replacement filter have?",
        "What did John Smith say about the budget?",
        "When does the warranty of the X200 printer expire?",
        "Which author wrote the novel Dune?",
        "How many employees work at the Madrid office?",
        "What is the default timeout of the payments API?",
        "What is the boiling point of ethanol?",
        "Which team owns the billing service?",
        "In which year did Alice Johnson join the company?",
        "What are the specifications of pump model K-40?",
        "What happened at the 2019 board meeting?",
        "Which river flows through Vienna?",
        "What does error message ERR-552 mean?",
        "Who is the contact person for vendor Brightline?",
        "What is the capacity of tank T-3 in litres?",
    ),
    "GLOBAL": (
        "Give me an overview of the entire collection.",
        "What is this collection of documents about overall?",
        "Summarise the whole corpus in a few paragraphs.",
        "What recurring themes run through all the documents?",
        "What are the most important ideas in all of these files?",
        "Provide a high-level summary of all the uploaded material.",
        "What kinds of information can I find here?",
        "What patterns emerge across the entire dataset?",
        "What are the big-picture conclusions of the reports?",
        "Give me a bird's-eye view of the content.",
        "What do all the documents have in common?",
        "Which issues come up again and again in the archive?",
        "Summarise the overall findings of every report.",
        "What perspectives on the subject do the different texts take?",
        "Describe the collection as a whole.",
        "What are the key takeaways from the complete set of documents?",
        "Which general themes dominate the material?",
        "What is the general picture that the sources paint?",
    ),
    "HYBRID": (
        "Give an overview of the projects and explain the budget of Project Atlas in detail.",
        "What are the main product lines, and which one had the highest revenue?",
        "Summarise the incidents overall and describe the worst one.",
        "Outline the structure of the organisation and say who leads the finance unit.",
        "What themes do the interviews cover, and what did Dr. Lee say about climate?",
        "Describe the overall market and the role of company Zeta in it.",
        "Give me the big picture of the regulations and the specific rules for food labels.",
        "Which risks do the reports identify in general, and how does the Lyon plant handle them?",
        "Summarise all customer complaints and give details of the most frequent one.",
        "Explain the general maintenance policy and the schedule for turbine T-9.",
        "What are the overall sales trends, and why did the northern region decline?",
        "Give a broad summary of the research, then detail the experiment on mice.",
        "What do the texts say about security in general, and about password rules in particular?",
        "Survey the vendors mentioned and identify the most expensive one.",
        "Describe the history of the company and the founder's part in it.",
        "How do the regional offices differ overall, and what is special about the Lisbon office?",
        "List the main topics of the meeting notes and explain the decision on hiring.",
    ),
}

#: Our own development questions (way, question, attachment or None), used to fit the
#: confidence calibration and to check design choices; disjoint from the evaluation set.
DEV_QUESTIONS: tuple[tuple[str, str, str | None], ...] = (
    ("DIRECT", "thanks a lot, bye", None),
    ("DIRECT", "Could you make that answer a bit more concise?", None),
    ("DIRECT", "hey", None),
    ("DIRECT", "Write your last reply as three bullet points.", None),
    ("DIRECT", "Awesome, thanks!", None),
    ("DIRECT", "Good evening, how are you?", None),
    ("ATTACHMENT", "What is the conclusion of the report I attached?", "report.pdf"),
    ("ATTACHMENT", "Translate this page into Spanish.", "page.docx"),
    ("ATTACHMENT", "Who is the sender of this letter?", "letter.txt"),
    ("ATTACHMENT", "What does this diagram show?", "diagram.png"),
    ("ATTACHMENT", "List the action items in the notes I uploaded.", "notes.md"),
    ("ATTACHMENT", "Which columns does this table contain?", "table.csv"),
    ("PATH", "How is Nikola Tesla connected to George Westinghouse?", None),
    ("PATH", "What is the link between the Rhine and the port of Rotterdam?", None),
    ("PATH", "How are gearbox G-7 and sensor S-22 related?", None),
    ("PATH", "Is customer Orbit Ltd connected to the Dublin data centre?", None),
    ("PATH", "What is the relation between Napoleon and the island of Elba?", None),
    ("PATH", "What connects Ada Lovelace with Charles Babbage?", None),
    ("LOCAL", "What is the serial number of generator GN-5?", None),
    ("LOCAL", "Who wrote the preface of the 2020 annual report?", None),
    ("LOCAL", "What is the melting point of tungsten?", None),
    ("LOCAL", "Which city hosts the Helsinki marathon office?", None),
    ("LOCAL", "How long is the notice period in contract C-88?", None),
    ("LOCAL", "Where was Frida Kahlo born?", None),
    ("GLOBAL", "What are the broad themes of all these files?", None),
    ("GLOBAL", "Summarise everything in the collection.", None),
    ("GLOBAL", "What are the common threads across the reports?", None),
    ("GLOBAL", "Give a general overview of all the material.", None),
    ("GLOBAL", "What do the sources say overall about costs?", None),
    ("GLOBAL", "Which areas does the whole archive deal with?", None),
    ("HYBRID", "Give an overview of the contracts and explain contract C-88 in detail.", None),
    ("HYBRID", "What are the main findings, and what exactly did the audit say about the Rome office?", None),
    ("HYBRID", "Summarise the machines described and tell me which one breaks down most often.", None),
    ("HYBRID", "Describe the teams in general and the tasks of the design team.", None),
    ("HYBRID", "What topics are discussed overall, and what is said about vaccine V-1?", None),
    ("HYBRID", "Outline the product range and the price of the cheapest model.", None),
)


# ----------------------------------------------------------------------------- lexical cues

_RELATION = re.compile(r"\b(connect\w*|relat\w*|link\w*|ties?|tied|associat\w*|between|to do with|path|chain)\b", re.IGNORECASE)
_BETWEEN = re.compile(r"\bbetween\s+.+?\s+and\s+\S", re.IGNORECASE)
_FILE_WORDS = (
    r"file|document|doc|attachment|text|log|image|picture|photo|screenshot|scan|spreadsheet|sheet|"
    r"table|pdf|report|letter|e-?mail|page|draft|diagram|chart|graph|code|script|contract|invoice|"
    r"csv|paper|notes?|slides?|presentation|form|list|cv|resume|transcript|recording|message"
)
_ATTACHMENT_REFERENCE = re.compile(
    rf"\b(attach\w*|upload\w*|enclosed|(this|these|that|my|the)\s+(\w+\s+)?({_FILE_WORDS})s?"
    r"|i\s+(just\s+)?(sent|shared|gave|added))\b",
    re.IGNORECASE,
)
_CONVERSATION_REFERENCE = re.compile(
    r"\b(you\s+(just\s+)?(said|told|wrote|mentioned|answered|gave)|(your|the|that)\s+(last|previous|earlier)\s+"
    r"(answer|reply|response|message)|(previous|last)\s+(answer|reply|response)|your\s+(answer|reply|response)|"
    r"(the|that)\s+answer\s+above|above|that\s+again)\b",
    re.IGNORECASE,
)
_REQUEST_SPLIT = re.compile(
    r",\s*and\s+|;\s*|\s+and\s+then\s+|,?\s+then\s+|\s+and\s+(?=(?:name|explain|say|tell|list|give|describe|identify"
    r"|state|show|what|which|who|how|when|where|why)\b)",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"[\w/][\w\-/.']*[\w]|[\w]")


def extract_entities(question: str) -> tuple[str, ...]:
    """Named things in a question by a lexical rule: runs of capitalised words (not the first
    word) or tokens with a digit (codes such as ``P-12``, ``/v2/returns``).

    A light heuristic for the trace and for PATH's two ends; the graph search finds its
    starting entities by meaning anyway.

    Returns:
        The mentions in order of appearance, without duplicates.
    """
    spans: list[str] = []
    current: list[str] = []
    for i, match in enumerate(_TOKEN.finditer(question)):
        token = match.group(0)
        is_code = any(c.isdigit() for c in token)
        is_name = i > 0 and token[0].isupper() and token != "I"  # the first word is capitalised anyway
        if is_code or is_name:
            current.append(token)
            continue
        if current:
            spans.append(" ".join(current))
            current = []
    if current:
        spans.append(" ".join(current))
    return tuple(dict.fromkeys(spans))


def split_requests(question: str) -> list[str]:
    """The separate requests of one question (``"summarise X, and what did Y say"`` → two).

    Splits at ``", and"``, ``";"``, ``"then"`` and ``"and"`` followed by a verb or question word;
    an ``"and"`` inside a noun phrase (``"A and B"``) does not split.
    """
    return [part.strip() for part in _REQUEST_SPLIT.split(question) if part and part.strip()]


def refers_to_attachment(question: str) -> bool:
    """True when the question points at a file: "attached", "uploaded", "this log", "the file I sent"."""
    return bool(_ATTACHMENT_REFERENCE.search(question))


def refers_to_conversation(question: str) -> bool:
    """True when the question points at the chat: "what you just said", "the previous answer", "above"."""
    return bool(_CONVERSATION_REFERENCE.search(question))


def has_path_cue(question: str) -> bool:
    """Relation words and two named things (or ``between X and Y``)."""
    if not _RELATION.search(question):
        return False
    return bool(_BETWEEN.search(question)) or len(extract_entities(question)) >= 2
