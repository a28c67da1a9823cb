"""SQL metadata through sqlmodel: Topics (settings versioned), documents, their pictures, chat sessions and turns.

SQLite under the data directory by default; any SQLAlchemy URL otherwise. The schema
is managed by Alembic migrations (:mod:`ragtopics.storage.migrate`), applied when a
:class:`MetadataStore` opens. JSON-valued columns are SQL JSON holding plain dicts and
lists; the pydantic models that give them meaning live elsewhere. SQLAlchemy does not
notice a dict or list changed in place: assign a new object to store a change.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Column, UniqueConstraint, event
from sqlalchemy.engine import Engine
from sqlmodel import Field, Session, SQLModel, create_engine, select

from ragtopics.storage.migrate import MigrationError, schema_revision, upgrade_to_head

__all__ = [
    "ApiTokenRow",
    "ChatSessionRow",
    "ChatTurnRow",
    "DemoLinkRow",
    "DemoTurnRow",
    "DevReportRow",
    "DocumentRow",
    "GraphCorrectionRow",
    "GraphDatabaseRow",
    "MetadataStore",
    "MigrationError",
    "PictureRow",
    "PromptOverrideRow",
    "RoleEndpointRow",
    "TopicRow",
    "TopicSettingsVersion",
    "TraceRow",
    "UploadCostRow",
    "UsageFigureRow",
    "UserRow",
    "schema_revision",
    "utcnow",
]


def utcnow() -> datetime:
    """The current time in UTC, timezone-aware."""
    return datetime.now(UTC)


class TopicRow(SQLModel, table=True):
    """A Topic: its kind and the current version of its settings."""

    __tablename__ = "topic"
    id: str = Field(primary_key=True)
    name: str = Field(index=True, unique=True)
    kind: str  # "rag" or "graphrag"
    description: str = ""
    settings: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))  # validated by ``ragtopics.settings.topic``
    settings_version: int = 1
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class TopicSettingsVersion(SQLModel, table=True):
    """Every version a Topic's settings ever had, for audit and rollback."""

    __tablename__ = "topic_settings_version"
    id: int | None = Field(default=None, primary_key=True)
    topic_id: str = Field(index=True, foreign_key="topic.id")
    version: int
    settings: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class DocumentRow(SQLModel, table=True):
    """An uploaded file of a Topic and the state of its indexing.

    ``status`` is one of ``queued``, ``processing``, ``indexed``, ``empty`` (stored,
    no readable text) and ``failed``. The columns ``content_sha256``/``chunk_count``/
    ``indexed_with`` describe the version that is searchable now; ``pending_*``
    the version being processed.
    """

    __tablename__ = "document"
    __table_args__ = (UniqueConstraint("topic_id", "file_name"),)
    id: str = Field(primary_key=True)
    topic_id: str = Field(index=True, foreign_key="topic.id")
    file_name: str
    content_sha256: str = ""
    size_bytes: int = 0
    blob_path: str = ""
    pending_sha256: str = ""
    pending_blob_path: str = ""
    status: str = "queued"
    chunk_count: int = 0
    job_id: str = ""
    error: str = ""
    warning: str = ""
    indexed_with: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class PictureRow(SQLModel, table=True):
    """A picture of the searchable version of a document, stored as a PNG blob (Store pictures in the database).

    ``id`` is ``pic-`` + a content hash; chunks name the pictures linked to them by
    these ids. ``page`` is 1-based, None for formats without pages.
    """

    __tablename__ = "picture"
    id: str = Field(primary_key=True)
    topic_id: str = Field(index=True, foreign_key="topic.id")
    document_id: str = Field(index=True)
    blob_path: str
    caption: str = ""
    description: str = ""
    page: int | None = None
    created_at: datetime = Field(default_factory=utcnow)


class ChatSessionRow(SQLModel, table=True):
    """One chat of a Topic; its turns are :class:`ChatTurnRow`. A chat started by a logged-in user is theirs alone."""

    __tablename__ = "chat_session"
    id: str = Field(primary_key=True)
    topic_id: str = Field(index=True, foreign_key="topic.id")
    title: str = ""
    owner: str = Field(default="", sa_column_kwargs={"server_default": ""})  # the console user; "" outside logins
    created_at: datetime = Field(default_factory=utcnow)


