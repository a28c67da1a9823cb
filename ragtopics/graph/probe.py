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

from ragtopics.graph.communities import MIN_REPORT_ENTITIES, detect_communities, half_graph_growth
from ragtopics.graph.corrections import load_rules
from ragtopics.graph.dedup import MODEL_BATCH_PAIRS, deduplicate, partner_keys
from ragtopics.graph.extract import looks_like_toc_or_index
from ragtopics.graph.ingest import graph_items, graph_store, remapped, titled_text
from ragtopics.graph.model import Entity, Relationship
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
        entities, relationships: the graph the probed files make, merged as the rules merge (with the stored
            entities they changed, if the Topic has a graph).
    """

    calls: list[int]
    chunks: int
    entities: list[Entity]
    relationships: list[Relationship]

    def community_growth(self, resolution: float, *, seed: int = 42) -> tuple[int, float]:
        """The communities of the probed graph and how their number grows with the graph.

        Leiden at ``resolution`` (:func:`~ragtopics.graph.communities.detect_communities`) on the probed graph
        gives ``R`` communities of two or more entities among its ``N`` entities; the same on the graph of a
        fixed half of the probed chunks (:func:`~ragtopics.graph.communities.half_graph_growth`) gives ``R½`` among
        ``N½``, so ``R(N') = R·(N'/N)^β`` with ``β = ln(R/R½) / ln(N/N½)``, kept within 0-1.5 (1 when either
        graph has no community), as :meth:`~ragtopics.ingest.cost.GraphOutlook.reports` does after a rebuild.

        Returns:
            ``(R, β)``.
        """
        communities = detect_communities(self.entities, self.relationships, resolution=resolution, seed=seed)
        reportable = sum(1 for c in communities if c.size >= MIN_REPORT_ENTITIES)
        n_half, r_half, _ = half_graph_growth(self.entities, self.relationships, communities, resolution=resolution, seed=seed)
        n = len(self.entities)
        if reportable <= 0 or r_half <= 0 or not 0 < n_half < n:
            return reportable, 1.0
        return reportable, min(1.5, max(0.0, math.log(reportable / r_half) / math.log(n / n_half)))


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
    relationships: list[Relationship] = []
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
        entities, found_relationships = graph_items([(cid, x) for (cid, _), x in zip(kept, extractions, strict=True)])
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
        relationships += remapped(found_relationships, result.mapping)
    return DedupProbe(calls, chunks, list(gathered.values()), relationships)
