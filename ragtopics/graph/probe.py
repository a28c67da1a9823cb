"""A dry run of the deduplication an upload's files would meet, for the cost preview.

How many of a corpus's names are near-misses of each other (and so go to the Deduplication model) is the
corpus's own: on 50-passage samples of the evaluation sets, 11 to 28 of 50 one-passage uploads asked the
model. A figure measured on other files cannot know it; the files themselves can. Before this installation
has measured any Deduplication call, the cost preview of a GraphRAG Topic with the NLP extraction method
runs the first :data:`PROBE_CHUNKS` chunks of the upload through the bundled NLP extraction
(:func:`~ragtopics.graph.nlp.extract_nlp_many`) and the deduplication rules
(:func:`~ragtopics.graph.dedup.deduplicate`, no model), file after file as the upload stores them, and counts
the unclear pairs each file would send to the model. Nothing is written: the stored partners are read
(:meth:`~ragtopics.graph.store.GraphStore.dedup_partners`) and the earlier files' entities kept in memory.

The LLM extraction method is not probed: its names come from the model, which the preview must not call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragtopics.graph.corrections import load_rules
from ragtopics.graph.dedup import MODEL_BATCH_PAIRS, deduplicate, partner_keys
from ragtopics.graph.extract import looks_like_toc_or_index
from ragtopics.graph.ingest import graph_items, graph_store, titled_text
from ragtopics.graph.model import Entity
from ragtopics.graph.nlp import extract_nlp_many
from ragtopics.runtime import Runtime

#: Chunks of an upload the probe runs through the extraction and the deduplication rules at most (files are taken
#: whole, in upload order, the first one even if it is longer). Near-miss names come in clusters of related files,
#: so a short prefix says little about the rest: on HotpotQA passages 700-849 the first 50 one-passage uploads asked
#: the model 8 times, the last 50 26 times; on passages 300-449, 28 and 16 times. The probe is exact within it
#: and the rest is extrapolated (:func:`~ragtopics.ingest.cost.graph_calls`).
PROBE_CHUNKS = 256


@dataclass
class DedupProbe:
    """What the probe found for the first files of an upload.

    Attributes:
        calls: Deduplication calls of each probed file (the first ``len(calls)`` files), ``⌈unclear pairs / 8⌉``
            (:data:`~ragtopics.graph.dedup.MODEL_BATCH_PAIRS` pairs a call).
        chunks: chunks probed in all.
    """

    calls: list[int]
    chunks: int


def probe_dedup(rt: Runtime, topic, files: Sequence[tuple[str, Sequence[str]]], *, max_chunks: int | None = None) -> DedupProbe:
    """Run the first files of an upload through the NLP extraction and the deduplication rules; store nothing.

    Each file is deduplicated as the upload will do it: against the stored entities it may pair with and the
    entities the earlier files of the upload brought (merged as the rules merge them), with the Topic's
    operator splits. The unclear pairs are not decided (no model), so a later file meets the earlier ones'
    names unmerged where a model might have merged them: a small bias towards more pairs.

    Args:
        topic: a GraphRAG Topic.
        files: ``(file name, chunk texts)`` of each file, in upload order.
        max_chunks: stop before a file that would take the chunks probed past this (the first file is always
            taken); None: :data:`PROBE_CHUNKS`.

    Returns:
        The calls of the files probed, a prefix of ``files``.
    """
    limit = PROBE_CHUNKS if max_chunks is None else max_chunks
    store = graph_store(rt, topic)
    stored = store.exists()
    apart = load_rules(rt, topic.id).apart_pairs()
    gathered: dict[str, Entity] = {}  # entities the probed files brought or changed, by id
    calls: list[int] = []
    chunks = 0
    for name, texts in files:
        if calls and chunks + len(texts) > limit:
            break
        chunks += len(texts)
        kept = [
            (f"probe:{len(calls)}:{i}", titled_text(name, i, t)) for i, t in enumerate(texts) if not looks_like_toc_or_index(t)
        ]
        extractions = extract_nlp_many([text for _, text in kept])
        entities, _ = graph_items([(cid, x) for (cid, _), x in zip(kept, extractions, strict=True)])
        if not entities:
            calls.append(0)
            continue
        partners, common = [], frozenset[str]()
        if stored:
            found = store.dedup_partners(partner_keys(entities))
            partners, common = [gathered.get(e.id, e) for e in found.entities], found.common_words
        seen = {e.id for e in partners}
        existing = partners + [e for eid, e in gathered.items() if eid not in seen]
        result = deduplicate(
            entities,
            existing,
            embed=lambda texts: rt.gateway.embed_short(texts, purpose="deduplication"),
            common_words=common,
            apart=apart,
        )
        calls.append(math.ceil(len(result.unclear) / MODEL_BATCH_PAIRS))
        gathered.update((e.id, e) for e in result.entities)
    return DedupProbe(calls, chunks)
