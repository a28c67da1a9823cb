"""Offline community reports on real HotpotQA passages (NLP extraction, the embedded Redis with FalkorDB and
RediSearch, no language model): titles say what a community is about, summaries are the documents' sentences,
each once and cited to a member's chunk that holds it, GLOBAL cites each theme line's document, and a new offline
report format rewrites the graph-built reports once."""

from __future__ import annotations

import re

from ragtopics.answer.context import RetrievalQuery
from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import upload_file
from ragtopics.graph import communities
from ragtopics.graph.community_index import CommunityIndex
from ragtopics.graph.global_search import GlobalRetriever
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.refresh import run_rebuild
from ragtopics.prompts.templates import GLOBAL_MAP
from ragtopics.topics.topics import create_topic, get_topic
from ragtopics.tracing.trace import Trace

#: Seven passages about places on Oahu, six about airports, and the first 30 of the set (films, languages, books…).
PLACES = ["Mākaha, Hawaii", "Laie, Hawaii", "Kahuku, Hawaii", "Honolulu County, Hawaii", "Kapolei, Hawaii", "Kunia Camp, Hawaii"]
PLACES += ["Honolulu Rail Transit"]
AIRPORTS = [
    "El Nouzha Airport",
    "Watertown International Airport",
    "Vancouver International Airport",
    "Alexandria International Airport (Louisiana)",
    "Chiang Rai International Airport",
    "Maputo International Airport",
]


def built_topic(reconfigure, run_jobs, hotpot):
    corpus, _ = hotpot
    titles = list(dict.fromkeys(PLACES + AIRPORTS + list(corpus)[:30]))
    rt = reconfigure(LLM_BASE_URL=None, LOCAL_LLM_PORT=1)  # offline: reports from the graph, extractive answers
    topic = create_topic(rt, "Themes", kind="graphrag", settings={"graph_extraction_method": "NLP"})
    for title in titles:
        upload_file(rt, topic, f"{title}.txt", "".join(corpus[title]).encode())
    run_jobs()
    return rt, get_topic(rt, topic.id)


def test_offline_reports_name_their_themes_and_cite_member_chunks(reconfigure, run_jobs, hotpot):
    rt, topic = built_topic(reconfigure, run_jobs, hotpot)
    first = run_rebuild(rt, topic.id)
    assert first["written"] >= 5 and first["method"] == "graph"
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims, embedding_model=rt.gateway.embedder.model)
    store = graph_store(rt, topic)
    reports = index.largest(100)
    chunk_index = rt.chunk_index(topic.id)
    for report in reports:
        assert report.method == "graph"
        sentences = list(report.sources)
        assert len(sentences) == len(set(sentences))  # no sentence repeated
        assert report.summary == " ".join(sentences) or not sentences
        members = store.chunk_ids_for(report.entity_ids)
        member_chunks = {c for chunks in members.values() for c in chunks}
        texts = {cid: " ".join(hit.text.split()) for cid, hit in chunk_index.read_hits(list(report.sources.values()))[0].items()}
        for sentence, chunk in report.sources.items():
            assert chunk in member_chunks  # every cited chunk is a member's
            assert sentence in texts[chunk], (sentence, chunk)  # and holds the sentence it is cited for
            assert re.match(r"^[\"'“A-Z0-9À-Ý]", sentence) and sentence[-1] in ".!?\"')”"  # whole sentences
    # The largest communities' titles say what they are about: their distinctive names, then kinds of things.
    oahu = next(r for r in reports if "Oahu" in r.key_entities)
    assert re.match(r"^[^:()]+: [a-z]+(?: and [a-z]+)?(?: \(.+\))?$", oahu.title), oahu.title  # not a bare list of names
    assert any(word in oahu.title for word in ("Hawaii", "Honolulu", "Oahu"))
    assert any(word in oahu.title.split(": ")[1] for word in ("islands", "counties", "places", "communities"))
    airports = next(r for r in reports if "airports" in r.title)
    assert any("International Airport" in e for e in airports.key_entities)

    # GLOBAL, offline: one line per theme, each citing the document of the sentence it quotes.
    result = list(ask(rt, topic, "What are the main themes of these documents?", route="GLOBAL", save=False))[-1]
    lines = [line for line in result.text.splitlines() if line.startswith("> **")]
    assert len(lines) == min(topic.settings.top_k_reports, len(reports))
    quoted = {r.title: r for r in reports}
    for line in lines:
        title, sentence_and_file = line[4:].split("**: ", 1)
        match = re.fullmatch(r"(.+) \[([^\[\]]+\.txt)\]", sentence_and_file)
        assert match, line  # exactly one file cited per line
        sentence, file_name = match.groups()
        report = quoted[title]
        chunk = report.sources[sentence]
        assert chunk_index.read_hits([chunk])[0][chunk].file_name == file_name

    # The same graph again: nothing is rewritten. A new offline report format: the graph-built reports are
    # rewritten once, then kept.
    assert run_rebuild(rt, topic.id)["written"] == 0
    original = communities.GRAPH_REPORT_FORMAT
    try:
        communities.GRAPH_REPORT_FORMAT = original + "-next"
        again = run_rebuild(rt, topic.id)
        assert again["written"] == first["written"] and again["kept"] == 0
        assert run_rebuild(rt, topic.id)["written"] == 0
    finally:
        communities.GRAPH_REPORT_FORMAT = original


