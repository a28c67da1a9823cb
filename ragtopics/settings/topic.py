"""Topic settings: one pydantic model per Topic kind, keys and defaults as in SETTINGS.md.

Keys are the specification's names in snake_case and values are spelled as the
specification spells them (``retrieval_strategy=HYBRID``). The CLI's ``--set
key=value`` strings, the console's form values and the JSON stored in SQL all go
through :func:`parse_assignments` / :meth:`RagTopicSettings.model_validate`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragtopics.errors import InvalidSettingError
from ragtopics.ingest.readers import SUPPORTED_EXTENSIONS

DEFAULT_NO_ANSWER = "I could not find this in the documents of this Topic."


class ImportStrategy(str, Enum):
    FLATTEN = "FLATTEN"
    NARRATE = "NARRATE"


class ChunkingStrategy(str, Enum):
    RECURSIVE = "RECURSIVE"
    SEMANTIC = "SEMANTIC"


class RetrievalStrategy(str, Enum):
    DENSE = "DENSE"
    HYBRID = "HYBRID"


class KeywordEnrichment(str, Enum):
    ALGORITHMIC = "ALGORITHMIC"
    LLM = "LLM"


class RerankingStrategy(str, Enum):
    NONE = "NONE"
    LLM = "LLM"


class DoclingSettings(BaseModel):
    """Docling Settings (advanced): passed through to the converter."""

    model_config = ConfigDict(extra="forbid")
    ocr: bool = False
    table_structure: bool = True
    page_range: str = ""
    timeout_s: int = Field(300, ge=1)


class RagTopicSettings(BaseModel):
    """Every setting of a RAG Topic, with the defaults of SETTINGS.md.

    Raises:
        pydantic.ValidationError: on an unknown key or an out-of-range value
            (wrapped into :class:`InvalidSettingError` by :func:`validate_settings`).
    """

    model_config = ConfigDict(extra="forbid", use_enum_values=True, validate_assignment=True)

    custom_system_prompt: str = ""
    file_types: list[str] = Field(default_factory=lambda: sorted(SUPPORTED_EXTENSIONS))
    max_file_size_mb: float = Field(100.0, gt=0)
    chunk_size: int = Field(1000, ge=100, le=8000)
    chunk_overlap: int = Field(150, ge=0)
    docling_server: str = "embedded"
    docling_settings: DoclingSettings = Field(default_factory=DoclingSettings)
    embedding_model: str = "local"
    vector_database: str = "default"
    language_model: str = "local"
    memory: int = Field(10, ge=0, le=50)
    chat_attachment_types: list[str] = Field(default_factory=lambda: ["txt", "md", "pdf", "docx", "png", "jpg"])
    largest_chat_attachment_mb: float = Field(10.0, gt=0)
    no_answer_response: str = Field(DEFAULT_NO_ANSWER, min_length=1)
    import_strategy: ImportStrategy = ImportStrategy.FLATTEN
    chunking_strategy: ChunkingStrategy = ChunkingStrategy.RECURSIVE
    describe_pictures: bool = False
    store_pictures: bool = True
    show_pictures: bool = True
    retrieval_strategy: RetrievalStrategy = RetrievalStrategy.HYBRID
    keyword_enrichment: KeywordEnrichment = KeywordEnrichment.ALGORITHMIC
    rrf_k: int = Field(60, ge=1)
    top_k_results: int = Field(5, ge=1, le=50)
    min_similarity_score: float = Field(0.25, ge=0.0, le=1.0)
    reranking_strategy: RerankingStrategy = RerankingStrategy.NONE
    route_before_retrieval: bool = False
    router_confidence_threshold: float = Field(0.9, ge=0.0, le=1.0)
    mcp_interfaces: list[str] = Field(default_factory=list)

    @field_validator("file_types", "chat_attachment_types", mode="before")
    @classmethod
    def _split_extensions(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v for v in value.replace(";", ",").split(",")]
        if isinstance(value, list):
            return sorted({str(v).strip().lower().lstrip(".") for v in value if str(v).strip()})
        return value

    @field_validator("file_types")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - SUPPORTED_EXTENSIONS)
        if unknown:
            raise ValueError(f"unsupported file type(s) {', '.join(unknown)}; supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}")
        if not value:
            raise ValueError("at least one file type must be accepted")
        return value

    @field_validator("mcp_interfaces", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "RagTopicSettings":
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})")
        return self


TopicKind = Literal["rag", "graphrag"]
SETTINGS_MODELS: dict[str, type[BaseModel]] = {"rag": RagTopicSettings}


def validate_settings(kind: str, values: dict[str, Any]) -> BaseModel:
    """Validate a settings dict for a Topic kind.

    Raises:
        InvalidSettingError: with every problem, each naming its key.
    """
    model = SETTINGS_MODELS.get(kind)
    if model is None:
        raise InvalidSettingError(f"Topic kind {kind!r} is not available; available kinds: {', '.join(SETTINGS_MODELS)}")
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise InvalidSettingError(_describe(exc)) from exc


def parse_assignments(assignments: list[str]) -> dict[str, Any]:
    """Turn ``["top_k_results=8", "retrieval_strategy=DENSE"]`` into a dict of raw values.

    Values stay strings except JSON objects (``docling_settings={"ocr": true}``);
    the settings model converts them.

    Raises:
        InvalidSettingError: for an item without ``=``.
    """
    import json

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


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown setting"
        parts.append(f"{key}: {message}" if key else message)  # a rule across settings names them itself
    return "invalid Topic settings: " + "; ".join(parts)
