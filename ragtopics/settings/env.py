"""Process settings read from the environment (the only module that reads it).

Every variable is a field below with its alias (the variable name), default and a
one-line description; ``docs/settings.md`` is generated from them and ``.env.example``
is checked against them by the tests. A component receives its own slice (:class:`RedisSettings`, :class:`ModelEndpoint`,
...) rather than the whole object.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragtopics.errors import ConfigurationError

#: Model roles; every role without an endpoint of its own uses the Language Model's (``LLM_*``).
#: Each role after ``language_model`` has ``<ROLE>_BASE_URL``, ``_MODEL``, ``_API_KEY``,
#: ``_SUPPORTS_TOOLS`` and ``_SUPPORTS_IMAGES`` fields in :class:`Settings`.
ROLES: tuple[str, ...] = (
    "language_model",
    "router",
    "graph_extraction",
    "deduplication",
    "image_describer",
    "community_report",
    "follow_up",
    "judge",
)

LOCAL_MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """An OpenAI-compatible endpoint for one model role.

    Attributes:
        role: one of :data:`ROLES` or ``"embedding"``.
        base_url: e.g. ``http://127.0.0.1:18080/v1``; ``None`` for the in-process embedder.
        model: the model name sent with each request.
        api_key: bearer token; local servers accept any value.
        timeout_s: per-request timeout in seconds.
        supports_tools: whether the model may be given OpenAI tool definitions.
        supports_images: whether the model accepts image parts.
        is_bundled: whether the role is served by the bundled model server that
            ``ragtopics up`` starts (no ``LLM_BASE_URL`` and no endpoint of the role's own).
    """

    role: str
    base_url: str | None
    model: str
    api_key: str
    timeout_s: float
    supports_tools: bool = False
    supports_images: bool = False
    is_bundled: bool = False

    @property
    def is_local(self) -> bool:
        """True when the endpoint is the bundled model (its server, or the in-process embedder).

        Also true for an endpoint that serves the bundled model under its own name
        (``ragtopics serve-model`` run separately), since its abilities are the same.
        """
        return self.is_bundled or self.base_url is None or self.model == LOCAL_MODEL_NAME


def _role_url(prefix: str) -> Any:
    return Field(
        None,
        alias=f"{prefix}_BASE_URL",
        description=f"Endpoint of the {prefix} role; unset: the Language Model's endpoint (needs {prefix}_MODEL).",
    )


def _role_model(prefix: str) -> Any:
    return Field(None, alias=f"{prefix}_MODEL", description=f"Model name sent for the {prefix} role; unset: LLM_MODEL.")


def _role_key(prefix: str) -> Any:
    return Field(
        None,
        alias=f"{prefix}_API_KEY",
        description=f"API key of {prefix}_BASE_URL; unset: LLM_API_KEY without an own endpoint, else not-needed.",
    )


def _role_flag(prefix: str, ability: str) -> Any:
    return Field(
        None,
        alias=f"{prefix}_SUPPORTS_{ability.upper()}",
        description=f"Whether the {prefix} role's model accepts {ability}; unset: LLM_SUPPORTS_{ability.upper()} "
        "without an own endpoint, else false.",
    )


class Settings(BaseSettings):
    """Environment settings of one ragtopics process, read from the environment and ``.env``.

    Every field has an alias (the variable name) and a description; ``docs/settings.md``
    and ``.env.example`` are checked against them by the tests.

    Raises:
        pydantic.ValidationError: when a variable has a value of the wrong type.
        ConfigurationError: when a role has ``<ROLE>_BASE_URL`` but no ``<ROLE>_MODEL``, or ``FILE_STORE=s3``
            has no ``S3_BUCKET``, or only one of the two S3 keys is set.
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    data_dir: Path = Field(
        default_factory=lambda: _default_data_dir(),
        alias="RAGTOPICS_DATA_DIR",
        description="Where the embedded Redis data, the SQLite metadata and uploaded files live.",
        json_schema_extra={"default_text": "var/ in the checkout"},
    )
    redis_url: str | None = Field(
        None,
        alias="REDIS_URL",
        description="An existing Redis (7.4 or later: the extraction cache expires its entries with `HEXPIRE`) "
        "with RediSearch and FalkorDB; unset: the embedded server.",
    )
    embedded_redis_port: int = Field(16379, alias="EMBEDDED_REDIS_PORT", description="Port of the embedded Redis on 127.0.0.1.")
    redis_query_timeout_ms: int = Field(
        5000, alias="REDIS_QUERY_TIMEOUT_MS", description="RediSearch query timeout in ms; a slower query fails."
    )
    falkordb_url: str | None = Field(
        None, alias="FALKORDB_URL", description="A separate FalkorDB for GraphRAG knowledge graphs; unset: the same Redis."
    )
    database_url: str | None = Field(
        None,
        alias="DATABASE_URL",
        description="SQLAlchemy URL of the metadata database (postgresql+psycopg://USER:PASS@HOST/DB); "
        "unset: SQLite under the data dir.",
    )
    file_store: Literal["local", "s3"] = Field(
        "local",
        alias="FILE_STORE",
        description="Where original files and pictures are kept: local (the data dir's "
        "files/ folder) or s3 (an S3-compatible object store every machine reaches).",
    )
    s3_endpoint_url: str | None = Field(
        None, alias="S3_ENDPOINT_URL", description="URL of the S3-compatible object store (http://minio:9000); unset: AWS S3."
    )
    s3_bucket: str | None = Field(
        None, alias="S3_BUCKET", description="Bucket of the object store that holds the files (needed with FILE_STORE=s3)."
    )
    s3_prefix: str = Field("", alias="S3_PREFIX", description="Key prefix of every object in S3_BUCKET; empty: the bucket root.")
    s3_access_key_id: str | None = Field(
        None, alias="S3_ACCESS_KEY_ID", description="Access key of the object store; unset: boto3's usual credential chain."
    )
    s3_secret_access_key: str | None = Field(
        None, alias="S3_SECRET_ACCESS_KEY", description="Secret key that goes with S3_ACCESS_KEY_ID."
    )
    s3_region: str = Field("us-east-1", alias="S3_REGION", description="Region name sent to the object store.")

    llm_base_url: str | None = Field(
        None, alias="LLM_BASE_URL", description="OpenAI-compatible endpoint of the Language Model; unset: the bundled model."
    )
    llm_api_key: str = Field("not-needed", alias="LLM_API_KEY", description="API key of LLM_BASE_URL.")
    llm_model: str = Field(LOCAL_MODEL_NAME, alias="LLM_MODEL", description="Model name sent to LLM_BASE_URL.")
    llm_timeout_s: float = Field(
        120.0, alias="LLM_TIMEOUT_S", description="Seconds before a model request times out (every role)."
    )
    llm_max_tokens: int = Field(
        512, ge=16, alias="LLM_MAX_TOKENS", description="Most tokens a model may write in one reply without its own cap."
    )
    llm_supports_tools: bool = Field(
        False, alias="LLM_SUPPORTS_TOOLS", description="Whether the Language Model accepts OpenAI tool definitions."
    )
    llm_supports_images: bool = Field(
        False, alias="LLM_SUPPORTS_IMAGES", description="Whether the Language Model accepts image parts (vision)."
    )
    local_llm_port: int = Field(18080, alias="LOCAL_LLM_PORT", description="Port of the bundled model server on 127.0.0.1.")
    local_llm_context_tokens: int = Field(
        8192, alias="LOCAL_LLM_CONTEXT_TOKENS", description="Context window of the bundled model server, in tokens."
    )
    local_llm_threads: int = Field(
        0, alias="LOCAL_LLM_THREADS", description="CPU threads of the bundled model server; 0: all cores."
    )
    local_llm_repeat_penalty: float = Field(
        1.0,
        ge=1.0,
        le=2.0,
        alias="LOCAL_LLM_REPEAT_PENALTY",
        description="llama.cpp's repeat penalty for the bundled model's replies "
        "(1.0: none, the measured best; see BENCHMARKS.md).",
    )
    local_llm_temperature: float | None = Field(
        None,
        ge=0.0,
        le=2.0,
        alias="LOCAL_LLM_TEMPERATURE",
        description="Sampling temperature of the bundled model's written answers; unset: the product's 0.2 for every model.",
    )

    router_base_url: str | None = _role_url("ROUTER")
    router_model: str | None = _role_model("ROUTER")
    router_api_key: str | None = _role_key("ROUTER")
    router_supports_tools: bool | None = _role_flag("ROUTER", "tools")
    router_supports_images: bool | None = _role_flag("ROUTER", "images")
    graph_extraction_base_url: str | None = _role_url("GRAPH_EXTRACTION")
    graph_extraction_model: str | None = _role_model("GRAPH_EXTRACTION")
    graph_extraction_api_key: str | None = _role_key("GRAPH_EXTRACTION")
    graph_extraction_supports_tools: bool | None = _role_flag("GRAPH_EXTRACTION", "tools")
    graph_extraction_supports_images: bool | None = _role_flag("GRAPH_EXTRACTION", "images")
    deduplication_base_url: str | None = _role_url("DEDUPLICATION")
    deduplication_model: str | None = _role_model("DEDUPLICATION")
    deduplication_api_key: str | None = _role_key("DEDUPLICATION")
    deduplication_supports_tools: bool | None = _role_flag("DEDUPLICATION", "tools")
    deduplication_supports_images: bool | None = _role_flag("DEDUPLICATION", "images")
    image_describer_base_url: str | None = _role_url("IMAGE_DESCRIBER")
    image_describer_model: str | None = _role_model("IMAGE_DESCRIBER")
    image_describer_api_key: str | None = _role_key("IMAGE_DESCRIBER")
    image_describer_supports_tools: bool | None = _role_flag("IMAGE_DESCRIBER", "tools")
    image_describer_supports_images: bool | None = _role_flag("IMAGE_DESCRIBER", "images")
    community_report_base_url: str | None = _role_url("COMMUNITY_REPORT")
    community_report_model: str | None = _role_model("COMMUNITY_REPORT")
    community_report_api_key: str | None = _role_key("COMMUNITY_REPORT")
    community_report_supports_tools: bool | None = _role_flag("COMMUNITY_REPORT", "tools")
    community_report_supports_images: bool | None = _role_flag("COMMUNITY_REPORT", "images")
    follow_up_base_url: str | None = _role_url("FOLLOW_UP")
    follow_up_model: str | None = _role_model("FOLLOW_UP")
    follow_up_api_key: str | None = _role_key("FOLLOW_UP")
    follow_up_supports_tools: bool | None = _role_flag("FOLLOW_UP", "tools")
    follow_up_supports_images: bool | None = _role_flag("FOLLOW_UP", "images")
    judge_base_url: str | None = _role_url("JUDGE")
    judge_model: str | None = _role_model("JUDGE")
    judge_api_key: str | None = _role_key("JUDGE")
    judge_supports_tools: bool | None = _role_flag("JUDGE", "tools")
    judge_supports_images: bool | None = _role_flag("JUDGE", "images")

    embedding_base_url: str | None = Field(
        None,
        alias="EMBEDDING_BASE_URL",
        description="OpenAI-compatible /v1/embeddings endpoint; unset: the bundled model on CPU.",
    )
    embedding_api_key: str = Field("not-needed", alias="EMBEDDING_API_KEY", description="API key of EMBEDDING_BASE_URL.")
    embedding_model: str = Field(
        "all-MiniLM-L6-v2",
        alias="EMBEDDING_MODEL",
        description="Embedding model name; each Topic's index records the model it was built with.",
    )
    embedding_dim: int = Field(384, alias="EMBEDDING_DIM", description="Dimension of the vectors the embedding model returns.")
    embedding_batch_size: int = Field(
        64, alias="EMBEDDING_BATCH_SIZE", description="Texts per embedding request or forward pass."
    )

    host: str = Field("127.0.0.1", alias="HOST", description="Address the console listens on.")
    port: int = Field(7860, alias="PORT", description="Port the console listens on.")
    share: bool = Field(
        False,
        alias="GRADIO_SHARE",
        description="Ask Gradio for a public share link (needs the internet and an admin; login is then required).",
    )
    public_base_url: str | None = Field(
        None,
        alias="PUBLIC_BASE_URL",
        description="The address people reach the console at, e.g. https://rag.example.com/ behind a reverse proxy; demo links are printed with it. Unset: the address of the request (forwarded headers honoured).",
    )
    admin_username: str | None = Field(
        None,
        alias="ADMIN_USERNAME",
        description="The first admin, created at start when no user has that name; with no admin at all the console serves on loopback only, without login.",
    )
    admin_password: str | None = Field(
        None,
        alias="ADMIN_PASSWORD",
        description="Password of ADMIN_USERNAME (at least 8 characters); used only when that user is created.",
    )
    dev_report_retention_days: int = Field(
        7, ge=1, alias="DEV_REPORT_RETENTION_DAYS", description="Days a DEV report is kept before it is deleted."
    )
    session_ttl_s: int = Field(
        43_200, ge=60, alias="SESSION_TTL_S", description="Seconds a console login lasts without activity."
    )
    queue_name: str = Field("ragtopics", alias="RQ_QUEUE", description="Name of the RQ job queue.")
    job_timeout_s: int = Field(3600, alias="JOB_TIMEOUT_S", description="Longest a job may run, in seconds.")
    worker_heartbeat_s: int = Field(
        10,
        ge=1,
        le=600,
        alias="WORKER_HEARTBEAT_S",
        description="Seconds between a worker's signs of life, also while it runs a job; a worker silent for three of "
        "them is dead, and the next worker's maintenance pass (also every this many seconds) queues its job again.",
    )
    max_chunks_per_document: int = Field(
        20_000,
        ge=1,
        alias="MAX_CHUNKS_PER_DOCUMENT",
        description="Most chunks one file may give; a larger file is refused before any model call.",
    )
    extraction_concurrency: int = Field(
        4,
        ge=1,
        le=256,
        alias="EXTRACTION_CONCURRENCY",
        description="Most graph extraction jobs running at once per model endpoint, across all workers.",
    )
    extraction_batch_chunks: int = Field(
        8,
        ge=1,
        le=1000,
        alias="EXTRACTION_BATCH_CHUNKS",
        description="Chunks per graph extraction job (a GraphRAG upload fans out into such jobs).",
    )
    log_level: str = Field("INFO", alias="LOG_LEVEL", description="Python logging level of every process.")
    otel_exporter_otlp_endpoint: str | None = Field(
        None,
        alias="OTEL_EXPORTER_OTLP_ENDPOINT",
        description="OpenTelemetry collector (OTLP/HTTP, e.g. http://127.0.0.1:4318) "
        "that receives a span tree per upload, chat turn and community rebuild; "
        "unset: no traces are exported.",
    )
    otel_record_content: bool = Field(
        False,
        alias="OTEL_RECORD_CONTENT",
        description="Put questions, answers, chunk text and model messages into exported "
        "spans; off: only ids, sizes, counts and timings (the text is sensitive).",
    )
    otel_service_name: str = Field(
        "ragtopics",
        alias="OTEL_SERVICE_NAME",
        description="service.name of the exported spans (tell the console from the workers).",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any, info: ValidationInfo) -> Any:
        """``ROUTER_BASE_URL=`` in ``.env`` means unset, as a commented line does."""
        if value == "" and info.field_name and cls.model_fields[info.field_name].default is None:
            return None
        return value

    @field_validator("public_base_url")
    @classmethod
    def _public_base_url(cls, value: str | None) -> str | None:
        """An http(s) URL with a host (its path kept: a proxy may serve the console under one)."""
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(
                f"PUBLIC_BASE_URL must be an http:// or https:// address such as https://rag.example.com/, got {value!r}"
            )
        return value.strip().rstrip("/") + "/"

    @model_validator(mode="after")
    def _role_models_named(self) -> Settings:
        for role in ROLES[1:]:
            if getattr(self, f"{role}_base_url") and not getattr(self, f"{role}_model"):
                prefix = role.upper()
                raise ConfigurationError(
                    f"{prefix}_BASE_URL is set but {prefix}_MODEL is not: set {prefix}_MODEL to the "
                    f"name of the model that {getattr(self, f'{role}_base_url')} serves, or unset "
                    f"{prefix}_BASE_URL to use the Language Model"
                )
        return self

    @model_validator(mode="after")
    def _object_store_complete(self) -> Settings:
        if self.file_store == "s3" and not self.s3_bucket:
            raise ConfigurationError(
                "FILE_STORE=s3 needs S3_BUCKET: set it to the bucket that holds the files "
                "(and S3_ENDPOINT_URL to the object store's URL unless it is AWS S3)"
            )
        if bool(self.s3_access_key_id) != bool(self.s3_secret_access_key):
            raise ConfigurationError("set both S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY, or neither (boto3's credential chain)")
        return self

    @property
    def is_redis_embedded(self) -> bool:
        """True when no ``REDIS_URL`` is set and the embedded server is used."""
        return not self.redis_url

    @property
    def effective_redis_url(self) -> str:
        """``REDIS_URL``, or the embedded server's loopback address."""
        return self.redis_url or f"redis://127.0.0.1:{self.embedded_redis_port}/0"

    @property
    def is_llm_local(self) -> bool:
        """True when no ``LLM_BASE_URL`` is set and the bundled model server is used."""
        return not self.llm_base_url

    @property
    def effective_database_url(self) -> str:
        """``DATABASE_URL``, or a SQLite file under the data directory."""
        return self.database_url or f"sqlite:///{self.data_dir.resolve() / 'ragtopics.db'}"

    def has_own_endpoint(self, role: str) -> bool:
        """Whether ``role`` has its own ``<ROLE>_BASE_URL`` (else it uses the Language Model's endpoint)."""
        return getattr(self, f"{role}_base_url", None) is not None

    def endpoint(self, role: str) -> ModelEndpoint:
        """Return the endpoint for ``role``.

        A role's own ``<ROLE>_BASE_URL`` / ``_MODEL`` / ``_API_KEY`` / ``_SUPPORTS_TOOLS`` /
        ``_SUPPORTS_IMAGES`` variables override the Language Model's (``LLM_*``). A role
        without its own base URL uses the Language Model's endpoint, key and capability
        flags (a ``<ROLE>_MODEL`` alone names another model on that endpoint); a role with
        its own base URL is assumed to support neither tools nor images unless its flags
        say so. ``embedding`` has its own variables.

        Raises:
            ConfigurationError: for an unknown role.
        """
        if role == "embedding":
            return ModelEndpoint(
                role=role,
                base_url=self.embedding_base_url,
                model=self.embedding_model,
                api_key=self.embedding_api_key,
                timeout_s=self.llm_timeout_s,
                is_bundled=self.embedding_base_url is None,
            )
        if role not in ROLES:
            raise ConfigurationError(f"unknown model role {role!r}; known roles: {', '.join(ROLES)}")
        own = {f: getattr(self, f"{role}_{f}", None) for f in _ROLE_FIELDS}
        inherits = own["base_url"] is None
        return ModelEndpoint(
            role=role,
            base_url=own["base_url"] or self.llm_base_url or f"http://127.0.0.1:{self.local_llm_port}/v1",
            model=own["model"] or self.llm_model,
            api_key=own["api_key"] or (self.llm_api_key if inherits else "not-needed"),
            timeout_s=self.llm_timeout_s,
            supports_tools=_flag(own["supports_tools"], self.llm_supports_tools if inherits else False),
            supports_images=_flag(own["supports_images"], self.llm_supports_images if inherits else False),
            is_bundled=inherits and self.is_llm_local,
        )


_ROLE_FIELDS = ("base_url", "model", "api_key", "supports_tools", "supports_images")


def _flag(own: bool | None, inherited: bool) -> bool:
    return inherited if own is None else own


def _default_data_dir() -> Path:
    """``var/`` of the source checkout the code runs from (so every process and every working
    directory shares one data directory); ``./var`` for an installed package."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").exists() and (checkout / "ragtopics").is_dir():
        return checkout / "var"
    return Path("var").resolve()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process settings, read once from the environment and ``.env``."""
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests change the environment between cases)."""
    get_settings.cache_clear()
