"""Topic settings: one pydantic model per Topic kind; the models are the settings table.

Keys are the specification's names in snake_case and values are spelled as the
specification spells them (``retrieval_strategy=HYBRID``). Every field carries its
default, its range, a one-line ``description`` and its ``phase`` (when a change takes
effect: ``upload``, ``chat``, ``upload+chat`` or ``communities``), so ``topic show``,
the console's settings form and ``docs/settings.md`` are all derived from here
(datasette-style). The CLI's ``--set key=value`` strings, the console's form values
and the JSON stored in SQL all go through :func:`parse_assignments`,
:func:`validate_settings` and :func:`load_settings`.

Model roles (Language Model, Router Model, Graph Extraction Model, ...) and the stores
are process settings (``ragtopics.settings.env``), not Topic settings.
"""

from __future__ import annotations

import json
import logging
import re
from enum import Enum
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from ragtopics.errors import InvalidSettingError
from ragtopics.settings.env import ROLES
from ragtopics.text.file_types import SUPPORTED_EXTENSIONS

log = logging.getLogger(__name__)

DEFAULT_NO_ANSWER = "I could not find this in the documents of this Topic."
#: Longest no-answer response, in characters (it is a fixed sentence, shown as the whole reply).
MAX_NO_ANSWER_CHARS = 2_000
#: Longest Custom System Prompt, in characters (sent with every question).
MAX_CUSTOM_PROMPT_CHARS = 20_000
#: Text settings whose length is limited, with their limits (see :func:`load_settings`).
STORED_TEXT_LIMITS = {"custom_system_prompt": MAX_CUSTOM_PROMPT_CHARS, "no_answer_response": MAX_NO_ANSWER_CHARS}
#: Largest upload limit a Topic may set, in MB (100 GB: an upload is read whole, so larger means no limit).
MAX_FILE_SIZE_MB = 100_000.0
#: Largest chat attachment limit, in MB (an attachment is read whole into the turn).
MAX_CHAT_ATTACHMENT_MB = 1_000.0
#: Size settings with their upper bounds (see :func:`load_settings`).
STORED_SIZE_LIMITS = {"max_file_size_mb": MAX_FILE_SIZE_MB, "largest_chat_attachment_mb": MAX_CHAT_ATTACHMENT_MB}

Phase = Literal["upload", "chat", "upload+chat", "communities"]

#: Keys that older versions stored but that never took effect; dropped when a stored Topic
#: is loaded, refused (with the reason) when set.
REMOVED_KEYS: dict[str, str] = {
    "language_model": "the Language Model is a process setting (LLM_BASE_URL, LLM_MODEL, or <ROLE>_MODEL per role)",
    "embedding_model": "the embedding model is a process setting (EMBEDDING_BASE_URL, EMBEDDING_MODEL, EMBEDDING_DIM); "
    "each Topic's index records the model it was built with",
    "vector_database": "every Topic uses the app's Redis (REDIS_URL)",
}


def setting(
    default: Any = ..., *, phase: Phase, description: str, default_factory: Any = None, default_text: str = "", **limits: Any
) -> Any:
    """A settings-table field: ``Field`` with a one-line description and the phase it applies to.

    Args:
        default: the default value (leave out when ``default_factory`` is given).
        phase: when a change takes effect.
        description: one line for the operator: what the setting changes.
        default_factory: builds a mutable default.
        default_text: how the settings reference shows the default, when not the value itself.
        **limits: pydantic constraints (``ge``, ``le``, ``gt``, ``min_length``).
    """
    extra: dict[str, Any] = {"phase": phase}
    if default_text:
        extra["default_text"] = default_text
    if default_factory is not None:
        return Field(default_factory=default_factory, description=description, json_schema_extra=extra, **limits)
    return Field(default, description=description, json_schema_extra=extra, **limits)


class ImportStrategy(str, Enum):
    """How a structured file (json, xml, yaml, toml, csv, tsv) becomes text.

    FLATTEN: each record becomes ``key: value`` lines; no model call.
    NARRATE: a model rewrites each record as a short paragraph (one call per record).
    """

    FLATTEN = "FLATTEN"
    NARRATE = "NARRATE"