class ChatTurnRow(SQLModel, table=True):
    """A saved question and answer with its sources (``Source.to_row`` dicts), route (way, the router's
    confidence, reason and method) and timings (ms per step).

    Its trace is a :class:`TraceRow` with ``owner="turn:<id>"``.
    """

    __tablename__ = "chat_turn"
    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(index=True, foreign_key="chat_session.id")
    topic_id: str = Field(index=True, foreign_key="topic.id")
    question: str
    answer: str
    sources: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    route: str = "SEARCH"
    route_confidence: float | None = None
    route_reason: str = Field(default="", sa_column_kwargs={"server_default": ""})
    route_method: str = Field(default="", sa_column_kwargs={"server_default": ""})
    route_planned: str = Field(default="", sa_column_kwargs={"server_default": ""})
    timings: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class GraphDatabaseRow(SQLModel, table=True):
    """A FalkorDB server registered under Admin → Graph Databases (the app's own Redis is always registered)."""

    __tablename__ = "graph_database"
    name: str = Field(primary_key=True)
    url: str  # redis://host:port/db of a server with the FalkorDB module
    created_at: datetime = Field(default_factory=utcnow)


class PromptOverrideRow(SQLModel, table=True):
    """An edited prompt: for all Topics (``scope="shared"``) or for one Topic (``scope=<topic id>``)."""

    __tablename__ = "prompt_override"
    __table_args__ = (UniqueConstraint("scope", "name"),)
    id: int | None = Field(default=None, primary_key=True)
    scope: str = Field(index=True)
    name: str
    text: str
    updated_at: datetime = Field(default_factory=utcnow)


class TraceRow(SQLModel, table=True):
    """A stored trace (the step tree of one chat turn or upload job), kept apart from the rows it explains.

    ``owner`` names what it explains: ``turn:<id>`` or ``document:<id>:<job>``.
    """

    __tablename__ = "trace"
    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(index=True)
    owner: str = Field(index=True)
    topic_id: str = Field(default="", index=True)
    subject: str = ""
    size_bytes: int = 0
    events: list = Field(default_factory=list, sa_column=Column(JSON))
    created_at: datetime = Field(default_factory=utcnow)


class UserRow(SQLModel, table=True):
    """A console user: an argon2 password hash, a role (admin, operator or viewer) and the DEV_REPORTING permission."""

    __tablename__ = "user"
    username: str = Field(primary_key=True)
    password_hash: str
    role: str  # "admin", "operator" or "viewer"
    dev_reporting: bool = False
    created_at: datetime = Field(default_factory=utcnow)


class ApiTokenRow(SQLModel, table=True):
    """A per-user API token for programs (MCP clients, ``gradio_client``); only its SHA-256 digest is kept."""

    __tablename__ = "api_token"
    id: int | None = Field(default=None, primary_key=True)
    username: str = Field(index=True, foreign_key="user.username")
    label: str = ""
    digest: str = Field(index=True, unique=True)  # hex SHA-256 of the token
    created_at: datetime = Field(default_factory=utcnow)
    last_used_at: datetime | None = None


class DevReportRow(SQLModel, table=True):
    """The index entry of one DEV report; the report itself is a JSON file under ``<data>/dev-reports/``."""

    __tablename__ = "dev_report"
    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(index=True)  # "upload", "chat" or "communities"
    topic_id: str = Field(default="", index=True)
    topic_name: str = ""
    subject: str = ""
    owner: str = ""
    path: str  # relative to the data directory
    size_bytes: int = 0
    steps: int = 0
    model_calls: int = 0
    tokens: int = 0
    duration_ms: float = 0.0
    created_at: datetime = Field(default_factory=utcnow, index=True)


class RoleEndpointRow(SQLModel, table=True):
    """A model role's endpoint set in Admin → LLM Configuration; it overrides the environment's for that role."""

    __tablename__ = "role_endpoint"
    role: str = Field(primary_key=True)
    base_url: str
    model: str
    api_key: str = ""  # kept on the server; the console shows only whether one is set
    supports_tools: bool = False
    supports_images: bool = False
    price_in_per_mtok: float | None = None  # the operator's price per 1M input tokens; None: not entered
    price_out_per_mtok: float | None = None  # the operator's price per 1M output tokens; None: not entered
    updated_by: str = ""
    updated_at: datetime = Field(default_factory=utcnow)


class DemoLinkRow(SQLModel, table=True):
    """A demo link: one Topic's chat without login, for whoever holds the link, until it expires or is revoked.

    Only the SHA-256 digest of the link's token is kept. ``topic_id`` is no foreign key: deleting the Topic
    leaves the link, which then says that its Topic is gone. ``visitor_rate`` and ``link_rate`` are the
    questions per minute allowed to one visitor and to the link as a whole.
    """

    __tablename__ = "demo_link"
    id: str = Field(primary_key=True)
    topic_id: str = Field(index=True)
    topic_name: str = ""  # the name when the link was made (the Topic may be renamed or deleted later)
    digest: str = Field(index=True, unique=True)  # hex SHA-256 of the token
    created_by: str = ""  # the console user, "" from the CLI
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    revoked_at: datetime | None = None
    allow_sources: bool = False
    visitor_rate: int = 5
    link_rate: int = 30


