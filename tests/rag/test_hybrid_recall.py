"""HYBRID must never find fewer gold passages than DENSE: a small fixed corpus, both strategies, one metric.

The corpus is built the way HotpotQA questions break a keyword search that a number narrows: each
question names a thing and a year; the passage that answers it names the thing but not the year,
while three other passages share the year (and the question's general words) but not the thing.
A keyword search that lets the year alone pick its candidates (or weights it as an identifier like
``E-4711``) gives the distractors a second vote in fusion and HYBRID falls below DENSE (recall@1
0.00 against 0.50); searched by all its words, with the year weighted as a word, it does not.
"""

from __future__ import annotations

from ragtopics.answer.context import RetrievalQuery
from ragtopics.prompts.resolve import resolve_prompts
from ragtopics.quality.evaluate import retrieval_metrics
from ragtopics.rag.retriever import ChunkRetriever
from ragtopics.topics.topics import create_topic
from ragtopics.tracing.trace import Trace
from tests.ingest.test_ingest import upload

#: (thing named in the question, year, the answer's passage without the year, what the distractors are about)
CASES = [
    ("Telmar bridge", "1911", "The Telmar bridge over the Ardent river was built by the Orsk ironworks.", "bridge"),
    (
        "Vesk lighthouse",
        "1887",
        "The Vesk lighthouse on the northern cape was designed by the engineer Mira Halden.",
        "lighthouse",
    ),
    (
        "Quarn observatory",
        "1932",
        "The Quarn observatory houses a refracting telescope bought from a Dutch maker.",
        "observatory",
    ),
    ("Ilsby canal", "1854", "The Ilsby canal links the salt works to the harbour and was dug by hand.", "canal"),
    ("Brenmoor library", "1902", "The Brenmoor library keeps the county's oldest printed map in its east wing.", "library"),
    ("Oskel dam", "1968", "The Oskel dam holds back a reservoir that supplies three valley towns.", "dam"),
]
QUESTIONS = {
    "Telmar bridge": "Who built the Telmar bridge that opened in 1911?",
    "Vesk lighthouse": "Who designed the Vesk lighthouse first lit in 1887?",
    "Quarn observatory": "What telescope does the Quarn observatory, founded in 1932, house?",
    "Ilsby canal": "What does the Ilsby canal, opened in 1854, link?",
    "Brenmoor library": "What does the Brenmoor library, founded in 1902, keep?",
    "Oskel dam": "What does the Oskel dam, finished in 1968, hold back?",
}
DISTRACTOR = [
    "In {year} a new {kind} was opened in the capital, and crowds came to see who built and designed it.",
    "The {year} report on every {kind} in the province listed what each one holds, links and houses.",
    "A {kind} finished in {year} in the south was soon famous; its founders kept a diary of who opened it.",
]


def _corpus() -> dict[str, str]:
    files = {}
    for n, (thing, year, text, kind) in enumerate(CASES):
        files[f"{thing.lower().replace(' ', '-')}.txt"] = text
        for m, template in enumerate(DISTRACTOR):
            files[f"note-{n}-{m}.txt"] = template.format(year=year, kind=kind)
    return files


def _recall(rt, topic, k: int) -> float:
    retriever = ChunkRetriever(rt, topic.id, topic.settings, resolve_prompts(rt, topic.id)["rerank"])
    scores = []
    for thing, question in QUESTIONS.items():
        context = retriever.retrieve(RetrievalQuery(question), Trace("chat", question))
        files = [item.provenance[0].file_name for item in context.items if item.kind == "chunk"]
        scores.append(retrieval_metrics(files, [f"{thing.lower().replace(' ', '-')}.txt"])[f"recall@{k}"])
    return sum(scores) / len(scores)


def test_hybrid_recall_is_at_least_dense_recall(rt, run_jobs):
    topics = {}
    for strategy in ("DENSE", "HYBRID"):
        topics[strategy] = create_topic(
            rt,
            f"Landmarks {strategy}",
            settings={"retrieval_strategy": strategy, "top_k_results": 5, "min_similarity_score": 0.0},
        )
        for name, text in _corpus().items():
            upload(rt, topics[strategy], name, text.encode())
    run_jobs()
    for k in (1, 5):
        dense, hybrid = _recall(rt, topics["DENSE"], k), _recall(rt, topics["HYBRID"], k)
        assert hybrid >= dense, f"recall@{k}: HYBRID {hybrid:.2f} < DENSE {dense:.2f}"
        print(f"recall@{k}: DENSE {dense:.2f}, HYBRID {hybrid:.2f}")