class ChunkingStrategy(str, Enum):
    """How text is cut into chunks.

    RECURSIVE: cut at paragraphs, then sentences, then words; no model call.
    SEMANTIC: the same cut, then a model writes a context line for every chunk
        (contextual retrieval; one call per chunk).
    """

    RECURSIVE = "RECURSIVE"
    SEMANTIC = "SEMANTIC"


class RetrievalStrategy(str, Enum):
    """How chunks are searched.

    DENSE: vector (cosine) search of the chunk embeddings only.
    HYBRID: vector search plus BM25 over a keyword index, merged by reciprocal rank
        fusion; the keyword index is written at upload.
    """

    DENSE = "DENSE"
    HYBRID = "HYBRID"


class KeywordEnrichment(str, Enum):
    """Where the keywords of the BM25 index come from (HYBRID only).

    ALGORITHMIC: the chunk's own words; no model call.
    LLM: a model writes keywords for each chunk (one call per chunk).
    """

    ALGORITHMIC = "ALGORITHMIC"
    LLM = "LLM"


class RerankingStrategy(str, Enum):
    """Whether the candidate chunks are reranked before answering.

    NONE: keep the search order.
    LLM: collect about three times Top-K candidates and let a model sort them (one call per question).
    """

    NONE = "NONE"
    LLM = "LLM"


class RouterMethod(str, Enum):
    """How the router picks the way a question is answered.

    AUTO: EMBEDDING while the Router role is the bundled language model, LLM otherwise.
    EMBEDDING: nearest exemplar questions by the bundled embedding model; no model call.
    LLM: one call to the Router role's model.
    """

    AUTO = "AUTO"
    EMBEDDING = "EMBEDDING"
    LLM = "LLM"


class AnswerMode(str, Enum):
    """How an answer is written from the evidence.

    AUTO: EXTRACTIVE while the Language Model role is the bundled model (it cannot write
        answers worth reading), GENERATIVE otherwise.
    EXTRACTIVE: the sentences of the evidence that best answer the question, quoted with
        their citations (ranked by the embedding model; no language-model call).
    GENERATIVE: the Language Model writes the answer from the evidence.
    """

    AUTO = "AUTO"
    EXTRACTIVE = "EXTRACTIVE"
    GENERATIVE = "GENERATIVE"


class GraphExtractionMethod(str, Enum):
    """How entities and relationships are found in each chunk (GraphRAG).

    AUTO: NLP while the Graph Extraction role is the bundled language model, LLM otherwise.
    NLP: a packaged NLP library finds entities; relationships are co-occurrences in a chunk.
    LLM: the Graph Extraction role's model lists entities and relationships (one call per chunk).
    """

    AUTO = "AUTO"
    NLP = "NLP"
    LLM = "LLM"


class PictureHandling(str, Enum):
    """What a GraphRAG Topic does with pictures.

    PICTURE_IN_GRAPH: one Image node per picture, linked to the entities it shows.
    EXTRACT_ENTITIES: the picture's description is read like normal text.
    IGNORE: pictures are not used.
    """

    PICTURE_IN_GRAPH = "PICTURE_IN_GRAPH"
    EXTRACT_ENTITIES = "EXTRACT_ENTITIES"
    IGNORE = "IGNORE"


class SeedStrategy(str, Enum):
    """Where the starting entities of a LOCAL search come from (GraphRAG).

    NODES: entity names found by meaning.
    CHUNKS: chunks worded like the question, then the entities they carry.
    FUSED: both lists merged by reciprocal rank fusion.
    """

    NODES = "NODES"
    CHUNKS = "CHUNKS"
    FUSED = "FUSED"


