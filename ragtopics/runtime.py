"""The per-process runtime: connections to the stores and the model gateway, built once."""

from __future__ import annotations

import gc
import logging
import threading

import redis

from ragtopics.access.context import acting_username
from ragtopics.errors import StoreUnavailableError
from ragtopics.llm.gateway import ModelGateway
from ragtopics.ops.redis_server import RedisStartError, check_modules
from ragtopics.settings.env import Settings, get_settings
from ragtopics.storage.blobs import open_file_store
from ragtopics.storage.chunk_index import ChunkIndex
from ragtopics.storage.links import LinkSigner, load_or_create_secret
from ragtopics.storage.metadata import MetadataStore

log = logging.getLogger(__name__)


class Runtime:
    """Stores and gateway of one process (console, worker or CLI).

    Args:
        settings: process settings; read from the environment when omitted.
    """

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or get_settings()
        # RESP2: a search reply is read as flat lists, not one dict per document. Measured on the bench's
        # 100,000 chunks (EF_RUNTIME 60), the product's KNN took 0.67 / 0.95 ms p50 / p95 with it and
        # 0.82 / 1.40 ms with redis-py's default RESP3 (hiredis parser both times).
        self.redis = redis.Redis.from_url(self.settings.effective_redis_url, socket_connect_timeout=3, protocol=2)
        self.metadata = MetadataStore(self.settings.effective_database_url)
        self.blobs = open_file_store(self.settings)  # FILE_STORE: the data dir's files/ folder or an object store
        self._gateway: ModelGateway | None = None
        self._signer: LinkSigner | None = None
        self._lock = threading.Lock()
        self._environment_settings = self._overridden_settings = self.settings
        self._login_required = False  # the console's: set once an admin exists (ragtopics.ui.web.is_open_mode)
        from ragtopics.llm.endpoints import apply_overrides  # the endpoints set in the console, over the environment's

        apply_overrides(self)

    @property
    def signer(self) -> LinkSigner:
        """Signs and checks source download links (secret kept under the data directory)."""
        with self._lock:
            if self._signer is None:
                self._signer = LinkSigner(
                    load_or_create_secret(self.settings.data_dir / "link-secret"), current_user=acting_username.get
                )
            return self._signer

    @property
    def gateway(self) -> ModelGateway:
        """The model gateway (built on first use)."""
        with self._lock:
            if self._gateway is None:
                self._gateway = ModelGateway(self.settings)
            return self._gateway

    def chunk_index(self, topic_id: str) -> ChunkIndex:
        """The chunk index of a Topic, sized for (and checked against) the configured embedder."""
        embedder = self.gateway.embedder
        return ChunkIndex(self.redis, topic_id, dims=embedder.dims, embedding_model=embedder.model)

    def check_store(self) -> None:
        """Check that Redis answers and has the search and graph modules.

        Raises:
            StoreUnavailableError: with what to do about it.
        """
        try:
            self.redis.ping()
            check_modules(self.redis)
        except redis.ConnectionError as exc:
            where = self.settings.effective_redis_url
            hint = (
                "start the product with `ragtopics up` (or `make run`)" if self.settings.is_redis_embedded else "check REDIS_URL"
            )
            raise StoreUnavailableError(f"Redis at {where} is not reachable: {hint}") from exc
        except RedisStartError as exc:
            raise StoreUnavailableError(str(exc)) from exc


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> Runtime:
    """The process-wide runtime, built from the environment on first use."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime()
        return _runtime


def set_runtime(runtime: Runtime | None) -> None:
    """Replace the process-wide runtime (tests, and ``ragtopics up`` after starting the stores)."""
    global _runtime
    with _runtime_lock:
        _runtime = runtime


def freeze_startup_heap() -> int:
    """Move every object alive after a process's start (the embedding model, the NLP pipeline, imported modules)
    out of the cyclic garbage collector's reach, so its full collections stop walking them.

    CPython's collector walks every tracked object in a full (generation 2) collection, which comes after enough
    allocations, at a moment no one chooses: with the bundled models loaded a process holds millions of objects,
    and one such collection paused a LOCAL search for about 350 ms (measured at 100,000 entities; about 1.5 ms
    once frozen). ``gc.freeze`` (Python 3.7+, see the ``gc`` module's documentation, which recommends it after
    start-up) keeps them in a permanent generation; they are still freed by reference counting, and garbage made
    before is collected first. Call once, after the models are loaded.

    Returns:
        How many objects are frozen now.
    """
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d objects of the process's start", frozen)
    return frozen
