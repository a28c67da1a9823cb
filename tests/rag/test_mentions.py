"""The second hop through file names: a top hit that names another file brings that file's best chunk in.

The corpus is a small two-hop puzzle in the shape of HotpotQA's bridge questions: the question
names a film's shooting town, the town's file names the film, and only the film's file says who
directed it, in words that share nothing with the question. Distractor films that do share the
question's words push the film's file out of the top 3 unless the town's file is followed.
"""

from __future__ import annotations

import pytest
import redis

from ragtopics.answer.context import RetrievalQuery
from ragtopics.graph.local import LocalRetriever
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.rag import mentions
from ragtopics.rag.mentions import FileNames, follow_mentions, words_of
from ragtopics.rag.retrieval import retrieve
from ragtopics.rag.retriever import ChunkRetriever
from ragtopics.storage.chunk_index import ChunkHit, ChunkIndex
from ragtopics.topics.topics import create_topic
from ragtopics.tracing.trace import Trace
from tests.ingest.test_ingest import upload

QUESTION = "Who directed the film that was shot in the town of Quillmoor in 1986?"
TOWN = (
    "Quillmoor, North Vale.txt",
    (
        "Quillmoor is a small town in North Vale. In 1986 the crew of The Ember Orchard spent a summer filming "
        "on its main street, and the town still holds a festival in July."
    ),
)
FILM = (
    "The Ember Orchard.txt",
    (
        "The Ember Orchard is a drama by Hanna Virtanen, adapted from her own stage play about three sisters "
        "who inherit a failing orchard."
    ),
)
DISTRACTORS = [
    (
        f"Shot in {year}.txt",
        (
            f"A film shot in {year} in a small town; who directed the film was never made public. "
            f"The town where it was shot in {year} asked for the film to be shown there first."
        ),
    )
    for year in (1984, 1985, 1986, 1987, 1988)
]


def _topic(rt, run_jobs, name: str, follow: bool, files: list[tuple[str, str]]):
    topic = create_topic(
        rt,
        name,
        settings={"retrieval_strategy": "DENSE", "top_k_results": 3, "min_similarity_score": 0.0, "follow_file_mentions": follow},
    )
    for file_name, text in files:
        upload(rt, topic, file_name, text.encode())
    run_jobs()
    return topic


def _files(rt, topic, question: str = QUESTION) -> list[str]:
    retriever = ChunkRetriever(rt, topic.id, topic.settings, resolve_prompts(rt, topic.id)["rerank"])
    context = retriever.retrieve(RetrievalQuery(question), Trace("chat", question))
    return [item.provenance[0].file_name for item in context.items]


def test_name_keys_are_the_words_of_a_file_stem():
    assert words_of("Leland, North Carolina") == ["leland", "north", "carolina"]
    names = FileNames.of({"d1": "Leland, North Carolina.txt", "d2": "The Ember Orchard.md", "d3": "ab.txt", "d4": "1986.txt"})
    assert set(names.by_key) == {"leland north carolina", "the ember orchard"}  # too short and digits only are no names
    text = "Filmed in Leland, North Carolina — see The Ember Orchard; Leland, north carolina again."
    assert names.mentioned_in(text) == [("leland north carolina", "d1"), ("the ember orchard", "d2")]
    assert names.mentioned_in("Leland alone names nothing") == []


def test_a_name_counts_only_where_it_is_written_as_one():
    names = FileNames.of({"d1": "people.csv", "d2": "Route 66.md", "d3": "東京都庁舎.txt"})
    assert names.mentioned_in("The people of the city speak Akkadian.") == []  # a word, not a file
    assert names.mentioned_in("People magazine listed it.") == [("people", "d1")]
    assert names.mentioned_in("the table in people.csv lists them") == [("people", "d1")]
    assert names.mentioned_in("drive route 66 or Route 66") == [("route 66", "d2")]
    assert names.mentioned_in("東京都庁舎 is large") == [("東京都庁舎", "d3")]  # a script without capitals
    izmir = FileNames.of({"d4": "İzmir Bay.txt"})  # casefold("İ") adds a combining dot: a word of its own
    assert izmir.mentioned_in("Ferries cross İzmir Bay daily.") == [(" ".join(words_of("İzmir Bay")), "d4")]