class DoclingSettings(BaseModel):
    """Docling Settings (advanced): passed through to the converter."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    ocr: bool = Field(False, description="read pages that have no text layer (scans, faxes) with OCR (rapidocr-onnxruntime)")
    table_structure: bool = Field(True, description="recover the rows and columns of tables")
    page_range: str = Field("", description="pages to convert, e.g. 1-20; empty: all pages")
    timeout_s: int = Field(300, ge=1, description="seconds before a conversion is stopped (its process is killed)")


def _default_attachment_types() -> list[str]:
    return ["docx", "jpg", "md", "pdf", "png", "txt"]


class ChatSettings(BaseModel):
    """The settings both Topic kinds share: files and chunking at upload, then the chat phase.

    Raises:
        pydantic.ValidationError: on an unknown key or an out-of-range value
            (wrapped into :class:`InvalidSettingError` by :func:`validate_settings`).
    """

    # inf/nan are refused: JSON cannot store them, so a Topic saved with one could not be read back.
    model_config = ConfigDict(extra="forbid", use_enum_values=True, validate_assignment=True, allow_inf_nan=False)

    custom_system_prompt: str = setting(
        "",
        phase="chat",
        max_length=MAX_CUSTOM_PROMPT_CHARS,
        description="Text added to the shared system prompt; changes the wording and tone, not what is found.",
    )
    file_types: list[str] = setting(
        phase="upload",
        default_factory=lambda: sorted(SUPPORTED_EXTENSIONS),
        default_text="every supported type",
        description="File extensions the Topic accepts; any other file is refused at upload.",
    )
    max_file_size_mb: float = setting(
        100.0, phase="upload", gt=0, le=MAX_FILE_SIZE_MB, description="Largest file accepted at upload, in MB."
    )
    chunk_size: int = setting(
        1000,
        phase="upload",
        ge=100,
        le=8000,
        description="Most characters per chunk; smaller chunks give more exact sources, larger ones fewer chunks.",
    )
    chunk_overlap: int = setting(
        150, phase="upload", ge=0, description="Characters each chunk repeats from the one before; must be below chunk_size."
    )
    docling_server: str = setting(
        "embedded",
        phase="upload",
        description="Converter for pdf/docx/xlsx/pptx: 'embedded' or a docling-serve URL; without one documents are refused.",
    )
    docling_settings: DoclingSettings = setting(
        phase="upload",
        default_factory=DoclingSettings,
        description="Docling options as JSON: ocr, table_structure, page_range, timeout_s.",
    )
    memory: int = setting(
        10,
        phase="chat",
        ge=0,
        le=50,
        description="Earlier chat messages the model sees with each question; more keeps context but costs time.",
    )
    chat_attachment_types: list[str] = setting(
        phase="chat",
        default_factory=_default_attachment_types,
        description="File extensions a chat message may attach (text is read, pictures go to the model).",
    )
    largest_chat_attachment_mb: float = setting(
        10.0, phase="chat", gt=0, le=MAX_CHAT_ATTACHMENT_MB, description="Largest file a chat message may attach, in MB."
    )
    no_answer_response: str = setting(
        DEFAULT_NO_ANSWER,
        phase="chat",
        min_length=1,
        max_length=MAX_NO_ANSWER_CHARS,
        description="Fixed reply shown when no document and no connected Topic contributed to the answer.",
    )
    route_before_retrieval: bool = setting(
        False,
        phase="chat",
        description="Let a router decide per question whether to search or answer from the conversation or attachment.",
    )
    router_method: RouterMethod = setting(
        RouterMethod.AUTO,
        phase="chat",
        description="How the router decides: AUTO (EMBEDDING while the Router role is bundled, else LLM), EMBEDDING or LLM.",
    )
    answer_mode: AnswerMode = setting(
        AnswerMode.AUTO,
        phase="chat",
        description="How answers are written: AUTO (EXTRACTIVE while the Language Model role is bundled, else "
        "GENERATIVE), EXTRACTIVE (quoted sentences, no model call) or GENERATIVE (the model writes).",
    )
    mcp_interfaces: list[str] = setting(
        phase="chat",
        default_factory=list,
        description="Names of other Topics the model may ask as tools (needs a tool-capable Language Model).",
    )
    role_models: dict[str, str] = setting(
        phase="upload+chat",
        default_factory=dict,
        default_text="empty (each role's own model)",
        description="LLM Overrides: a model name per role for this Topic (role=model, comma-separated), asked on that role's endpoint.",
    )

    @field_validator("file_types", "chat_attachment_types", mode="before")
    @classmethod
    def _split_extensions(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = list(value.replace(";", ",").split(","))
        if isinstance(value, list):
            return sorted({str(v).strip().lower().lstrip(".") for v in value if str(v).strip()})
        return value

    @field_validator("file_types")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - SUPPORTED_EXTENSIONS)
        if unknown:
            raise ValueError(
                f"unsupported file type(s) {', '.join(unknown)}; supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
            )
        if not value:
            raise ValueError("at least one file type must be accepted")
        return value

    @field_validator("chat_attachment_types")
    @classmethod
    def _attachable_types(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - SUPPORTED_EXTENSIONS)
        if unknown:
            raise ValueError(
                f"unsupported attachment type(s) {', '.join(unknown)}; a chat message can attach the file "
                f"types an upload reads: {', '.join(sorted(SUPPORTED_EXTENSIONS))} (empty: no attachments)"
            )
        return value

    @field_validator("role_models", mode="before")
    @classmethod
    def _parse_role_models(cls, value: Any) -> Any:
        """``"router=small, language_model=large"`` or a JSON object; known roles only, names 1-200 characters."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                value = json.loads(text)
            else:
                pairs = [part.split("=", 1) for part in text.split(",") if part.strip()]
                if any(len(p) != 2 for p in pairs):
                    raise ValueError("write role=model pairs, comma-separated, e.g. router=small-model")
                value = {k.strip(): v.strip() for k, v in pairs}
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(ROLES))
            if unknown:
                raise ValueError(f"unknown role(s) {', '.join(unknown)}; roles: {', '.join(ROLES)}")
            if any(not isinstance(v, str) or not v.strip() or len(v) > 200 for v in value.values()):
                raise ValueError("each model name must be 1 to 200 characters")
            return {k: v.strip() for k, v in sorted(value.items())}
        return value

    @field_validator("mcp_interfaces", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChatSettings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})")
        return self


