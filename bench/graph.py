"""GraphRAG benchmark: graph quality and extraction cost on HotpotQA, cached re-uploads, incremental community rebuilds.

Everything runs in-process (``ingest_document`` without fan-out) on the runtime the caller
gives (a throwaway embedded Redis, the bundled embedding model). Where a model reply is
needed, the runtime is pointed for a while at a scripted OpenAI-compatible server on
loopback (``tests/scripted_llm.py``): it answers at once, so those figures are what the
product does around the model, and every request it gets is counted. Figures, one per
line, never asserted:

8.1 **Graph quality (NLP method), real pipeline.** The gold passages of the first
    :data:`GRAPH_QUESTIONS` questions (``--full``: all 994 passages), one ``<title>.txt``
    file each, ingested into one GraphRAG Topic: ingest time, chunks/s, time per step,
    entities and relationships (``graph_stats``), and the share of titles found as an entity
    by name or alias (``GraphStore.entity_by_name``); the goal is 0.90 or more. The cut: on
    2 shared cores a passage takes about 2 s (mostly embedding its entities), so all 994
    take about 35 minutes.
8.2 **Extraction speed.** NLP extraction (``extract_chunk``, one chunk at a time, the way an
    upload runs it) of every chunk of all 994 passages, cut as the Topic cuts them, against
    embedding :data:`SPEED_CHUNKS` of the same chunks (batches of 64, and one per call), in
    chunks/s; and the share of titles the extraction names (name or alias, before
    deduplication and without the store): the all-passages quality figure at a fraction of
    the cost of 8.1.
8.3 **Extraction calls per chunk.** :data:`CALL_PASSAGES` passages uploaded to an LLM Topic and
    to an NLP Topic against the scripted server: Graph Extraction requests per chunk (1 for
    LLM, 0 for NLP) and the other model requests (Deduplication of unclear pairs).
8.4 **Edited re-upload.** A file of :data:`EDIT_PARAGRAPHS` passages as paragraphs, Chunk Size
    set so each paragraph is one chunk, LLM method: extraction requests of the first upload
    and of a re-upload with one paragraph changed (the goal: only the changed chunk, 1).
8.5 **Incremental community rebuild.** On the graph of 8.1, with the Community Report role on
    the scripted server: a first rebuild, one with nothing changed, one after a passage is
    deleted and one after it is uploaded again: reports written / kept / deleted, model calls,
    seconds, and the communities whose content hash is new (what a rebuild should write).
8.6 **Memory.** The process's peak resident size (``ru_maxrss``, MB) before and after the
    section, Redis ``used_memory`` (MB), and the section's wall time and this process's CPU time.

``python -m bench.graph`` runs this section alone (``--full``: all passages in 8.1);
``python -m bench.run`` runs it with the rest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator

import numpy as np

from ragtopics.documents.delete import delete_document
from ragtopics.documents.uploads import clean_file_name, get_document, receive_upload
from ragtopics.graph.community_index import CommunityIndex
from ragtopics.graph.extract import extract_chunk
from ragtopics.graph.ingest import extraction_text, graph_store
from ragtopics.graph.model import normalize_name
from ragtopics.graph.refresh import run_rebuild
from ragtopics.graph.report import graph_stats
from ragtopics.ingest.chunking import split_recursive
from ragtopics.ingest.pipeline import ingest_document
from ragtopics.llm.gateway import ModelGateway
from ragtopics.runtime import Runtime
from ragtopics.settings.env import Settings
from ragtopics.storage.chunk_index import ChunkRecord
from ragtopics.topics.topics import Topic, create_topic, get_topic
from tests.scripted_llm import ScriptedLLM, capitalised_entities

#: Questions whose gold passages 8.1 ingests (all 994 passages take about 35 minutes on 2 shared cores).
GRAPH_QUESTIONS = 40
#: Chunks embedded in part 2, against NLP extraction of every chunk.
SPEED_CHUNKS = 100
#: Embedding batch of the upload pipeline (``ragtopics.ingest.pipeline._EMBED_STEP``).
PIPELINE_EMBED_BATCH = 64
#: Passages uploaded to count extraction calls per chunk (section 3).
CALL_PASSAGES = 15
#: Paragraphs of the edited file (section 4), each between these lengths (characters) so that
#: each is one chunk at :data:`EDIT_CHUNK_SIZE` and no two fit in one.
EDIT_PARAGRAPHS = 20
EDIT_PARAGRAPH_CHARS = (300, 500)
EDIT_CHUNK_SIZE = 600
EDIT_SENTENCE = " This paragraph was edited for the benchmark."
#: Share of titles the graph should hold as entities.
TITLE_GOAL = 0.9


def bench_graph(rt: Runtime, data, figure, section, *, full: bool = False) -> None:
    """Run the six parts of the module docstring on ``rt``, printing through ``figure`` and ``section``.

    Args:
        rt: the runtime (throwaway Redis, bundled embedder already loaded); its model settings are
            switched to the scripted server for parts 3-5 and restored afterwards.
        data: ``bench.run.EvalData`` (``corpus``: title → sentences; ``questions``).
        figure, section: ``bench.run``'s printers.
        full: ingest all passages in part 1 (about 2 s each on 2 shared cores), not the gold
            passages of :data:`GRAPH_QUESTIONS` questions.
    """
    from bench.run import peak_rss_mb, redis_memory_mb  # bench.run imports this module, so not at the top

    started, started_cpu = time.perf_counter(), time.process_time()
    peak_before = peak_rss_mb()
    topic, stored_name = bench_graph_quality(rt, data, graph_titles(data, full), figure, section)
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")
    bench_extraction_speed(rt, topic, data, figure, section)
    figure("peak memory (ru_maxrss)", peak_rss_mb(), "MB")
    with scripted_model(rt) as llm:
        bench_calls_per_chunk(rt, data, llm, figure, section)
        bench_edited_reupload(rt, data, llm, figure, section)
        bench_incremental_rebuild(rt, topic, data, stored_name, llm, figure, section)
    section("8.6 GraphRAG: memory and time")
    figure("peak memory before the section", peak_before, "MB")
    figure("peak memory after (ru_maxrss)", peak_rss_mb(), "MB")
    figure("redis used_memory", redis_memory_mb(rt), "MB")
    figure("GraphRAG section time", time.perf_counter() - started, "s")
    # On a shared machine the wall time above swings with the neighbours' load; the CPU time less so.
    figure("  CPU time of this process (all threads)", time.process_time() - started_cpu, "s")


# ----------------------------------------------------------------------------- scripted model


@contextlib.contextmanager
def scripted_model(rt: Runtime) -> Iterator[ScriptedLLM]:
    """Point every language-model role of ``rt`` at a scripted server for the block (the embedder stays).

    The server answers ``graph_extraction`` (:func:`capitalised_entities`), ``deduplication`` (no
    pair is the same) and ``community_report`` (a fixed title and summary) at once.
    """
    server = ScriptedLLM().start()
    server.replies.update(
        {
            "graph_extraction": capitalised_entities,
            "deduplication": json.dumps({"decisions": []}),
            "community_report": json.dumps({"title": "A group of passages", "summary": "Things the passages name together."}),
        }
    )
    saved_settings, saved_gateway = rt.settings, rt.gateway
    rt.settings = Settings(
        **{**saved_settings.model_dump(by_alias=True), "LLM_BASE_URL": server.base_url, "LLM_MODEL": "scripted"}, _env_file=None
    )
    rt._gateway = ModelGateway(rt.settings, embedder=saved_gateway.embedder)
    try:
        yield server
    finally:
        rt.settings, rt._gateway = saved_settings, saved_gateway
        server.stop()


def _upload(rt: Runtime, topic: Topic, file_name: str, text: str):
    """Receive and index one file in-process; returns the ``IngestResult``."""
    return ingest_document(rt, receive_upload(rt, topic, file_name, text.encode()).id)


def _passage(sentences: list[str]) -> str:
    return "".join(sentences)


# ----------------------------------------------------------------------------- 1. quality


def graph_titles(data, full: bool) -> list[str]:
    """The passages ingested in part 1: every passage (``full``), else the gold passages of the first
    :data:`GRAPH_QUESTIONS` questions, in order of first appearance."""
    if full:
        return list(data.corpus)
    titles = (title for q in data.questions[:GRAPH_QUESTIONS] for title, _ in q["supporting_facts"])
    return list(dict.fromkeys(titles))


def bench_graph_quality(rt: Runtime, data, titles: list[str], figure, section) -> tuple[Topic, dict[str, str]]:
    """Ingest ``titles``' passages into one NLP GraphRAG Topic; print time, graph size and titles found as entities.

    Returns:
        The Topic, and ``{title: stored file name}``.
    """
    which = "all passages" if len(titles) == len(data.corpus) else f"the gold passages of {GRAPH_QUESTIONS} questions"
    section(f"8.1 GraphRAG graph quality ({len(titles)} passages: {which}; NLP method, in-process)")
    t0 = time.perf_counter()
    extract_chunk("Marie Curie worked in Paris.", "NLP", None)  # loads the spaCy model, not timed below
    figure("NLP model load", time.perf_counter() - t0, "s")
    topic = create_topic(rt, "bench-graph", kind="graphrag", settings={"graph_extraction_method": "NLP"})
    stored_name: dict[str, str] = {}
    chunks = 0
    step_ms: dict[str, float] = {}
    t0 = time.perf_counter()
    for title in titles:
        doc = receive_upload(rt, topic, f"{title}.txt", _passage(data.corpus[title]).encode())
        stored_name[title] = doc.file_name
        result = ingest_document(rt, doc.id)
        chunks += result.chunk_count
        for event in result.trace:
            step_ms[event["step"]] = step_ms.get(event["step"], 0.0) + event["duration_ms"]
    total_s = time.perf_counter() - t0
    figure("files / chunks", f"{len(titles):,} / {chunks:,}")
    figure("ingest time", total_s, "s")
    figure("chunks/s (whole GraphRAG ingest)", chunks / total_s)
    for step, label in [
        ("extract_graph", "extraction"),
        ("deduplicate", "deduplication"),
        ("embed", "chunk embedding"),
        ("embed_entities", "entity embedding"),
        ("store", "store (chunks + graph)"),
    ]:
        figure(f"  time in {label}", step_ms.get(step, 0.0) / 1000, "s")
    stats = graph_stats(rt, get_topic(rt, topic.id))
    figure("entities / relationships", f"{stats['entities']:,} / {stats['relationships']:,}")
    figure("graph chunks / documents", f"{stats['graph_chunks']:,} / {stats['documents']:,}")
    store = graph_store(rt, topic)
    found = {title for title in titles if store.entity_by_name(title) is not None}
    gold = {title for q in data.questions for title, _ in q["supporting_facts"]} & set(titles)
    _coverage(figure, "gold titles found as entities (graph)", gold, found)
    if len(gold) < len(titles):
        _coverage(figure, "all titles found as entities (graph)", set(titles), found)
    return topic, stored_name


def _coverage(figure, label: str, titles: set[str], found: set[str]) -> None:
    """Print the share of ``titles`` in ``found`` next to the goal."""
    share = len(titles & found) / len(titles) if titles else 0.0
    figure(label, f"{share:.3f} ({len(titles & found)} of {len(titles)}; goal >= {TITLE_GOAL})")


# ----------------------------------------------------------------------------- 2. speed


def passage_chunks(data, size: int, overlap: int) -> list[tuple[str, str]]:
    """``(title, extraction text)`` of every chunk of every passage, cut as the upload cuts them.

    The extraction text is what :func:`~ragtopics.graph.ingest.extraction_text` gives the
    extractor: the first chunk of a file is preceded by the file's title (its stored name).
    """
    out = []
    for title, sentences in data.corpus.items():
        file_name = clean_file_name(f"{title}.txt")
        for n, piece in enumerate(split_recursive(_passage(sentences), size=size, overlap=overlap)):
            record = ChunkRecord(
                chunk_id="",
                document_id="",
                file_name=file_name,
                position=n,
                text=piece.text,
                embedding=np.zeros(0, dtype=np.float32),
            )
            out.append((title, extraction_text(record)))
    return out


def bench_extraction_speed(rt: Runtime, topic: Topic, data, figure, section) -> None:
    """NLP extraction of every passage's chunks against embedding, in chunks/s; titles found by extraction alone."""
    cfg = topic.settings
    chunks = passage_chunks(data, cfg.chunk_size, cfg.chunk_overlap)
    section(
        f"8.2 GraphRAG extraction speed (NLP on all {len(chunks):,} chunks of the {len(data.corpus)} passages, "
        f"embedding on {min(SPEED_CHUNKS, len(chunks))} of them)"
    )
    per_chunk = []
    names: set[str] = set()
    for _, text in chunks:
        t0 = time.perf_counter()
        outcome = extract_chunk(text, "NLP", None)
        per_chunk.append(time.perf_counter() - t0)
        names.update(normalize_name(n) for e in outcome.extraction.entities for n in (e.name, *e.aliases))
    texts = [text for _, text in chunks[:SPEED_CHUNKS]]
    t0 = time.perf_counter()
    for i in range(0, len(texts), PIPELINE_EMBED_BATCH):
        rt.gateway.embed(texts[i : i + PIPELINE_EMBED_BATCH])
    batched_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for text in texts:
        rt.gateway.embed([text])
    single_s = time.perf_counter() - t0
    nlp_rate = len(per_chunk) / sum(per_chunk)
    figure("mean chunk length", float(np.mean([len(t) for _, t in chunks])), "chars")
    figure("NLP extraction chunks/s (one at a time)", nlp_rate)
    figure(
        "  per chunk p50 / p95", f"{np.percentile(per_chunk, 50) * 1000:.1f} / {np.percentile(per_chunk, 95) * 1000:.1f}", "ms"
    )
    figure(f"embedding chunks/s (batches of {PIPELINE_EMBED_BATCH})", len(texts) / batched_s)
    figure("embedding chunks/s (one chunk per call)", len(texts) / single_s)
    figure("NLP chunks/s / batched embedding chunks/s", nlp_rate / (len(texts) / batched_s), "x")
    found = {title for title in data.corpus if normalize_name(title) in names}
    gold = {title for q in data.questions for title, _ in q["supporting_facts"]}
    _coverage(figure, "gold titles named by extraction (no store)", gold, found)
    _coverage(figure, "all titles named by extraction (no store)", set(data.corpus), found)