class DemoTurnRow(SQLModel, table=True):
    """A question a demo visitor asked through a demo link, with its answer; kept apart from users' chats.

    ``visitor`` is a short digest of the visitor's cookie id (or address), never the id itself.
    ``sources`` are the file names the answer cited.
    """

    __tablename__ = "demo_turn"
    id: int | None = Field(default=None, primary_key=True)
    link_id: str = Field(index=True, foreign_key="demo_link.id")
    visitor: str = ""
    question: str
    answer: str
    sources: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class UploadCostRow(SQLModel, table=True):
    """The cost estimate of one uploaded file version (its job), and once indexed what it really took.

    ``estimate`` and ``actual`` are the dicts of :mod:`ragtopics.ingest.cost` (chunks, model calls by
    kind, tokens in and out, seconds); ``actual`` is empty until the version was stored.
    """

    __tablename__ = "upload_cost"
    job_id: str = Field(primary_key=True)
    document_id: str = Field(index=True)
    topic_id: str = Field(index=True)
    file_name: str = ""
    estimate: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    actual: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None


class UsageFigureRow(SQLModel, table=True):
    """A running total measured on this installation, from which the cost estimate takes its per-call figures.

    ``name`` says what is counted (see :mod:`ragtopics.ingest.cost`): ``call:<kind>`` (``call:<kind>:<work>`` for
    deduplication and community reports, by extraction method; ``count`` model calls
    over ``units`` chunks, pictures or records, with their tokens and seconds), ``embedding`` (``count`` texts),
    ``file:<ext>`` (``count`` chunks over ``units`` bytes), ``pictures:<ext>``, ``read:<ext>``, ``work:<work>``
    (seconds of other work over ``count`` chunks), ``graph:mentions:<work>`` and ``graph:new:<work>`` (entity
    mentions and entities new to the graph over ``units`` characters of chunk text) and
    ``communities:<work>:<resolution>`` (communities of two or more entities over ``units`` entities, at rebuilds).
    """

    __tablename__ = "usage_figure"
    name: str = Field(primary_key=True)
    count: float = 0.0
    units: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0
    seconds: float = 0.0
    samples: int = 0
    updated_at: datetime = Field(default_factory=utcnow)


class GraphCorrectionRow(SQLModel, table=True):
    """An operator's correction of a GraphRAG Topic's graph, kept as a rule that deduplication applies to every later upload.

    ``kind`` is ``merge``, ``split``, ``rename``, ``retype`` or ``delete``; ``name`` and ``type`` name the entity it was
    made on, ``names`` every name it covers (the entity's name and the aliases it had then; a split's alias alone);
    ``target_name`` and ``target_type`` where those names go (merge, rename, retype) or what they are kept apart from
    (split); empty for a delete. ``outcome`` is what the correction changed in the graph when it was made.
    """

    __tablename__ = "graph_correction"
    id: int | None = Field(default=None, primary_key=True)
    topic_id: str = Field(index=True)
    kind: str
    name: str
    type: str
    names: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    target_name: str = ""
    target_type: str = ""
    outcome: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_by: str = ""  # the console user, "" from the CLI
    created_at: datetime = Field(default_factory=utcnow)


class MetadataStore:
    """Engine and sessions for the SQL metadata, its schema migrated to the newest revision.

    Args:
        url: SQLAlchemy URL; a ``sqlite:///`` file's folder is created.

    Raises:
        MigrationError: when the schema cannot be migrated (the database is left as it was).
    """

    def __init__(self, url: str):
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
            event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = create_engine(url, pool_pre_ping=True)
        upgrade_to_head(url)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except Exception:
                session.rollback()
                raise

    def topic_by_name(self, name: str) -> TopicRow | None:
        """The Topic called ``name``, or ``None``."""
        with self.session() as s:
            return s.exec(select(TopicRow).where(TopicRow.name == name)).first()


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL lets the console read while the worker writes. In WAL mode synchronous=NORMAL keeps every
    # committed transaction through a crash of the process (a killed worker or console); only a power
    # loss or OS crash can roll back the last commits, the same window as Redis's appendfsync everysec
    # (SQLite documentation, "Write-Ahead Logging", section on performance considerations).
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