class RagTopicSettings(ChatSettings):
    """Every setting of a RAG Topic, with the defaults of the settings table (``docs/settings.md``)."""

    import_strategy: ImportStrategy = setting(
        ImportStrategy.FLATTEN,
        phase="upload",
        description="Structured files: FLATTEN records to key: value lines, or NARRATE them with a model (one call per record).",
    )
    chunking_strategy: ChunkingStrategy = setting(
        ChunkingStrategy.RECURSIVE,
        phase="upload",
        description="RECURSIVE cuts at paragraphs and sentences; SEMANTIC also adds a model-written context line per chunk.",
    )
    describe_pictures: bool = setting(
        False,
        phase="upload",
        description="Let the Image Describer role describe pictures so they become searchable text (needs a vision model).",
    )
    store_pictures: bool = setting(
        True, phase="upload", description="Keep the pictures of uploaded documents so answers can show them."
    )
    show_pictures: bool = setting(True, phase="chat", description="Show stored pictures that the answer places next to its text.")
    retrieval_strategy: RetrievalStrategy = setting(
        RetrievalStrategy.HYBRID,
        phase="upload+chat",
        description="DENSE: vector search only; HYBRID: vector plus BM25 keyword search (index written at upload).",
    )
    keyword_enrichment: KeywordEnrichment = setting(
        KeywordEnrichment.ALGORITHMIC,
        phase="upload",
        description="HYBRID keywords: ALGORITHMIC uses the chunk's words, LLM asks a model per chunk.",
    )
    rrf_k: int = setting(
        60, phase="chat", ge=1, description="Reciprocal rank fusion constant k used to merge the vector and BM25 rankings."
    )
    top_k_results: int = setting(
        5, phase="chat", ge=1, le=50, description="Most chunks given to the model; higher: fuller but slower, noisier answers."
    )
    min_similarity_score: float = setting(
        0.25,
        phase="chat",
        ge=0.0,
        le=1.0,
        description="Vector hits below this cosine similarity are dropped (HYBRID keyword hits and followed file mentions "
        "qualify by their match); higher: closer matches, more no-answers.",
    )
    follow_file_mentions: bool = setting(
        True,
        phase="chat",
        description='A file named in one of the first 3 chunks found (e.g. "Leland, North Carolina" for '
        "Leland, North Carolina.txt) adds its best chunk right after it: a second hop for questions that span two files.",
    )
    reranking_strategy: RerankingStrategy = setting(
        RerankingStrategy.NONE,
        phase="chat",
        description="NONE keeps the search order; LLM lets a model sort about 3x Top-K candidates (one call; "
        "not made while the bundled model serves the Language Model role).",
    )
    router_confidence_threshold: float = setting(
        0.9,
        phase="chat",
        ge=0.0,
        le=1.0,
        description="Router confidence needed to skip the search; below it the question is searched.",
    )


