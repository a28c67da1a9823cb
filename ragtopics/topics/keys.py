"""The Redis keys a Topic owns, named without walking the keyspace: a Topic delete removes exactly these.

Every key of a Topic is under its prefix ``rt:<topic id>:``, of one of three sorts:

- documents of a search index (chunks ``…:chunk:<id>``, community reports ``…:community:<id>``):
  removed with their index (``FT.DROPINDEX … DD``), which drops only that index's documents;
- keys of one name per Topic (:data:`TOPIC_KEYS`), the extraction cache among them (one hash, a
  field per chunk extraction);
- keys made while a job runs (a parked GraphRAG version and its counters): named in the Topic's key
  set (:func:`note_keys`) in the same transaction that makes them.

So a delete costs a look-up of the Topic's key set and one ``UNLINK`` per thousand keys it names,
whatever else the Redis holds. A module that adds a key of one name per Topic adds its suffix to
:data:`TOPIC_KEYS`, and one that makes keys per job notes them; the Topic delete test fails on any key
of a deleted Topic left behind.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragtopics.runtime import Runtime

#: Suffixes (after ``rt:<topic id>:``) of the keys of one name per Topic: the chunk index's records
#: (``storage.chunk_index``), the community index's record (``graph.community_index``), the community
#: rebuild's job, schedule, due mark and runs (``graph.refresh``, ``graph.lifecycle``, ``graph.communities``),
#: the chunks counted since the last rebuild (``ingest.cost``), the extraction cache (``graph.ingest``) and
#: the Topic's key set itself.
TOPIC_KEYS = (
    "index:chunks",
    "index:files",
    "index:names",
    "index:terms",
    "index:communities",
    "communities:job",
    "communities:next",
    "communities:due",
    "runs:communities",
    "cost:chunks-since-rebuild",
    "xcache",
    "keys",
)
#: Keys removed per UNLINK.
UNLINK_BATCH = 1000


def key_set(topic_id: str) -> str:
    """Redis key of the set naming the keys a Topic's jobs made (``rt:<topic id>:keys``)."""
    return f"rt:{topic_id}:keys"


def note_keys(pipe, topic_id: str, keys: list[str], ttl_s: int) -> None:
    """Name ``keys`` in the Topic's key set, on ``pipe`` (the pipeline or transaction that makes them).

    Args:
        keys: full key names, each under the Topic's prefix.
        ttl_s: the longest time-to-live of those keys, in seconds: the set lives as long after its
            newest names (a name whose key expired meanwhile costs an ``UNLINK`` of nothing).

    Raises:
        ValueError: a key not under the Topic's prefix.
    """
    outside = [key for key in keys if not key.startswith(f"rt:{topic_id}:")]
    if outside:
        raise ValueError(f"keys outside the prefix of Topic {topic_id}: {outside[:3]}")
    pipe.sadd(key_set(topic_id), *keys)
    pipe.expire(key_set(topic_id), ttl_s)


def forget_keys(pipe, topic_id: str, keys: list[str]) -> None:
    """Take ``keys`` out of the Topic's key set, on ``pipe`` (the pipeline that removes them)."""
    pipe.srem(key_set(topic_id), *keys)


def topic_keys(rt: Runtime, topic_id: str) -> list[str]:
    """Every key a Topic may own outside its search indexes: :data:`TOPIC_KEYS` and its key set's names
    (one ``SMEMBERS``). Keys that do not exist are named too."""
    noted = {m.decode() if isinstance(m, bytes) else m for m in rt.redis.smembers(key_set(topic_id))}
    fixed = [f"rt:{topic_id}:{suffix}" for suffix in TOPIC_KEYS]
    return fixed + sorted(noted - set(fixed))


def remove_topic_keys(rt: Runtime, topic_id: str, also: Sequence[str] = ()) -> int:
    """Remove the keys :func:`topic_keys` names, and ``also`` (keys outside the prefix named by the Topic's
    jobs); returns how many existed."""
    keys = [*topic_keys(rt, topic_id), *also]
    removed = 0
    for start in range(0, len(keys), UNLINK_BATCH):
        removed += int(rt.redis.unlink(*keys[start : start + UNLINK_BATCH]))
    return removed
