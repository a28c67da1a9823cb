"""Offline GLOBAL answers on a HotpotQA GraphRAG Topic: what a reader learns about the main themes.

Ingests the first ``--passages`` passages of ``shared/eval/hotpotqa`` (or ``RAGTOPICS_EVAL_DIR``) into one
GraphRAG Topic (NLP extraction, one file per passage named after its title), rebuilds its communities with
the reports written from the graph alone (no language model endpoint), prints the largest communities'
titles and summaries, then asks overview questions by the GLOBAL way with the bundled model (extractive
answers: no model writes anything) and prints each answer as the user sees it.

``python -m bench.themes [--data-dir DIR] [--passages 150] [--reports 8] [--rewrite] [QUESTION ...]``: with a
folder, the Redis data and the Topic stay there and a second run skips the ingest (the rebuild runs every time
and rewrites what is not current; ``--rewrite`` drops the stored reports first). Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.run import eval_dir, load_eval_data, throwaway_runtime
from ragtopics.answer.turn import ask
from ragtopics.documents.uploads import receive_upload
from ragtopics.errors import NotFoundError
from ragtopics.graph.community_index import CommunityIndex
from ragtopics.graph.refresh import run_rebuild
from ragtopics.ingest.pipeline import ingest_document
from ragtopics.topics.topics import create_topic, get_topic

TOPIC = "themes-graph"
QUESTIONS = (
    "What are the main themes of these documents?",
    "What kinds of places are described?",
    "Which people do these documents talk about, and what are they known for?",
)


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the Topic, rebuild its communities, print the reports and the answers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the Redis data here (a second run skips the ingest)")
    parser.add_argument("--passages", type=int, default=150, help="the first N passages of the set")
    parser.add_argument("--reports", type=int, default=8, help="largest communities whose reports are printed")
    parser.add_argument("--rewrite", action="store_true", help="drop the stored reports first, so every one is written again")
    parser.add_argument("questions", nargs="*", default=list(QUESTIONS))
    args = parser.parse_args(argv)
    corpus = dict(list(load_eval_data(eval_dir()).corpus.items())[: args.passages])
    with throwaway_runtime(args.data_dir, prefix="ragtopics-themes-") as rt:
        try:
            topic = get_topic(rt, TOPIC)
        except NotFoundError:
            topic = create_topic(rt, TOPIC, kind="graphrag", settings={"graph_extraction_method": "NLP"})
            t0 = time.perf_counter()
            for title, sentences in corpus.items():
                ingest_document(rt, receive_upload(rt, topic, f"{title}.txt", "".join(sentences).encode()).id)
            print(f"{len(corpus)} passages ingested in {time.perf_counter() - t0:.1f} s", flush=True)
            rt.redis.bgrewriteaof()
        index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims, embedding_model=rt.gateway.embedder.model)
        if args.rewrite:
            index.drop()
        result = run_rebuild(rt, topic.id)
        print(
            f"communities: {result.get('communities')}, reports written {result.get('written')}, kept {result.get('kept')}",
            flush=True,
        )
        for hit in index.largest(args.reports):
            print(f"\n## {hit.title}  ({len(hit.entity_ids)} entities, {hit.method})\n{hit.summary}", flush=True)
        topic = get_topic(rt, topic.id)
        for question in args.questions:
            updates = list(ask(rt, topic, question, route="GLOBAL", save=False))
            print(f"\n### {question}\n{updates[-1].text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