class GraphRagTopicSettings(ChatSettings):
    """Every setting of a GraphRAG Topic, with the defaults of the settings table (``docs/settings.md``)."""

    chunk_size: int = setting(
        1200,
        phase="upload",
        ge=100,
        le=8000,
        description="Most characters per chunk; larger: fewer extraction calls but missed details (1000-2000 works well).",
    )
    route_before_retrieval: bool = setting(
        True,
        phase="chat",
        description="Let the router pick the way per question (DIRECT, ATTACHMENT, PATH, LOCAL, GLOBAL, HYBRID).",
    )
    graph_extraction_method: GraphExtractionMethod = setting(
        GraphExtractionMethod.AUTO,
        phase="upload",
        description="How entities and relationships are found: AUTO (NLP while the role is bundled, else LLM), NLP or LLM.",
    )
    collection_name: str = setting(
        "", phase="upload+chat", description="Name of the Topic's graph and vector collection; empty: the Topic's id."
    )
    graph_database: str = setting(
        "",
        phase="upload+chat",
        description="Registered FalkorDB (Admin → Graph Databases) that holds the Topic's graph; empty: the app's Redis.",
    )
    picture_handling: PictureHandling = setting(
        PictureHandling.PICTURE_IN_GRAPH,
        phase="upload",
        description="PICTURE_IN_GRAPH: an Image node linked to its entities; EXTRACT_ENTITIES: description read as text; IGNORE.",
    )
    local_keyword_search: bool = setting(
        True, phase="upload+chat", description="Also write and search a keyword index for LOCAL search (entities and chunks)."
    )
    global_keyword_search: bool = setting(
        True, phase="upload+chat", description="Also write and search a keyword index for GLOBAL search (community reports)."
    )
    refresh_cycle: str = setting(
        "1d", phase="communities", description="How often communities are rebuilt: 'off' or an interval such as 30m, 6h, 1d."
    )
    resolution: float = setting(
        1.0,
        phase="communities",
        gt=0.0,
        le=10.0,
        description="Leiden resolution: higher gives more, smaller communities (0.5-2.0 is the useful range).",
    )
    confidence_threshold: float = setting(
        0.6, phase="chat", ge=0.0, le=1.0, description="Router confidence needed for its way; below it HYBRID is taken."
    )
    direct_confidence_threshold: float = setting(
        0.9, phase="chat", ge=0.0, le=1.0, description="Router confidence needed to answer DIRECT without any search."
    )
    answer_without_searching: bool = setting(
        True, phase="chat", description="Allow the DIRECT way (answers from the conversation alone, no sources)."
    )
    path_max_hops: int = setting(
        4, phase="chat", ge=1, le=8, description="Longest chain of relationships a PATH search follows between two entities."
    )
    seed_strategy: SeedStrategy = setting(
        SeedStrategy.FUSED,
        phase="chat",
        description="Where LOCAL starting entities come from: NODES, CHUNKS or FUSED (both, merged by rank).",
    )
    top_k_nodes: int = setting(10, phase="chat", ge=1, le=100, description="How many starting entities a LOCAL search takes.")
    min_similarity_score: float = setting(
        0.25,
        phase="chat",
        ge=0.0,
        le=1.0,
        description="Seed entities, seed chunks and community reports below this cosine similarity are dropped (chunks "
        "reached through the graph or a file mention qualify by that link).",
    )
    hop_depth: int = setting(1, phase="chat", ge=0, le=4, description="Relationship steps followed from the starting entities.")
    max_subgraph_nodes: int = setting(
        60, phase="chat", ge=1, le=500, description="Most entities collected around the starting entities."
    )
    max_cited_chunks: int = setting(
        8, phase="chat", ge=1, le=50, description="Most chunks an answer is written from (and so the most sources it shows)."
    )
    top_k_seed_chunks: int = setting(
        5, phase="chat", ge=0, le=50, description="Chunks searched to find starting entities (CHUNKS and FUSED)."
    )
    top_k_unlinked_chunks: int = setting(
        3, phase="chat", ge=0, le=50, description="Extra chunks that no entity carries, e.g. tables the extraction missed."
    )
    follow_file_mentions: bool = setting(
        True,
        phase="chat",
        description='LOCAL: a file named in one of the first 3 chunks ranked (e.g. "Leland, North Carolina" for '
        "Leland, North Carolina.txt) adds its best chunk right after it: a second hop for questions that span two files.",
    )
    top_k_reports: int = setting(
        5, phase="chat", ge=1, le=50, description="Community reports read by GLOBAL and HYBRID; each costs one model call."
    )
    max_follow_up_rounds: int = setting(2, phase="chat", ge=0, le=5, description="Rounds of follow-up questions HYBRID may plan.")
    max_follow_up_questions: int = setting(
        3, phase="chat", ge=1, le=10, description="Follow-up questions per round, each answered by a LOCAL search."
    )

    @field_validator("refresh_cycle")
    @classmethod
    def _interval(cls, value: str) -> str:
        value = value.strip().lower()
        if value != "off" and not re.fullmatch(r"[1-9]\d*[mhd]", value):
            raise ValueError(f"{value!r} is not 'off' or an interval such as 30m, 6h or 1d")
        return value

    @property
    def refresh_interval_s(self) -> int | None:
        """The Refresh Cycle in seconds; ``None`` when it is ``off``."""
        if self.refresh_cycle == "off":
            return None
        return int(self.refresh_cycle[:-1]) * {"m": 60, "h": 3600, "d": 86400}[self.refresh_cycle[-1]]


