"""The chunk index's vector search: its HNSW answers match exact search, and a missing index answers empty."""

from __future__ import annotations

import numpy as np

from bench.latency import exact_top_k, recall_at_k
from ragtopics.storage.chunk_index import HNSW_EF_RUNTIME, ChunkIndex, ChunkRecord


def _unit_rows(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    rows = rng.standard_normal((n, dims)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_hnsw_search_finds_the_exact_nearest_chunks(rt):
    """3,000 random unit vectors in 32 dimensions (hard for HNSW: no clusters to follow); the product's
    EF_RUNTIME must find at least 98% of the exact top 10 (RediSearch's default of 10 finds about 71%)."""
    rng = np.random.default_rng(7)
    vectors, queries = _unit_rows(rng, 3_000, 32), _unit_rows(rng, 50, 32)
    index = ChunkIndex(rt.redis, "topic-knn", dims=32, embedding_model="random")
    for start in range(0, len(vectors), 1_000):
        index.replace_document(
            f"doc-{start}",
            [
                ChunkRecord(
                    chunk_id=f"chunk-{n:05d}",
                    document_id=f"doc-{start}",
                    file_name=f"f{start}.txt",
                    position=n,
                    text=f"row {n}",
                    embedding=vectors[n],
                )
                for n in range(start, start + 1_000)
            ],
        )
    assert index.count() == 3_000
    exact = [[f"chunk-{i:05d}" for i in exact_top_k(vectors, q, 10)] for q in queries]
    found = [[h.chunk_id for h in index.search_vector(q, 10)] for q in queries]
    assert all(len(f) == 10 for f in found)
    assert recall_at_k(found, exact) >= 0.98, f"recall@10 {recall_at_k(found, exact):.3f} at EF_RUNTIME {HNSW_EF_RUNTIME}"
    scores = [h.score for h in index.search_vector(queries[0], 10)]
    assert scores == sorted(scores, reverse=True)
    # half-precision vectors (VECTOR_DATATYPE): about three decimal digits of the cosine similarity
    assert np.isclose(scores[0], float(vectors[exact_top_k(vectors, queries[0], 1)[0]] @ queries[0]), atol=2e-3)


def _records(vectors: np.ndarray, document_id: str = "doc-1") -> list[ChunkRecord]:
    return [
        ChunkRecord(chunk_id=f"chunk-{n}", document_id=document_id, file_name="a.txt", position=n, text=f"row {n}", embedding=v)
        for n, v in enumerate(vectors)
    ]


def _field_type(rt, index: ChunkIndex) -> str:
    """The vector type RediSearch itself reports for the index (``FT.INFO``)."""
    info = rt.redis.execute_command("FT.INFO", index.index.name)
    if isinstance(info, dict):  # RESP3
        [vector] = [a for a in info[b"attributes"] if a[b"type"] == b"VECTOR"]
        return vector[b"data_type"].decode()
    attributes = dict(zip(info[::2], info[1::2]))[b"attributes"]
    [vector] = [a for a in attributes if b"VECTOR" in a]
    return vector[vector.index(b"data_type") + 1].decode()


def test_a_new_index_stores_half_precision_vectors_and_reads_them_back_as_float32(rt):
    vectors = _unit_rows(np.random.default_rng(3), 20, 16)
    index = ChunkIndex(rt.redis, "topic-half", dims=16, embedding_model="m")
    index.replace_document("doc-1", _records(vectors))
    assert (index.datatype(), _field_type(rt, index)) == ("float16", "FLOAT16")
    assert rt.redis.hget(index.record_key, "datatype") == b"float16"
    assert len(rt.redis.hget(index.key("chunk-4"), "embedding")) == 2 * 16  # half of a float32 vector
    stored = index.embeddings(["chunk-4", "chunk-missing"])
    assert list(stored) == ["chunk-4"] and stored["chunk-4"].dtype == np.float32
    assert np.allclose(stored["chunk-4"], vectors[4], atol=1e-3)
    hits = index.search_vector(vectors[4], 3)
    assert hits[0].chunk_id == "chunk-4" and hits[0].score <= 1.0 and np.isclose(hits[0].score, 1.0, atol=2e-3)
    assert index.best_chunks(["doc-1"], vectors[7])["doc-1"].chunk_id == "chunk-7"


def test_an_index_made_with_float32_vectors_keeps_them_and_a_rebuilt_one_gets_half_precision(rt, monkeypatch):
    """Indexes created before FLOAT16 keep working as they are; the type is read per index, also by a process
    that remembered the old type of an index made anew meanwhile (another process re-embedded the Topic)."""
    from redisvl.index import SearchIndex

    import ragtopics.storage.chunk_index as chunk_index

    vectors = _unit_rows(np.random.default_rng(5), 20, 16)
    old = SearchIndex.from_dict(ChunkIndex.schema("topic-old", 16, "float32"), redis_client=rt.redis)
    old.create()
    rt.redis.hset("rt:topic-old:index:chunks", mapping={"embedding_model": "m", "dims": 16})  # no type: as before
    monkeypatch.setattr(chunk_index, "_PROFILES", {})
    index = ChunkIndex(rt.redis, "topic-old", dims=16, embedding_model="m")
    index.replace_document("doc-1", _records(vectors))
    assert (index.datatype(), _field_type(rt, index)) == ("float32", "FLOAT32")
    assert len(rt.redis.hget(index.key("chunk-4"), "embedding")) == 4 * 16
    assert index.search_vector(vectors[4], 1)[0].chunk_id == "chunk-4" and index.count() == 20
    assert np.array_equal(index.embeddings(["chunk-4"])["chunk-4"], vectors[4])

    index.drop()  # re-embedding: the index is made anew, with the current type
    ChunkIndex(rt.redis, "topic-old", dims=16, embedding_model="m").replace_document("doc-1", _records(vectors))
    chunk_index._PROFILES[index.index.name] = ("float32", chunk_index.EF_RUNTIME_BEFORE)  # what another process still remembers
    stale = ChunkIndex(rt.redis, "topic-old", dims=16, embedding_model="m")
    assert stale.search_vector(vectors[9], 1)[0].chunk_id == "chunk-9"  # it notices and searches again
    assert stale.datatype() == "float16" and _field_type(rt, stale) == "FLOAT16"
    chunk_index._PROFILES[index.index.name] = ("float32", chunk_index.EF_RUNTIME_BEFORE)
    stale.replace_document("doc-2", _records(vectors[:2], "doc-2"))  # a write reads the type first
    assert len(rt.redis.hget(stale.key("chunk-1"), "embedding")) == 2 * 16 and stale.count() == 20


def test_an_index_dropped_behind_its_record_answers_empty(rt):
    index = ChunkIndex(rt.redis, "topic-gone", dims=4, embedding_model="m")
    index.replace_document(
        "doc-1",
        [
            ChunkRecord(
                chunk_id="chunk-1",
                document_id="doc-1",
                file_name="a.txt",
                position=0,
                text="pump seal",
                embedding=np.array([1, 0, 0, 0], dtype=np.float32),
                keywords="pump seal",
            )
        ],
    )
    assert index.count() == 1 and index.search_keywords(["pump"], 3)[0].chunk_id == "chunk-1"
    index.index.delete(drop=False)  # the record hash stays
    assert index.built_with() == ("m", 4)
    assert index.search_vector(np.array([1, 0, 0, 0], dtype=np.float32), 3) == []
    assert index.search_keywords(["pump"], 3) == [] and index.count() == 0


def test_a_record_from_before_the_type_was_kept_whose_index_is_gone_answers_empty(rt):
    """The record outlived its index (a Topic delete stopped half way): no index, nothing found, no loop."""
    rt.redis.hset("rt:topic-half-gone:index:chunks", mapping={"embedding_model": "m", "dims": 16})
    index = ChunkIndex(rt.redis, "topic-half-gone", dims=16, embedding_model="m")
    assert index.search_vector(_unit_rows(np.random.default_rng(1), 1, 16)[0], 3) == []


def _knn_ef(rt, index: ChunkIndex, vector: np.ndarray, monkeypatch) -> int:
    """The EF_RUNTIME a vector search sends (read off the command as it goes out)."""
    sent = []
    real = index._knn_command
    monkeypatch.setattr(index, "_knn_command", lambda *a, **kw: sent.append(real(*a, **kw)) or sent[-1])
    index.search_vector(vector, 3)
    command = sent[-1]
    return command[command.index("ef") + 1]


def test_each_index_is_searched_with_the_ef_runtime_its_graph_was_built_for(rt, monkeypatch):
    """A new index records EF_RUNTIME 40 (its graph: EF_CONSTRUCTION 400, as FT.INFO reports); one whose record
    names none (made before) keeps the 60 its graph needs, also in a process that wrongly remembers 40."""
    import ragtopics.storage.chunk_index as chunk_index

    vectors = _unit_rows(np.random.default_rng(11), 20, 16)
    new = ChunkIndex(rt.redis, "topic-ef-new", dims=16, embedding_model="m")
    new.replace_document("doc-1", _records(vectors))
    assert rt.redis.hget(new.record_key, "ef_runtime") == b"40" and new.ef_runtime() == chunk_index.HNSW_EF_RUNTIME == 40
    assert _knn_ef(rt, new, vectors[2], monkeypatch) == 40
    info = rt.redis.ft(new.index.name).info()
    [field] = [a for a in info["attributes"] if b"VECTOR" in a]
    assert field[field.index(b"M") + 1] == 32 and field[field.index(b"ef_construction") + 1] == 400

    monkeypatch.setattr(chunk_index, "_PROFILES", {})
    old = ChunkIndex(rt.redis, "topic-ef-old", dims=16, embedding_model="m")
    old.replace_document("doc-1", _records(vectors))
    rt.redis.hdel(old.record_key, "ef_runtime")  # as an index made with EF_CONSTRUCTION 200 records itself
    chunk_index._PROFILES[old.index.name] = ("float16", 40)  # what this process still remembers
    assert old.search_vector(vectors[5], 1)[0].chunk_id == "chunk-5"  # it notices the record and searches again
    assert old.ef_runtime() == chunk_index.EF_RUNTIME_BEFORE == 60 and _knn_ef(rt, old, vectors[2], monkeypatch) == 60


def test_both_redis_protocols_read_the_same_hits_nearest_first(rt):
    """The product's client speaks RESP2 (flat replies, read directly); a RESP3 client gets the same hits."""
    import redis

    vectors = _unit_rows(np.random.default_rng(13), 40, 16)
    records = [
        ChunkRecord(
            chunk_id=f"chunk-{n}",
            document_id="doc-1",
            file_name="pumps.txt",
            position=n,
            text=f"row {n} ünïcode",
            embedding=v,
            context=f"ctx {n}" if n % 2 else "",
            pictures="pic-1" if n == 3 else "",
            pages=(2, 3) if n % 3 == 0 else (),
            version="v1",
        )
        for n, v in enumerate(vectors)
    ]
    ChunkIndex(rt.redis, "topic-resp", dims=16, embedding_model="m").replace_document("doc-1", records)
    kwargs = rt.redis.connection_pool.connection_kwargs
    assert kwargs["protocol"] == 2
    resp3 = redis.Redis(host=kwargs["host"], port=kwargs["port"], protocol=3)
    query = vectors[3] + 0.3 * vectors[7]
    hits2 = ChunkIndex(rt.redis, "topic-resp", dims=16, embedding_model="m").search_vector(query, 8)
    hits3 = ChunkIndex(resp3, "topic-resp", dims=16, embedding_model="m").search_vector(query, 8)
    assert hits2 == hits3 and len(hits2) == 8
    assert [h.score for h in hits2] == sorted((h.score for h in hits2), reverse=True)
    exact = [f"chunk-{i}" for i in exact_top_k(vectors, query / np.linalg.norm(query), 8)]
    assert [h.chunk_id for h in hits2] == exact  # nearest first, though the server no longer sorts
    top = hits2[0]
    assert (top.chunk_id, top.text, top.context, top.pictures, top.pages, top.version, top.file_name) == (
        "chunk-3",
        "row 3 ünïcode",
        "ctx 3",
        "pic-1",
        (2, 3),
        "v1",
        "pumps.txt",
    )


def test_knn_hits_are_ordered_by_distance_then_id_whatever_the_reply_order():
    """The KNN query leaves sorting to the client: a shuffled RESP2 reply with a tie and two near-duplicates
    whose similarity rounds above 1 comes out nearest first, ties by chunk id, scores clipped at 1."""
    from ragtopics.storage.chunk_index import _vector_hits

    def row(distance: str) -> list[bytes]:
        return [
            b"document_id",
            b"doc-1",
            b"file_name",
            b"a.txt",
            b"position",
            b"0",
            b"text",
            b"t",
            b"vector_distance",
            distance.encode(),
        ]

    reply = [
        5,
        b"rt:t:chunk:chunk-c",
        row("0.25"),
        b"rt:t:chunk:chunk-z",
        row("-0.0004"),
        b"rt:t:chunk:chunk-b",
        row("0.25"),
        b"rt:t:chunk:chunk-y",
        row("-0.0009"),
        b"rt:t:chunk:chunk-a",
        row("0.5"),
    ]
    hits = _vector_hits(reply, "rt:t:chunk")
    assert [h.chunk_id for h in hits] == ["chunk-y", "chunk-z", "chunk-b", "chunk-c", "chunk-a"]
    assert [h.score for h in hits] == [1.0, 1.0, 0.75, 0.75, 0.5]