def test_offline_global_answers_a_question_about_a_kind_of_thing_with_the_communities_made_of_it(reconfigure, run_jobs, hotpot):
    rt, topic = built_topic(reconfigure, run_jobs, hotpot)
    run_rebuild(rt, topic.id)
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims, embedding_model=rt.gateway.embedder.model)
    store = graph_store(rt, topic)
    reports = {r.community_id: r for r in index.largest(1000)}
    members = {cid: store.entities(r.entity_ids) for cid, r in reports.items()}
    chunk_index = rt.chunk_index(topic.id)
    for question, kind in [
        ("What kinds of places are described?", "PLACE"),
        ("Which people do these documents talk about, and what are they known for?", "PERSON"),
    ]:
        trace = Trace("chat", "q")
        context = GlobalRetriever(rt, topic, topic.settings, GLOBAL_MAP).retrieve(RetrievalQuery(question), trace)
        assert next(e for e in trace.events if e.step == "global_select").data["subject"] == [kind]
        assert len(context.items) == topic.settings.top_k_reports
        of_kind = {cid: [e for e in found if e.type == kind] for cid, found in members.items()}
        chosen = [item.id for item in context.items]
        for item in context.items:
            title, point = item.text.removeprefix("Community: ").split("\n- ")
            names = [e.name for e in of_kind[item.id]] + [a for e in of_kind[item.id] for a in e.aliases]
            assert any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", point) for n in names), (kind, point)  # about them
            listed = title.rsplit(" (", 1)[1].removesuffix(")").removesuffix(" …").split(", ")
            assert set(listed) <= set(names), (kind, title)  # the title lists members of the kind
            chunk = reports[item.id].sources[point]  # a documents' sentence, cited to the chunk that holds it
            assert item.provenance[0].file_name == chunk_index.read_hits([chunk])[0][chunk].file_name
        # No community with fewer than three members of the kind while one with more was left out.
        assert all(len(of_kind[cid]) >= 3 for cid in chosen), [len(of_kind[cid]) for cid in chosen]
        assert all(len(reports[cid].entity_ids) > 2 for cid in chosen)
        # The answer: one line per community, each with the sentence it was chosen with and the file that holds it.
        answer = list(ask(rt, topic, question, route="GLOBAL", save=False))[-1].text
        lines = [line for line in answer.splitlines() if line.startswith("> **")]
        assert len(lines) == len(context.items)
        for line, item in zip(lines, context.items, strict=True):
            assert item.text.split("\n- ")[1] in line and line.endswith(f"[{item.provenance[0].file_name}]")
    # The places answer reaches the Oahu and airport communities, the largest made of places.
    places = GlobalRetriever(rt, topic, topic.settings, GLOBAL_MAP).retrieve(
        RetrievalQuery("What kinds of places are described?"), Trace("chat", "q")
    )
    assert any("Oahu" in reports[item.id].key_entities for item in places.items)
    assert any("airports" in reports[item.id].title for item in places.items)
