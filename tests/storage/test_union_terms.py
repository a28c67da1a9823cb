"""Keyword unions sent to RediSearch leave its stop words out: a union that opens with two of them crashes
RediSearch 2.10's query parser, and with it the Redis server. Checked on a Redis of its own."""

from __future__ import annotations

import re

import pytest
import redis
from redis.commands.search.query import Query

from ragtopics.ops.redis_server import EmbeddedRedis
from ragtopics.storage.chunk_index import union_terms
from tests.conftest import free_port

QUESTION = "At the 2011 census, what was he population of the city where Kerry Saxby-Junna was born?"


@pytest.fixture
def own_redis(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", free_port()).start()
    client = redis.Redis.from_url(server.url)
    client.execute_command(
        "FT.CREATE", "reports", "ON", "HASH", "PREFIX", "1", "r:", "SCHEMA", "title", "TEXT", "WEIGHT", "2", "summary", "TEXT"
    )
    client.hset("r:1", mapping={"title": "Census figures", "summary": "The 2011 census counted the city's population."})
    yield client
    server.stop()


def test_the_union_of_a_question_s_words_is_searched_and_the_server_stays_up(own_redis):
    terms = union_terms(re.findall(r"\w+", QUESTION))
    assert terms[:3] == ["2011", "census", "what"] and "at" not in terms and "the" not in terms
    found = own_redis.ft("reports").search(Query(f"@title|summary:({'|'.join(terms)})").dialect(2))
    assert found.total == 1 and own_redis.ping()


def test_union_terms_keep_each_word_once_in_lower_case():
    assert union_terms(["Census", "census", "AT", "The", "", "Kerry"]) == ["census", "kerry"]