# ----------------------------------------------------------------------------- 3. calls per chunk


def bench_calls_per_chunk(rt: Runtime, data, llm: ScriptedLLM, figure, section) -> None:
    """Upload the same passages to an LLM and an NLP Topic; count the requests the scripted server got."""
    passages = list(data.corpus.items())[:CALL_PASSAGES]
    section(f"8.3 GraphRAG extraction calls per chunk ({len(passages)} passages, scripted model)")
    for method in ("LLM", "NLP"):
        topic = create_topic(
            rt, f"bench-graph-calls-{method.lower()}", kind="graphrag", settings={"graph_extraction_method": method}
        )
        llm.requests.clear()
        t0 = time.perf_counter()
        chunks = sum(_upload(rt, topic, f"{title}.txt", _passage(s)).chunk_count for title, s in passages)
        took = time.perf_counter() - t0
        extraction = len(llm.prompts("graph_extraction"))
        others = sorted({name for name, _ in llm.requests} - {"graph_extraction"})
        other = {name: len(llm.prompts(name)) for name in others}
        figure(f"{method}: chunks / extraction requests", f"{chunks} / {extraction}")
        figure(f"{method}: extraction requests per chunk", extraction / chunks if chunks else 0.0)
        figure(f"{method}: other model requests", ", ".join(f"{k} {v}" for k, v in other.items()) or "none")
        figure(f"{method}: ingest chunks/s (instant model)", chunks / took)


