"""The extraction cache of a Topic: one Redis hash whose fields expire one by one, read in one round trip;
entries of the earlier one-key-per-entry layout are still found, and moved into the hash."""

from __future__ import annotations

from ragtopics.graph.ingest import CACHE_TTL_S, ExtractionCache
from ragtopics.graph.model import ChunkExtraction, ExtractedEntity
from tests.redis_commands import CommandLog


def extraction(name: str) -> ChunkExtraction:
    return ChunkExtraction(entities=[ExtractedEntity(name=name, type="PLACE", description=f"{name} is an island.")])


def test_the_cache_is_one_hash_with_a_ttl_per_entry_and_reads_many_in_one_round_trip(rt):
    cache = ExtractionCache(rt.redis, "topic-a")
    keys = [cache.key(f"Paragraph {n} is about isle {n}.", "NLP", "v1") for n in range(50)]
    for n, key in enumerate(keys[:40]):
        cache.put(key, extraction(f"Isle {n}"))
    assert rt.redis.keys("rt:topic-a:*") == [b"rt:topic-a:xcache"] and rt.redis.hlen("rt:topic-a:xcache") == 40
    assert rt.redis.ttl("rt:topic-a:xcache") == -1  # the hash itself never expires; its fields do
    assert all(0 < ttl <= CACHE_TTL_S for ttl in rt.redis.httl("rt:topic-a:xcache", *keys[:40]))

    rt.redis.hexpire("rt:topic-a:xcache", 60, *keys[:40])
    with CommandLog(rt.redis) as log:
        found = cache.get_many(keys)
    assert [found[key].entities[0].name if found[key] else None for key in keys] == [f"Isle {n}" for n in range(40)] + [None] * 10
    assert log.count("HMGET") == 1 and log.count("HEXPIRE") == 1 and log.count("MGET") == 1  # (10 missing: earlier keys)
    assert min(rt.redis.httl("rt:topic-a:xcache", *keys[:40])) > 60  # each entry read lives CACHE_TTL_S longer
    assert ExtractionCache(rt.redis, "topic-b").get(keys[0]) is None  # another Topic's cache is its own


def test_an_entry_of_the_earlier_layout_is_found_and_moved_into_the_hash(rt):
    cache = ExtractionCache(rt.redis, "topic-a")
    key = cache.key("Caldey is an island off Wales.", "NLP", "v1")
    rt.redis.set(f"rt:topic-a:xcache:{key}", extraction("Caldey").model_dump_json(), ex=CACHE_TTL_S)
    assert cache.get(key).entities[0].name == "Caldey"
    assert not rt.redis.exists(f"rt:topic-a:xcache:{key}") and rt.redis.hexists("rt:topic-a:xcache", key)
    with CommandLog(rt.redis) as log:
        assert cache.get(key).entities[0].name == "Caldey"
    assert log.count("MGET") == 0  # found in the hash: the earlier layout is not read