def test_names_are_normalised_and_stop_words_name_nothing():
    names = FileNames.of({"d1": "Zu\u0308rich.txt", "d2": "This.txt", "d3": "With.md"})  # "Zürich" typed decomposed
    assert set(names.by_key) == {"zürich"}
    assert names.mentioned_in("This is the lake of ZÜRICH, with boats.") == [("zürich", "d1")]


def test_a_hit_brought_in_by_a_link_still_has_its_links_followed(monkeypatch):
    # Seed 0 names seed 1's file, seed 1 names a third file: A → B → C, all three in a row.
    class Index:  # what follow_mentions asks of a chunk index, with the answers a stored Topic would give
        def common_phrases(self, phrases, **_):
            return set()

        def best_chunks(self, document_ids, vector):
            return {"dc": ChunkHit("c1", "dc", "Gamma Point.txt", 0, "gamma", 0.3)} if "dc" in document_ids else {}

    hits = [
        ChunkHit("a1", "da", "Alpha.txt", 0, "Alpha mentions Beta Ridge.", 0.9),
        ChunkHit("x1", "dx", "Other.txt", 0, "unrelated", 0.8),
        ChunkHit("b1", "db", "Beta Ridge.txt", 0, "Beta Ridge lies next to Gamma Point.", 0.7),
    ]
    names = FileNames.of({"da": "Alpha.txt", "db": "Beta Ridge.txt", "dc": "Gamma Point.txt", "dx": "Other.txt"})
    monkeypatch.setattr(mentions._NAMES, "get", lambda index: names)
    out, links = follow_mentions(Index(), hits, None)
    assert [h.chunk_id for h in out] == ["a1", "b1", "c1", "x1"]
    assert [(link.seed, link.chunk, link.moved) for link in links] == [("a1", "b1", True), ("b1", "c1", False)]


def test_the_file_a_top_hit_names_comes_right_after_it(rt, run_jobs):
    files = [TOWN, FILM, *DISTRACTORS]
    plain = _files(rt, _topic(rt, run_jobs, "Films plain", False, files))
    followed = _files(rt, _topic(rt, run_jobs, "Films followed", True, files))
    assert "The Ember Orchard.txt" not in plain, plain  # the second hop shares no word with the question
    town = followed.index("Quillmoor, North Vale.txt")
    assert followed[town + 1] == "The Ember Orchard.txt", followed
    assert len(followed) == 3


def test_the_hop_is_in_the_retrieval_with_its_score_as_cosine(rt, run_jobs, embedder):
    topic = _topic(rt, run_jobs, "Films traced", True, [TOWN, FILM, *DISTRACTORS])
    index = rt.chunk_index(topic.id)
    vector = embedder.embed([QUESTION])[0]
    for strategy, moved in (("DENSE", False), ("HYBRID", True)):  # HYBRID's deeper fusion pool already holds it
        found = retrieve(index, QUESTION, vector, strategy=strategy, top_k=3, min_score=0.0, candidates=3, mentions=True)
        [link] = [link for link in found.links if link.name == "the ember orchard"]
        ids = [h.chunk_id for h in found.hits]
        film = found.hits[ids.index(link.chunk)]
        assert film.file_name == "The Ember Orchard.txt" and link.moved is moved
        assert ids.index(link.chunk) == ids.index(link.seed) + 1
        stored = index.embeddings([film.chunk_id])[film.chunk_id]
        assert film.score == pytest.approx(float(stored @ vector), abs=1e-4)


def test_a_file_uploaded_later_is_followed_without_a_restart(rt, run_jobs):
    topic = _topic(rt, run_jobs, "Films later", True, [TOWN, *DISTRACTORS])
    assert "The Ember Orchard.txt" not in _files(rt, topic)
    upload(rt, topic, FILM[0], FILM[1].encode())
    run_jobs()
    assert "The Ember Orchard.txt" in _files(rt, topic)


