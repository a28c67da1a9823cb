"""Process settings read from the environment (the only module that reads it).

Every variable is listed, with its default and meaning, in ``.env.example``.
A component receives its own slice (:class:`RedisSettings`, :class:`ModelEndpoint`,
...) rather than the whole object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Model roles; every role without an endpoint of its own uses LANGUAGE_MODEL's.
ROLES: tuple[str, ...] = (
    "language_model",
    "router",
    "graph_extraction",
    "deduplication",
    "image_describer",
    "community_report",
    "follow_up",
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
    """

    role: str
    base_url: str | None
    model: str
    api_key: str
    timeout_s: float
    supports_tools: bool = False
    supports_images: bool = False

    @property
    def is_local(self) -> bool:
        """True when the endpoint is the bundled model (server or in-process embedder)."""
        return self.base_url is None or self.model == LOCAL_MODEL_NAME


class Settings(BaseSettings):
    """Environment settings of one ragtopics process.

    Raises:
        pydantic.ValidationError: when a variable has a value of the wrong type.
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    data_dir: Path = Field(default_factory=lambda: _default_data_dir(), alias="RAGTOPICS_DATA_DIR")
    redis_url: str | None = Field(None, alias="REDIS_URL")
    embedded_redis_port: int = Field(16379, alias="EMBEDDED_REDIS_PORT")
    redis_query_timeout_ms: int = Field(5000, alias="REDIS_QUERY_TIMEOUT_MS")
    falkordb_url: str | None = Field(None, alias="FALKORDB_URL")
    database_url: str | None = Field(None, alias="DATABASE_URL")

    llm_base_url: str | None = Field(None, alias="LLM_BASE_URL")
    llm_api_key: str = Field("not-needed", alias="LLM_API_KEY")
    llm_model: str = Field(LOCAL_MODEL_NAME, alias="LLM_MODEL")
    llm_timeout_s: float = Field(120.0, alias="LLM_TIMEOUT_S")
    llm_max_tokens: int = Field(512, ge=16, alias="LLM_MAX_TOKENS")
    llm_supports_tools: bool = Field(False, alias="LLM_SUPPORTS_TOOLS")
    llm_supports_images: bool = Field(False, alias="LLM_SUPPORTS_IMAGES")
    local_llm_port: int = Field(18080, alias="LOCAL_LLM_PORT")
    local_llm_context_tokens: int = Field(8192, alias="LOCAL_LLM_CONTEXT_TOKENS")
    local_llm_threads: int = Field(0, alias="LOCAL_LLM_THREADS")

    embedding_base_url: str | None = Field(None, alias="EMBEDDING_BASE_URL")
    embedding_api_key: str = Field("not-needed", alias="EMBEDDING_API_KEY")
    embedding_model: str = Field("all-MiniLM-L6-v2", alias="EMBEDDING_MODEL")
    embedding_dim: int = Field(384, alias="EMBEDDING_DIM")
    embedding_batch_size: int = Field(64, alias="EMBEDDING_BATCH_SIZE")

    host: str = Field("127.0.0.1", alias="HOST")
    port: int = Field(7860, alias="PORT")
    share: bool = Field(False, alias="GRADIO_SHARE")
    queue_name: str = Field("ragtopics", alias="RQ_QUEUE")
    job_timeout_s: int = Field(3600, alias="JOB_TIMEOUT_S")
    max_chunks_per_document: int = Field(20_000, ge=1, alias="MAX_CHUNKS_PER_DOCUMENT")
    log_level: str = Field("INFO", alias="LOG_LEVEL")

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

    def endpoint(self, role: str) -> ModelEndpoint:
        """Return the endpoint for ``role``.

        A role's own ``<ROLE>_BASE_URL`` / ``<ROLE>_MODEL`` / ``<ROLE>_API_KEY``
        variables override the Language Model's; ``embedding`` has its own variables.

        Raises:
            ConfigurationError: for an unknown role.
        """
        from ragtopics.errors import ConfigurationError

        if role == "embedding":
            return ModelEndpoint(
                role=role,
                base_url=self.embedding_base_url,
                model=self.embedding_model,
                api_key=self.embedding_api_key,
                timeout_s=self.llm_timeout_s,
            )
        if role not in ROLES:
            raise ConfigurationError(f"unknown model role {role!r}; known roles: {', '.join(ROLES)}")
        base = self.llm_base_url or f"http://127.0.0.1:{self.local_llm_port}/v1"
        prefix = role.upper()
        override = role != "language_model" and os.environ.get(f"{prefix}_BASE_URL")
        return ModelEndpoint(
            role=role,
            base_url=override or base,
            model=os.environ.get(f"{prefix}_MODEL") if override else self.llm_model,
            api_key=(os.environ.get(f"{prefix}_API_KEY", "not-needed") if override else self.llm_api_key),
            timeout_s=self.llm_timeout_s,
            supports_tools=self.llm_supports_tools and not override,
            supports_images=self.llm_supports_images and not override,
        )


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
