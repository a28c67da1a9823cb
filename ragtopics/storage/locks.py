"""Per-document locks in Redis, so that the steps that change what is searchable never interleave.

Three things change a document's searchable state: a job making its version the
searchable one (the chunk swap in Redis, inside the SQL transaction of its row), a new upload staging a newer
version (which supersedes that job and may remove its file), and a delete. Each runs
under :func:`document_lock`, so a reader sees one version everywhere: the chunks, the
row and the file its link serves.

A holder that stalls past the lock's time to live loses it, and another may take it. Both
context managers therefore give the block a :class:`Fence`: the lock tokens it holds. A write
fenced with it (the chunk swap, through :meth:`Fence.watch`) happens only while every token is
still in its key; :meth:`Fence.execute` runs any other Redis or FalkorDB command that way (the
graph writes of an upload), and :meth:`Fence.check` stops a holder before a write that cannot be
fenced (a Graph Database on another server).

A GraphRAG Topic also has a graph write lock (:func:`graph_write_lock`): an upload deduplicates its
entities against the graph and writes them under it, so concurrent uploads into one Topic never
create the same entity twice under two names.

A lock taken by an rq worker names the worker in its token (``<worker name>/<random hex>``, see
:func:`set_holder`), so that the locks of a worker rq found dead (its key expired: it missed three
heartbeats) are released by the next recovery pass (:func:`release_dead_holders`) instead of blocking
their document, or a GraphRAG Topic's graph, until their time to live runs out. Releasing them is
safe because of the fence: a holder that was only stalled writes nothing once its lock is gone.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from ragtopics.errors import StoreUnavailableError

log = logging.getLogger(__name__)

#: A lock lives this many seconds past its holder's last sign of life: while a block holds it, its time
#: is renewed every third of this (see :class:`_Renewal`), so a killed holder cannot block the document
#: for longer, and a long hold (a GraphRAG file's graph, a batch of 128 files) never loses it.
LOCK_TTL_S = 120
#: How long a caller waits for the lock before giving up, in seconds.
LOCK_WAIT_S = 60
#: How long a worker's job waits: longer than a lock lives, so a lock left by a killed worker has
#: expired before the job gives up (a job that gave up would fail and wait for the next worker start).
WORKER_LOCK_WAIT_S = LOCK_TTL_S + 10


#: What every lock key starts with (:func:`release_dead_holders` looks at these only).
LOCK_PREFIX = "rt:lock:"
#: The rq worker this process runs as ("" in the console and other processes): named in every lock token.
_holder = ""
#: Delete a key only while it still holds the given token (redis-py's own release script does the same).
_DELETE_IF_TOKEN = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


def set_holder(name: str) -> None:
    """Name the rq worker this process runs as in the tokens of the locks it takes from now on ("" for none).

    Raises:
        ValueError: for a name holding ``/`` (the token's separator).
    """
    global _holder
    if "/" in name:
        raise ValueError(f"a lock holder's name cannot hold '/': {name!r}")
    _holder = name


def new_token() -> bytes:
    """A fresh lock token: ``<worker name>/<random hex>`` in an rq worker (:func:`set_holder`), else the random hex."""
    random = uuid.uuid4().hex
    return (f"{_holder}/{random}" if _holder else random).encode()


def token_holder(token: bytes | str | None) -> str:
    """The worker a lock token names ("" for a token taken outside a worker, or none)."""
    if token is None:
        return ""
    text = token.decode(errors="replace") if isinstance(token, bytes) else token
    return text.split("/", 1)[0] if "/" in text else ""


def release_dead_holders(client: redis.Redis, live: set[str]) -> list[str]:
    """Delete every lock whose token names a worker that is not in ``live``; returns the keys released.

    Each key is deleted only while it still holds the token read (a script compares and deletes), so a
    lock taken meanwhile by a live holder stays. Locks taken outside a worker carry no name and are left
    to expire.

    Args:
        live: the names of the rq workers alive now (their keys are in Redis).
    """
    released = []
    for key in client.scan_iter(match=f"{LOCK_PREFIX}*", count=1000):
        token = client.get(key)
        holder = token_holder(token)
        if token is not None and holder and holder not in live and client.eval(_DELETE_IF_TOKEN, 1, key, token):
            released.append(key.decode() if isinstance(key, bytes) else key)
    if released:
        log.warning("released %d lock(s) of worker(s) no longer alive: %s", len(released), ", ".join(released))
    return released


class LockLostError(StoreUnavailableError):
    """A document lock expired while held (its holder stalled past ``LOCK_TTL_S``): nothing more may be written."""


class Fence:
    """The lock tokens a block holds, to fence its writes with.

    Args:
        client: the Redis client the locks live in.
        held: ``(key, token)`` of every lock the block holds.
    """

    def __init__(self, client: redis.Redis, held: list[tuple[str, bytes]]):
        self.client = client
        self.held = list(held)
        self.lost: list[str] = []  # keys found no longer ours (by the renewal, or a check)

    def _lost_error(self) -> LockLostError:
        return LockLostError(
            f"document lock(s) {', '.join(self.lost)} expired while held (the holder stalled past "
            f"{LOCK_TTL_S} s) and may be someone else's now: nothing more is written"
        )

    def _compare(self, values: list) -> None:
        self.lost += [
            key for (key, token), value in zip(self.held, values, strict=True) if value != token and key not in self.lost
        ]
        if self.lost:
            raise self._lost_error()

    def check(self) -> None:
        """Raise unless every lock is still this block's (one round trip).

        Raises:
            LockLostError: a lock expired while held, naming its key.
        """
        if self.lost:
            raise self._lost_error()
        if self.held:
            self._compare(self.client.mget([key for key, _ in self.held]))

    def watch(self, pipe: redis.client.Pipeline) -> None:
        """Make a transaction pipeline's EXEC depend on the locks: WATCH their keys, then check the tokens.

        Call it before ``pipe.multi()``: if a lock changes hands (or expires) before EXEC, redis-py
        raises :class:`redis.WatchError` and nothing of the transaction is written.

        Raises:
            LockLostError: a lock is already lost (the pipeline is reset).
        """
        if not self.held:
            return
        keys = [key for key, _ in self.held]
        pipe.watch(*keys)
        try:
            if self.lost:
                raise self._lost_error()
            self._compare(pipe.mget(keys))
        except LockLostError:
            pipe.reset()
            raise

    def covers(self, client: redis.Redis) -> bool:
        """Whether ``client`` talks to the server (and database) the locks live in, so its writes can be fenced
        by :meth:`execute`; a write elsewhere can only be preceded by :meth:`check`."""
        return _server_of(client) == _server_of(self.client)

    def execute(self, client: redis.Redis, *command):
        """Run one Redis command only while every lock is still this block's, and return its reply.

        WATCH the lock keys, compare the tokens, then send the command in MULTI/EXEC: if a lock changes
        hands before EXEC, nothing is run. ``client`` must be on the locks' server (:meth:`covers`); it
        may decode replies (the tokens are compared as bytes either way).

        Raises:
            LockLostError: a lock is lost, before the command or at its EXEC (the command did not run).
            ValueError: ``client`` is on another server than the locks.
        """
        if not self.held:
            return client.execute_command(*command)
        if not self.covers(client):
            raise ValueError("a fenced write must go to the server that holds the locks")
        keys = [key for key, _ in self.held]
        with client.pipeline(transaction=True) as pipe:
            pipe.watch(*keys)
            if self.lost:
                raise self._lost_error()
            self._compare([_bytes(value) for value in pipe.mget(keys)])
            pipe.multi()
            pipe.execute_command(*command)
            try:
                [reply] = pipe.execute()
            except redis.WatchError:
                raise self.lost_at_exec() from None
        return reply

    def joined(self, other: Fence) -> Fence:
        """A fence holding this one's locks and ``other``'s (same client), for writes that need both."""
        return Fence(self.client, self.held + [held for held in other.held if held not in self.held])

    def lost_at_exec(self) -> LockLostError:
        """The error for a fenced transaction whose EXEC failed (a watched lock changed hands meanwhile)."""
        self.lost += [key for key, _ in self.held if key not in self.lost]
        return self._lost_error()


def _bytes(value) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _server_of(client: redis.Redis) -> tuple:
    kwargs = client.connection_pool.connection_kwargs
    return kwargs.get("host"), kwargs.get("port"), kwargs.get("path"), kwargs.get("db", 0)


def _name(lock) -> str:
    return lock.name.decode() if isinstance(lock.name, bytes) else lock.name


def _token(lock) -> bytes:
    token = lock.local.token
    return token if isinstance(token, bytes) else str(token).encode()


def lock_key(document_id: str) -> str:
    """The Redis key of a document's lock."""
    return f"{LOCK_PREFIX}document:{document_id}"


@contextmanager
def document_lock(client: redis.Redis, document_id: str, *, wait_s: float = LOCK_WAIT_S) -> Iterator[Fence]:
    """Hold a document's lock for the duration of the block, which gets the lock's :class:`Fence`.

    Raises:
        StoreUnavailableError: when the lock is not free within ``wait_s`` seconds.
    """
    with _held(
        client, lock_key(document_id), wait_s, f"document {document_id} is busy (another upload or delete holds it); try again"
    ) as fence:
        yield fence


def graph_lock_key(topic_id: str) -> str:
    """The Redis key of a GraphRAG Topic's graph write lock."""
    return f"{LOCK_PREFIX}graph:{topic_id}"


@contextmanager
def graph_write_lock(client: redis.Redis, topic_id: str, *, wait_s: float = LOCK_WAIT_S) -> Iterator[Fence]:
    """Hold a GraphRAG Topic's graph write lock for the duration of the block, which gets the lock's :class:`Fence`.

    An upload decides which of its entities are ones the graph already holds (deduplication) and
    writes the result under this lock, so two uploads into one Topic never both create an entity
    the other one is creating under another name: the second plans against the first one's graph.
    The slow parts of an upload (extraction, embedding) run before it is taken. Taken before a
    document lock, never while holding one.

    Raises:
        StoreUnavailableError: when the lock is not free within ``wait_s`` seconds.
    """
    with _held(
        client,
        graph_lock_key(topic_id),
        wait_s,
        f"the graph of Topic {topic_id} is busy (another upload is writing it); try again",
    ) as fence:
        yield fence


@contextmanager
def _held(client: redis.Redis, key: str, wait_s: float, busy: str) -> Iterator[Fence]:
    """Hold the lock at ``key`` (renewed while held) for the block, which gets its :class:`Fence`.

    Raises:
        StoreUnavailableError: with the message ``busy`` when the lock is not free within ``wait_s`` seconds.
    """
    lock = client.lock(key, timeout=LOCK_TTL_S, blocking_timeout=wait_s)
    if not lock.acquire(token=new_token()):
        raise StoreUnavailableError(busy)
    try:
        fence = Fence(client, [(_name(lock), _token(lock))])
        with _Renewal(client, [lock], fence):
            yield fence
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:  # expired while held: someone else may hold it now; nothing to release
            pass


@contextmanager
def document_locks(client: redis.Redis, document_ids: list[str], *, wait_s: float = LOCK_WAIT_S) -> Iterator[Fence]:
    """Hold the locks of several documents (a batch of uploads) for the duration of the block (given their :class:`Fence`).

    The locks are the keys and tokens of :func:`document_lock` (redis-py's ``Lock``: ``SET NX PX``
    with a random token, released by a script that checks the token), so the two exclude each
    other. When every lock is free they are taken in one round trip and released in another;
    when one is held, those taken are let go and each is waited for in turn, by id, so two
    batches never wait for each other in a circle.

    Raises:
        StoreUnavailableError: when a lock is not free within ``wait_s`` seconds.
    """
    ids = sorted(set(document_ids))
    locks = [client.lock(lock_key(d), timeout=LOCK_TTL_S, blocking_timeout=wait_s) for d in ids]
    tokens = [new_token() for _ in ids]
    pipe = client.pipeline(transaction=False)
    for lock, token in zip(locks, tokens, strict=True):
        pipe.set(lock.name, token, nx=True, px=int(LOCK_TTL_S * 1000))
    taken = []
    for lock, token, ok in zip(locks, tokens, pipe.execute(), strict=True):
        if ok:
            lock.local.token = token  # as the lock's own acquire keeps it, for the release
            taken.append(lock)
    renewal = _Renewal(client, [])
    if len(taken) < len(locks):  # one is busy: let go, then wait for each in order
        _release_all(client, taken)
        taken = []
        try:
            with renewal:  # those taken stay ours while a later one is waited for (up to wait_s each)
                for document_id, lock in zip(ids, locks, strict=True):
                    if not lock.acquire(token=new_token()):
                        raise StoreUnavailableError(
                            f"document {document_id} is busy (another upload or delete holds it); try again"
                        )
                    taken.append(lock)
                    renewal.add(lock)
        except BaseException:
            _release_all(client, taken)
            raise
    try:
        fence = Fence(client, [(_name(lock), _token(lock)) for lock in taken])
        with _Renewal(client, taken, fence):
            yield fence
    finally:
        _release_all(client, taken)


class _Renewal:
    """While its block runs, renew held locks' time to live every ``LOCK_TTL_S / 3`` seconds.

    A daemon thread sends one pipeline of redis-py's token-checking re-acquire script for all the
    locks (the tokens are passed in: a ``Lock`` keeps its token thread-local). A lock found no longer
    ours (it expired while this process was stalled past its TTL) is logged, not renewed again, and
    marked lost in the block's ``fence``, whose next check or fenced write then fails.
    """

    def __init__(self, client: redis.Redis, locks: list, fence: Fence | None = None):
        self.client = client
        self.fence = fence
        self.held = [(lock, lock.local.token) for lock in locks]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lock-renewal", daemon=True)

    def add(self, lock) -> None:
        """Renew ``lock`` too (just taken by this thread) from the next round on."""
        self.held = [*self.held, (lock, lock.local.token)]

    def __enter__(self) -> None:
        self.thread.start()

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stop.wait(LOCK_TTL_S / 3):
            if not self.held:
                continue
            pipe = self.client.pipeline(transaction=False)
            for lock, token in self.held:
                lock.lua_reacquire(keys=[lock.name], args=[token, int(LOCK_TTL_S * 1000)], client=pipe)
            try:
                renewed = pipe.execute(raise_on_error=False)
            except redis.exceptions.RedisError as exc:  # Redis is away: the holder's own next step will fail too
                log.warning("could not renew %d document lock(s): %s", len(self.held), exc)
                continue
            lost = [lock.name for (lock, _), ok in zip(self.held, renewed, strict=True) if ok != 1]
            if lost:
                log.warning("document lock(s) expired while held: %s", ", ".join(map(str, lost)))
                if self.fence is not None:
                    self.fence.lost += [_name(lock) for lock, _ in self.held if lock.name in lost]
                self.held = [(lock, token) for lock, token in self.held if lock.name not in lost]


def _release_all(client: redis.Redis, locks: list) -> None:
    """Release held locks in one round trip; one that expired while held is someone else's now and is left."""
    if not locks:
        return
    pipe = client.pipeline(transaction=False)
    for lock in locks:
        lock.lua_release(keys=[lock.name], args=[lock.local.token], client=pipe)
    pipe.execute(raise_on_error=False)