def test_a_name_its_own_long_file_repeats_is_still_a_reference(rt, run_jobs):
    # A 14-chunk manual that says "Ember Orchard" in every chunk is still what other files refer to.
    manual = [
        ("The Ember Orchard.txt", " ".join(f"Part {n}: The Ember Orchard grows apples of kind {n}." * 12 for n in range(14)))
    ]
    topic = create_topic(rt, "Own name", settings={"chunk_size": 300, "chunk_overlap": 0})
    for file_name, text in [*manual, TOWN]:
        upload(rt, topic, file_name, text.encode())
    run_jobs()
    index = rt.chunk_index(topic.id)
    ids = {name: doc_id for doc_id, name in index.file_names().items()}
    assert index.count() > 10
    assert index.common_phrases({"the ember orchard": [ids["The Ember Orchard.txt"]]}, at_least=10, share=0.01) == set()
    assert index.common_phrases({"the ember orchard": []}, at_least=10, share=0.01) == {"the ember orchard"}


def test_a_name_that_many_chunks_contain_is_not_a_reference(rt, run_jobs):
    # "Small Town.txt" is named by every distractor ("a small town"): a common phrase, never followed.
    files = [TOWN, FILM, ("Small Town.txt", "A list of rules for naming streets, drawn up by a council."), *DISTRACTORS]
    files += [(f"Extra {n}.txt", f"Story {n} of a small town and its bakery.") for n in range(12)]
    topic = _topic(rt, run_jobs, "Films common", True, files)
    index = rt.chunk_index(topic.id)
    ids = {name: doc_id for doc_id, name in index.file_names().items()}
    phrases = {"small town": [ids["Small Town.txt"]], "the ember orchard": [ids["The Ember Orchard.txt"]]}
    assert index.common_phrases(phrases, at_least=10, share=0.01) == {"small town"}
    assert "Small Town.txt" not in _files(rt, topic)


def test_local_search_of_a_graphrag_topic_follows_file_mentions_too(rt, run_jobs, monkeypatch):
    topic = create_topic(
        rt,
        "Films graph",
        kind="graphrag",
        settings={"max_cited_chunks": 3, "min_similarity_score": 0.0, "graph_extraction_method": "NLP"},
    )
    for file_name, text in [TOWN, FILM, *DISTRACTORS]:
        upload(rt, topic, file_name, text.encode())
    run_jobs()

    def search(follow: bool) -> tuple[list[str], dict]:
        cfg = topic.settings.model_copy(update={"follow_file_mentions": follow})
        trace = Trace("chat", QUESTION)
        context = LocalRetriever(rt, topic, cfg).retrieve(RetrievalQuery(QUESTION), trace)
        ranked = next(e.data for e in trace.events if e.step == "rank_chunks")
        return [item.provenance[0].file_name for item in context.items if item.kind == "chunk"], ranked

    followed, ranked = search(True)
    town = followed.index("Quillmoor, North Vale.txt")
    assert followed[town + 1] == "The Ember Orchard.txt", followed
    assert len(followed) == 3
    [link] = [link for link in ranked["links"] if link["name"] == "the ember orchard"]
    assert [row["file"] for row in ranked["kept"] if row["chunk_id"] == link["chunk"]] == ["The Ember Orchard.txt"]
    plain, ranked = search(False)
    assert "links" not in ranked and len(plain) == 3
    assert plain[plain.index("Quillmoor, North Vale.txt") + 1] != "The Ember Orchard.txt", plain  # the hop did it

    def broken(*_args, **_kwargs):
        raise redis.ConnectionError("Redis went away")

    monkeypatch.setattr(ChunkIndex, "files_generation", broken)  # the names cannot be read: LOCAL still answers
    unlinked, ranked = search(True)
    assert ranked["links"] == [] and len(unlinked) == 3