# ----------------------------------------------------------------------------- 4. edited re-upload


def edit_paragraphs(corpus: dict[str, list[str]]) -> list[str]:
    """:data:`EDIT_PARAGRAPHS` passages whose length lies in :data:`EDIT_PARAGRAPH_CHARS`."""
    low, high = EDIT_PARAGRAPH_CHARS
    texts = (_passage(s).strip() for s in corpus.values())
    return [t for t in texts if low <= len(t) <= high and "\n" not in t][:EDIT_PARAGRAPHS]


def bench_edited_reupload(rt: Runtime, data, llm: ScriptedLLM, figure, section) -> None:
    """Upload a file of paragraphs (one chunk each, LLM method), then re-upload it with one paragraph edited."""
    paragraphs = edit_paragraphs(data.corpus)
    section(f"8.4 GraphRAG edited re-upload ({len(paragraphs)} paragraphs, Chunk Size {EDIT_CHUNK_SIZE}, LLM, scripted)")
    topic = create_topic(
        rt,
        "bench-graph-edit",
        kind="graphrag",
        settings={"graph_extraction_method": "LLM", "chunk_size": EDIT_CHUNK_SIZE, "chunk_overlap": 0},
    )
    edited = list(paragraphs)
    edited[len(edited) // 2] += EDIT_SENTENCE
    for label, version in [("first upload", paragraphs), ("re-upload, one paragraph edited", edited)]:
        llm.requests.clear()
        t0 = time.perf_counter()
        result = _upload(rt, topic, "paragraphs.txt", "\n\n".join(version))
        took = time.perf_counter() - t0
        graph = get_document(rt, result.document_id).indexed_with.get("graph", {})
        figure(f"{label}: chunks", result.chunk_count)
        figure(f"{label}: extraction requests", len(llm.prompts("graph_extraction")))
        figure(f"{label}: chunks extracted / cached", f"{graph.get('chunks_extracted', 0)} / {graph.get('chunks_cached', 0)}")
        figure(f"{label}: time", took, "s")
    figure("changed chunks (goal: re-upload requests = this)", 1)


# ----------------------------------------------------------------------------- 5. incremental rebuild


def bench_incremental_rebuild(
    rt: Runtime, topic: Topic, data, stored_name: dict[str, str], llm: ScriptedLLM, figure, section
) -> None:
    """Rebuild the HotpotQA Topic's communities, then again after nothing, a delete and a re-upload of one passage."""
    title = data.questions[0]["supporting_facts"][0][0]
    section("8.5 GraphRAG community rebuild (the graph of 8.1, Community Report on the scripted model)")
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims, embedding_model=rt.gateway.embedder.model)

    def rebuild(label: str) -> None:
        before = index.get_hashes()
        llm.requests.clear()
        result = run_rebuild(rt, topic.id)
        after = index.get_hashes()
        changed = sum(1 for cid, stored in after.items() if before.get(cid) != stored)
        figure(
            f"{label}",
            f"written {result['written']:,}, kept {result['kept']:,}, deleted {result['deleted']:,}, {result['seconds']:.2f} s",
        )
        figure(
            "  model calls (rebuild / scripted server)", f"{result['model_calls']:,} / {len(llm.prompts('community_report')):,}"
        )
        figure(
            "  communities new or changed (content hash)",
            f"{changed:,} of {len(after):,} with reports ({result['communities']:,} in all)",
        )

    rebuild("first rebuild")
    rebuild("second rebuild, nothing changed")
    delete_document(rt, topic, stored_name[title])
    rebuild(f"after deleting one passage ({title})")
    _upload(rt, get_topic(rt, topic.id), f"{title}.txt", _passage(data.corpus[title]))
    rebuild("after uploading it again")


# ----------------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    """Run the GraphRAG section alone, on a throwaway Redis as ``bench.run`` does (``--full``: all passages in part 1)."""
    from bench.run import eval_dir, figure, load_eval_data, section, throwaway_runtime

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    data = load_eval_data(eval_dir())
    with throwaway_runtime() as rt:
        bench_graph(rt, data, figure, section, full="--full" in argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