TopicKind = Literal["rag", "graphrag"]
TopicSettings = RagTopicSettings | GraphRagTopicSettings
SETTINGS_MODELS: dict[str, type[TopicSettings]] = {"rag": RagTopicSettings, "graphrag": GraphRagTopicSettings}


def settings_model(kind: str) -> type[TopicSettings]:
    """The settings model of a Topic kind.

    Raises:
        InvalidSettingError: for an unknown kind.
    """
    model = SETTINGS_MODELS.get(kind)
    if model is None:
        raise InvalidSettingError(f"Topic kind {kind!r} is not available; available kinds: {', '.join(SETTINGS_MODELS)}")
    return model


def validate_settings(kind: str, values: dict[str, Any]) -> TopicSettings:
    """Validate a settings dict for a Topic kind (missing keys take their defaults).

    Raises:
        InvalidSettingError: for an unknown kind, or with every problem, each naming its key.
    """
    model = settings_model(kind)
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise InvalidSettingError(_describe(exc, model)) from exc


def load_settings(kind: str, stored: dict[str, Any]) -> TopicSettings:
    """Validate settings read back from storage, dropping keys of :data:`REMOVED_KEYS`.

    Chat attachment types stored before they were checked are kept only when supported, texts
    stored before their length was limited (:data:`STORED_TEXT_LIMITS`) are cut to the limit, and
    sizes stored before their bound (:data:`STORED_SIZE_LIMITS`) are lowered to it, each with a
    warning in the log: a Topic saved by an older version always opens.

    Raises:
        InvalidSettingError: as :func:`validate_settings`, for any other problem.
    """
    legacy = sorted(set(stored) & set(REMOVED_KEYS))
    if legacy:
        log.info("ignoring removed Topic setting(s) %s", ", ".join(legacy))
    values = {k: v for k, v in stored.items() if k not in REMOVED_KEYS}
    types = values.get("chat_attachment_types")
    if isinstance(types, list):  # stored before attachment types were checked: unknown ones are dropped, not fatal
        kept = [t for t in types if str(t).strip().lower().lstrip(".") in SUPPORTED_EXTENSIONS]
        if len(kept) < len(types):
            log.warning("ignoring unsupported chat attachment type(s) %s", ", ".join(map(str, sorted(set(types) - set(kept)))))
            values["chat_attachment_types"] = kept
    for key, limit in STORED_TEXT_LIMITS.items():
        text = values.get(key)
        if isinstance(text, str) and len(text) > limit:
            log.warning(
                "Topic setting %s was %d characters long, over the limit of %d; using its first %d", key, len(text), limit, limit
            )
            values[key] = text[:limit]
    for key, bound in STORED_SIZE_LIMITS.items():
        size = values.get(key)
        if isinstance(size, (int, float)) and not isinstance(size, bool) and size > bound:  # stored before the bound
            log.warning("Topic setting %s was %g MB, over the limit of %g MB; using %g", key, size, bound, bound)
            values[key] = bound
    return validate_settings(kind, values)


def phase_of(model: type[BaseModel], key: str) -> str:
    """The phase a setting applies to (``upload``, ``chat``, ``upload+chat``, ``communities``)."""
    extra = model.model_fields[key].json_schema_extra
    return str(extra.get("phase", "")) if isinstance(extra, dict) else ""


def parse_assignments(assignments: list[str]) -> dict[str, Any]:
    """Turn ``["top_k_results=8", "retrieval_strategy=DENSE"]`` into a dict of raw values.

    Values stay strings except JSON objects (``docling_settings={"ocr": true}``);
    the settings model converts them.

    Raises:
        InvalidSettingError: for an item without ``=``.
    """
    values: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InvalidSettingError(f"setting {item!r} is not of the form key=value")
        raw = raw.strip()
        try:
            values[key.strip()] = json.loads(raw) if raw.startswith(("{", "[")) else raw
        except json.JSONDecodeError as exc:
            raise InvalidSettingError(f"setting {key.strip()}: {raw!r} is not valid JSON ({exc.msg})") from exc
    return values


def allowed_range(field: FieldInfo) -> str:
    """A numeric field's bounds as the operator reads them: ``1–50``, ``≥ 0``, ``> 0``; "" when unbounded."""
    low = high = None
    for item in field.metadata:
        if isinstance(item, (annotated_types.Ge, annotated_types.Gt)):
            low = ("> " if isinstance(item, annotated_types.Gt) else "") + f"{getattr(item, 'ge', getattr(item, 'gt', None)):g}"
        elif isinstance(item, (annotated_types.Le, annotated_types.Lt)):
            high = f"{getattr(item, 'le', getattr(item, 'lt', None)):g}"
    if low is not None and high is not None:
        return f"{low}–{high}" if not low.startswith(">") else f"{low}, ≤ {high}"
    if low is not None:
        return f"≥ {low}" if not low.startswith(">") else low
    return f"≤ {high}" if high is not None else ""


#: pydantic error types of a number outside its bounds.
_BOUND_ERRORS = frozenset({"greater_than_equal", "greater_than", "less_than_equal", "less_than"})


def _describe(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"this setting was removed: {REMOVED_KEYS[key]}" if key in REMOVED_KEYS else "unknown setting"
        elif err["type"] in _BOUND_ERRORS and model is not None and key in model.model_fields:
            span = allowed_range(model.model_fields[key])
            message = f"{err.get('input')} is outside the allowed range {span}" if span else message
        elif err["type"] == "string_too_long":
            message = f"{len(err.get('input', '')):,} characters long; at most {err['ctx']['max_length']:,} are allowed"
        parts.append(f"{key}: {message}" if key else message)  # a rule across settings names them itself
    return "invalid Topic settings: " + "; ".join(parts)
