"""Cost preview: what an upload will take (chunks, model calls by kind, tokens, time, money) before it is indexed.

:func:`estimate_upload` looks at the files and the Topic's settings and stores nothing:

- **Chunks.** Text, Markdown, HTML, source code and structured files are read and chunked
  with the Topic's chunker and cut to the embedder's window, as the upload will do, so their
  count is exact (method ``chunked``). Documents (PDF and Office files, converted by Docling)
  and pictures are not converted: their chunks and pictures come from the file's size and the
  chunks per byte measured on earlier uploads of that type (method ``from size``).
- **Model calls** per kind (:data:`KINDS`), from the settings that make them: Graph Extraction
  (LLM method; one call per chunk, chunks that look like a table of contents skipped), SEMANTIC
  context lines, NARRATE, LLM keywords, picture descriptions, deduplication (a real Deduplication
  endpoint) and community reports at the next rebuild (a real Community Report endpoint). The last two
  follow the graph, not the file: :func:`graph_calls` (entity mentions per character, the graph's size as
  each file meets it, :func:`dedup_calls`, :meth:`GraphOutlook.reports`).
- **Tokens and time** per call: the averages measured on this installation (:class:`Figures`),
  or the stated defaults (:data:`DEFAULTS`) before any upload made such a call.
- **Money** only for roles whose endpoint has a price per 1M input/output tokens (Admin → LLM
  Configuration).

After each stored upload :func:`record_upload` adds what the upload really took to the figures
(``usage_figure`` rows) and, when the upload's estimate was stored (:func:`store_estimate`), its
actual counts beside it (``upload_cost`` rows), so the estimate can be judged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import numpy as np
from sqlalchemy import CursorResult, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, delete, select

from ragtopics.documents.uploads import clean_file_name, is_docling_available
from ragtopics.errors import RagTopicsError
from ragtopics.ingest.chunking import Piece
from ragtopics.ingest.pipeline import CONTEXT_DOCUMENT_CHARS, _cap_to_window, _chunk, ingest_settings
from ragtopics.ingest.readers import read_file
from ragtopics.ingest.structured import pack_records_counted
from ragtopics.kinds import kind_of
from ragtopics.llm.endpoints import stored_overrides
from ragtopics.prompts.templates import NARRATE
from ragtopics.runtime import Runtime
from ragtopics.settings.env import ROLES
from ragtopics.storage.metadata import UploadCostRow, UsageFigureRow, utcnow
from ragtopics.text.file_types import DOCUMENT_TYPES, IMAGE_TYPES, extension_of
from ragtopics.topics.topics import get_topic
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of model call an upload makes.

    Attributes:
        role: the model role that answers it (its endpoint's price applies).
        unit: what one call is made for: ``chunk``, ``picture`` or ``record``.
        label: how the console and the CLI name it.
        at_rebuild: made at the next community rebuild, not during the upload.
    """

    role: str
    unit: str
    label: str
    at_rebuild: bool = False


#: Kinds of model calls, by the prompt name the gateway records them under.
KINDS: dict[str, Kind] = {
    "graph_extraction": Kind("graph_extraction", "chunk", "extraction"),
    "context_line": Kind("language_model", "chunk", "SEMANTIC context lines"),
    "narrate": Kind("language_model", "record", "NARRATE"),
    "keywords": Kind("language_model", "chunk", "LLM keywords"),
    "describe_picture": Kind("image_describer", "picture", "picture descriptions"),
    "picture_entities": Kind("image_describer", "picture", "pictures in the graph"),
    "deduplication": Kind("deduplication", "chunk", "deduplication"),
    "community_report": Kind("community_report", "chunk", "community reports (next rebuild)", at_rebuild=True),
}


@dataclass(frozen=True, slots=True)
class Default:
    """The figures of a kind of call before this installation has measured any.

    Attributes:
        per_unit: calls per chunk, picture or record.
        tokens_in: prompt tokens per call besides the text sent (the prompt's own words).
        tokens_out: reply tokens per call.
        seconds: seconds per call.
    """

    per_unit: float
    tokens_in: float
    tokens_out: float
    seconds: float


#: Defaults before any measurement. Calls per unit follow the pipeline (one call per chunk, picture or
#: record); deduplication and community reports are counted from the graph instead (:data:`GRAPH_DEFAULTS`),
#: their ``per_unit`` is unused. Prompt tokens are the prompt's own words (its default text at
#: about 4 characters a token) plus the text sent, counted per call; reply tokens are about half of each
#: call's reply limit; 2 s a call is a mid-sized model on one GPU. Text sent is counted as 4 characters a token.
DEFAULTS: dict[str, Default] = {
    "graph_extraction": Default(1.0, 350, 400, 4.0),
    "context_line": Default(1.0, 60, 40, 1.0),
    "narrate": Default(1.0, 40, 100, 2.0),
    "keywords": Default(1.0, 40, 40, 1.0),
    "describe_picture": Default(1.0, 800, 120, 3.0),
    "picture_entities": Default(1.0, 900, 30, 2.0),
    "deduplication": Default(0.3, 300, 150, 2.0),
    "community_report": Default(1.2, 1500, 400, 5.0),
}
#: Seconds to embed one chunk before any measurement (the bundled MiniLM on a few CPU cores).
DEFAULT_EMBED_SECONDS = 0.01
#: Seconds of other work per chunk (chunking, storing; for GraphRAG also NLP extraction, the deduplication rules
#: and the entities' embeddings) before any measurement, by :func:`work_name`; measured on the benchmark's subset.
#: A GraphRAG Topic's is fitted as ``w0 + w1·N`` once :data:`MIN_FIT_OBSERVATIONS` uploads were measured (:func:`fit_work`).
DEFAULT_WORK_SECONDS = {"rag": 0.02, "graphrag-nlp": 2.0, "graphrag-llm": 1.5}
#: Characters per token, for text sent to a model before any measurement.
CHARS_PER_TOKEN = 4.0
#: Characters of readable text per byte of a document file, before uploads of its type were measured.
DEFAULT_CHARS_PER_BYTE = {"pdf": 0.2, "docx": 0.3, "pptx": 0.05, "xlsx": 0.3}
#: Pictures per byte of a document file, before uploads of its type were measured (one per 100 KB; xlsx none).
DEFAULT_PICTURES_PER_BYTE = {"pdf": 1e-5, "docx": 1e-5, "pptx": 2e-5, "xlsx": 0.0}
#: Seconds to read (convert) one byte of a document with Docling before any measurement (about 1 s per 50 KB).
DEFAULT_READ_SECONDS_PER_BYTE = 2e-5
#: Measured figures are used once they cover at least this many calls (or chunks, for file types).
MIN_MEASURED = 3
#: Redis key (under the Topic's prefix) of the chunks stored since its last community rebuild.
SINCE_REBUILD_KEY = "rt:{topic_id}:cost:chunks-since-rebuild"
#: Redis list of the latest uploads' own figures for a fit (``dedup:<work>``, ``work:<work>``), JSON per upload.
OBSERVATIONS_KEY = "rt:cost:observations:{name}"
#: Redis hash of a Topic's last probe (:func:`graph_calls`): ``<kind>:<file>`` (:func:`_probe_id`) → that file's
#: calls of the kind in the preview, and ``scale`` for the deduplication calls of files not in it; kept
#: :data:`PROBE_TTL_S` so the estimates kept with the files of the upload that follows the preview agree with it.
PROBE_KEY = "rt:{topic_id}:cost:dedup-probe"
PROBE_TTL_S = 3600
#: Uploads kept per observation list (the latest).
MAX_OBSERVATIONS = 2000
#: Uploads a fit needs before it replaces the defaults.
MIN_FIT_OBSERVATIONS = 10


@dataclass(frozen=True, slots=True)
class GraphDefault:
    """The graph figures of an extraction method before this installation has measured any.

    NLP (the bundled rules): pooled over six samples of 50 passages that the benchmark's rounds
    (``bench.estimate``: HotpotQA passages 0-299) do not use, measured by ``python -m bench.estimate
    --fit-defaults`` as an installation measures them (one passage a file into an empty Topic, then a community
    rebuild at resolution 1.0, in ``corpus.json`` order): HotpotQA passages 300-349, 400-449, 500-549 and
    600-649, MuSiQue (``musique-dev``) passages 0-49 and 400-449. Mentions and new entities per character are
    the pooled totals over the pooled text (per sample 0.024-0.029 and 0.020-0.024), the hazard ``(a, b)`` is
    the maximum-likelihood fit over the 300 uploads (:func:`fit_hazard`; ``b`` came out 0) and
    ``pairs_per_hazard`` their unclear pairs over their summed hazard; communities per entity are the six
    rebuilds' communities over their entities (per sample 0.070-0.091). How many names of a corpus are
    near-misses of each other varies most: 11 to 28 of a sample's 50 uploads asked the Deduplication model, so
    the deduplication default is the roughest; one upload's measurement replaces it.

    LLM (the benchmark's scripted extraction: every capitalised word of four or more letters an entity, each
    linked to the next; a stand-in until an upload measured a real model): measured on HotpotQA passages 0-49.

    Attributes:
        mentions_per_char: entity mentions the extraction finds per character of chunk text.
        new_per_char: entities new to the graph per character (mentions less those merged).
        hazard: ``(a, b)`` of a name's chance of an unclear pair, ``a + b·√N`` per mention (see :func:`dedup_calls`).
        pairs_per_hazard: unclear pairs per unit of that hazard (see :func:`dedup_calls`).
        reports_per_entity: communities of two or more entities per entity (Leiden, resolution 1.0).
    """

    mentions_per_char: float
    new_per_char: float
    hazard: tuple[float, float]
    pairs_per_hazard: float
    reports_per_entity: float


#: Graph figures by :func:`work_name` before any measurement.
GRAPH_DEFAULTS = {
    "graphrag-nlp": GraphDefault(0.0262, 0.0220, (0.0305, 0.0), 1.25, 0.0806),
    "graphrag-llm": GraphDefault(0.026, 0.0187, (0.0, 0.0031), 0.86, 0.037),
}


class Figures:
    """The running totals measured on this installation (``usage_figure`` rows), read once.

    Args:
        rows: name → row, as :func:`load_figures` reads them.
    """

    def __init__(self, rows: dict[str, UsageFigureRow]):
        self.rows = rows

    def _row(self, name: str, enough: float = MIN_MEASURED) -> UsageFigureRow | None:
        row = self.rows.get(name)
        return row if row is not None and row.count >= enough and row.units > 0 else None

    def per_unit(self, kind: str, work: str = "") -> tuple[float, bool]:
        """Calls per unit of ``kind`` (for a Topic of :func:`work_name` ``work``) and whether it was measured (else
        :data:`DEFAULTS`)."""
        row = self.rows.get(call_figure(kind, work))
        if row is not None and row.units >= MIN_MEASURED:  # a measured 0 (no call needed) counts too
            return row.count / row.units, True
        return DEFAULTS[kind].per_unit, False

    def per_call(self, kind: str, work: str = "") -> tuple[float, float, float] | None:
        """Measured ``(tokens in, tokens out, seconds)`` per call of ``kind``; None before :data:`MIN_MEASURED` calls."""
        row = self.rows.get(call_figure(kind, work))
        if row is None or row.count < MIN_MEASURED:
            return None
        return row.tokens_in / row.count, row.tokens_out / row.count, row.seconds / row.count

    def embed_seconds(self) -> tuple[float, bool]:
        """Seconds to embed one chunk, and whether measured."""
        row = self.rows.get("embedding")
        if row is not None and row.count >= MIN_MEASURED:
            return row.seconds / row.count, True
        return DEFAULT_EMBED_SECONDS, False

    def chunks_per_byte(self, ext: str, chunk_size: int, overlap: int) -> tuple[float, bool]:
        """Chunks per byte of a document type at this chunk size: measured, else from :data:`DEFAULT_CHARS_PER_BYTE`."""
        row = self._row(f"file:{ext}")
        if row is not None:
            return row.count / row.units, True
        return DEFAULT_CHARS_PER_BYTE.get(ext, 0.2) / max(1, chunk_size - overlap), False

    def pictures_per_byte(self, ext: str) -> float:
        """Pictures per byte of a document type: measured once its files gave chunks, else the default."""
        if self._row(f"file:{ext}") is not None and f"pictures:{ext}" in self.rows:
            row = self.rows[f"pictures:{ext}"]
            return row.count / row.units if row.units else 0.0
        return DEFAULT_PICTURES_PER_BYTE.get(ext, 0.0)

    def work_seconds(self, name: str) -> tuple[float, bool]:
        """Seconds of other work per chunk for a :func:`work_name`, and whether measured."""
        row = self.rows.get(f"work:{name}")
        if row is not None and row.count >= MIN_MEASURED:
            return row.seconds / row.count, True
        return DEFAULT_WORK_SECONDS.get(name, 0.0), False

    def read_seconds_per_byte(self, ext: str) -> float:
        """Seconds to read one byte of a file type: measured, else the Docling default (documents) or 0."""
        row = self.rows.get(f"read:{ext}")
        if row is not None and row.count >= 1 and row.units > 0:
            return row.seconds / row.units
        return DEFAULT_READ_SECONDS_PER_BYTE if ext in DOCUMENT_TYPES else 0.0


# ----------------------------------------------------------------------------- the graph's calls


def observe(rt: Runtime, name: str, values: list[float]) -> None:
    """Keep one upload's own figures for a fit (:data:`OBSERVATIONS_KEY`; the latest :data:`MAX_OBSERVATIONS`)."""
    key = OBSERVATIONS_KEY.format(name=name)
    pipe = rt.redis.pipeline()
    pipe.rpush(key, json.dumps([float(v) for v in values]))
    pipe.ltrim(key, -MAX_OBSERVATIONS, -1)
    pipe.execute()


def observations(rt: Runtime, name: str) -> list[list[float]]:
    """The uploads' figures kept under ``name`` by :func:`observe`, oldest first."""
    return [json.loads(v) for v in rt.redis.lrange(OBSERVATIONS_KEY.format(name=name), 0, -1)]


def clear_figures(rt: Runtime) -> None:
    """Forget everything measured (figures and observations): the next estimate starts from the defaults."""
    with rt.metadata.session() as s:
        s.exec(delete(UsageFigureRow))
    keys = list(rt.redis.scan_iter(OBSERVATIONS_KEY.format(name="*")))
    if keys:
        rt.redis.delete(*keys)


def _hazards(obs: np.ndarray, a: float, b: float) -> np.ndarray:
    return obs[:, 0] * (a + b * np.sqrt(obs[:, 1]))


def _log_likelihood(obs: np.ndarray, asked: np.ndarray, a: float, b: float) -> float:
    lam = _hazards(obs, a, b)
    with np.errstate(divide="ignore"):
        return float(np.sum(np.where(asked, np.log(-np.expm1(-lam)), -lam)))


def fit_hazard(obs: list[list[float]]) -> tuple[float, float]:
    """Maximum-likelihood ``(a, b)`` of the chance that an upload asks the Deduplication model (see :func:`dedup_calls`).

    Each observation is ``[mentions e, graph entities N before it, unclear pairs, calls]``; an upload asked
    when it had an unclear pair. The log-likelihood ``Σ_asked log(1 - exp(-λ)) - Σ_not λ`` with
    ``λ = e·(a + b·√N)`` is concave in ``(a, b)``: ``b`` is searched on a logarithmic grid (and 0), then
    between the best point's neighbours, each time with the best ``a ≥ 0`` for that ``b`` (golden-section searches).
    """
    data = np.asarray(obs, dtype=float)[:, :4]
    asked = data[:, 2] > 0
    if not asked.any():
        return 0.0, 0.0
    key = hashlib.sha1(data.tobytes()).digest()  # each file of a batch is estimated on the same observations
    if key not in _FITTED:
        if len(_FITTED) >= 32:
            _FITTED.clear()
        _FITTED[key] = _fit_hazard(data, asked)
    return _FITTED[key]


_FITTED: dict[bytes, tuple[float, float]] = {}


def _fit_hazard(data: np.ndarray, asked: np.ndarray) -> tuple[float, float]:
    scale = float(np.mean(data[:, 0])) or 1.0

    def golden(f, lo: float, hi: float) -> float:  # the maximum of a concave function on [lo, hi]
        for _ in range(30):  # to 1e-6 of the interval
            m1, m2 = hi - (hi - lo) / 1.618034, lo + (hi - lo) / 1.618034
            lo, hi = (m1, hi) if f(m1) < f(m2) else (lo, m2)
        return (lo + hi) / 2

    def best_a(b: float) -> tuple[float, float]:  # the profile likelihood: best a for this b
        a = golden(lambda x: _log_likelihood(data, asked, x, b), 0.0, 20.0 / scale)
        return _log_likelihood(data, asked, a, b), a

    grid = [0.0, *np.geomspace(1e-7, 1.0, 49).tolist()]
    i = max(range(len(grid)), key=lambda k: best_a(grid[k])[0])
    b = golden(lambda x: best_a(x)[0], grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)])
    return best_a(b)[1], b


def dedup_calls(mentions: float, entities: float, hazard: tuple[float, float], pairs_per_hazard: float) -> float:
    """Expected Deduplication calls of one upload (:func:`ragtopics.graph.dedup.deduplicate`, rule 5).

    An upload asks the model about its unclear pairs, :data:`~ragtopics.graph.dedup.MODEL_BATCH_PAIRS` a call.
    Each of its ``e`` entity mentions may find an unclear partner among its own names or the graph's ``N``
    stored ones; the chance grows with the graph but less than in proportion, since later names repeat earlier
    ones: hazard ``a + b·√N`` per mention, so the upload asks with probability ``P = 1 - exp(-e·(a + b·√N))``
    and has ``λ = pairs_per_hazard · e·(a + b·√N)`` unclear pairs on average. One call when it asks, and
    ``⌈pairs / 8⌉`` on a large upload (about ``λ/8 + 1/2``, half a batch rounded up): ``max(P, λ/8 + P/2)``.
    ``a``, ``b`` are fitted on earlier uploads (:func:`fit_hazard`), ``pairs_per_hazard`` is their pairs over
    their summed hazard.

    Args:
        mentions: the upload's expected entity mentions ``e``.
        entities: entities in the graph before it ``N``.
        hazard: ``(a, b)``.
        pairs_per_hazard: unclear pairs per unit of hazard.

    Returns:
        Expected calls (a fraction).
    """
    # deferred: the graph package imports ingest at module level, and loads only for GraphRAG Topics
    from ragtopics.graph.dedup import MODEL_BATCH_PAIRS

    lam = mentions * (hazard[0] + hazard[1] * math.sqrt(max(0.0, entities)))
    asks = -math.expm1(-lam)
    return max(asks, pairs_per_hazard * lam / MODEL_BATCH_PAIRS + asks / 2)


@dataclass
class GraphOutlook:
    """What a GraphRAG Topic's next uploads will find and do to its graph (figures measured, else defaults).

    Attributes:
        entities: entities in the graph now.
        mentions_per_char, new_per_char: entity mentions and entities new to the graph per character of chunk text.
        hazard, pairs_per_hazard: the Deduplication model's figures (:func:`dedup_calls`).
        reports_per_entity: communities of two or more entities per entity, before the Topic's own rebuild.
        last: the Topic's last community rebuild at its Resolution (None: none yet).
        work: ``(w0, w1)``: seconds of other work per chunk ``w0 + w1·N`` (None: not fitted yet).
        measured: kind → whether its figures were measured here.
        probed: chunks of the upload run through the probe (:func:`graph_calls`; 0: none).
        probed_kinds: what the probe decided (``deduplication calls``, ``community reports``).
    """

    entities: float
    mentions_per_char: float
    new_per_char: float
    hazard: tuple[float, float]
    pairs_per_hazard: float
    reports_per_entity: float
    last: Any = None
    work: tuple[float, float] | None = None
    measured: dict[str, bool] = field(default_factory=dict)
    probed: int = 0
    probed_kinds: list[str] = field(default_factory=list)

    def reports(self, entities: float) -> float:
        """Community reports the next rebuild writes once the graph has ``entities`` entities.

        Written reports = communities of two or more entities then (``R(N)``) less the stored reports whose
        community comes out unchanged. Without a rebuild of the Topic: ``R(N) = ρ·N`` (``ρ``: communities per
        entity measured on this installation's rebuilds at this Resolution, else the default), nothing stored.
        After one (``N₀`` entities, ``R₀`` reports), Leiden's own growth on this graph decides: the rebuild
        also grouped the graph that half of the Topic's chunks make (``N½`` entities, ``R½`` communities,
        ``K½`` of them unchanged in the whole; :func:`ragtopics.graph.communities.half_graph_growth`), so
        ``R(N) = R₀·(N/N₀)^β`` with ``β = ln(R₀/R½) / ln(N₀/N½)``, and a stored report survives a growth by
        ``N/N₀`` with probability ``s^(ln(N/N₀) / ln(N₀/N½))``, ``s = K½/R½`` being its survival of the growth
        from the half graph to the whole. Written: ``R(N) - R₀·survival``. A graph whose communities are
        separate groups grows them in proportion (``β ≈ 1``, most reports kept); one connected graph keeps
        about as many communities, each larger, and changes nearly all of them (``β`` and ``s`` near 0).
        A rebuild made before the half graph was measured counts as ``β = 1`` and ``s = N½/N₀ = 1/2``.
        """
        run = self.last
        if run is None or not run.entities:
            return self.reports_per_entity * max(0.0, entities)
        n0, r0 = float(run.entities), float(run.communities - run.skipped_small)
        if r0 <= 0:  # no community of two: the new entities' own
            return self.reports_per_entity * max(0.0, entities - n0)
        if entities <= n0:
            return 0.0
        if run.half_entities and run.half_reportable and run.half_entities < n0:
            span = math.log(n0 / run.half_entities)
            beta = min(1.5, max(0.0, math.log(r0 / run.half_reportable) / span))
            survive = run.half_kept / run.half_reportable
        else:
            span, beta, survive = math.log(2.0), 1.0, 0.5
        grown = math.log(entities / n0)
        kept = r0 * (survive ** (grown / span) if survive > 0 else 0.0)
        return max(0.0, r0 * (entities / n0) ** beta - kept)

    def work_seconds(self, chunks: float, entities: float) -> float | None:
        """Seconds of other work for ``chunks`` chunks into a graph of ``entities``; None when not fitted."""
        if self.work is None:
            return None
        return chunks * (self.work[0] + self.work[1] * entities)


def fit_work(obs: list[list[float]]) -> tuple[float, float] | None:
    """Least-squares ``(w0, w1)`` of an upload's other work ``y ≈ c·(w0 + w1·N)`` seconds (``c`` chunks, ``N``
    graph entities before it), from observations ``[c, N, y]``: partner look-ups, the deduplication rules and
    the graph writes grow with the graph. Both kept ≥ 0 (a negative slope: ``w1 = 0``, ``w0 = Σy/Σc``)."""
    data = np.asarray(obs, dtype=float)
    if len(data) < MIN_FIT_OBSERVATIONS or not data[:, 0].sum():
        return None
    x = np.stack([data[:, 0], data[:, 0] * data[:, 1]], axis=1)
    try:
        w0, w1 = np.linalg.solve(x.T @ x, x.T @ data[:, 2])
    except np.linalg.LinAlgError:
        w0, w1 = -1.0, -1.0
    if w0 < 0 or w1 < 0:
        return float(data[:, 2].sum() / data[:, 0].sum()), 0.0
    return float(w0), float(w1)


def graph_outlook(rt: Runtime, topic, work: str, figures: Figures) -> GraphOutlook:
    """The :class:`GraphOutlook` of a GraphRAG Topic: its graph's size and last rebuild, this installation's figures."""
    # deferred: the graph package imports ingest at module level, and loads only for GraphRAG Topics
    from ragtopics.graph.communities import last_run
    from ragtopics.graph.ingest import graph_store

    default = GRAPH_DEFAULTS.get(work, GRAPH_DEFAULTS["graphrag-nlp"])
    store = graph_store(rt, topic)
    outlook = GraphOutlook(
        entities=float(store.entity_count()) if store.exists() else 0.0,
        mentions_per_char=default.mentions_per_char,
        new_per_char=default.new_per_char,
        hazard=default.hazard,
        pairs_per_hazard=default.pairs_per_hazard,
        reports_per_entity=default.reports_per_entity,
    )
    for name, attr in ((f"graph:mentions:{work}", "mentions_per_char"), (f"graph:new:{work}", "new_per_char")):
        row = figures.rows.get(name)
        if row is not None and row.units >= 1000 and row.samples >= MIN_MEASURED:  # a few uploads' text
            setattr(outlook, attr, row.count / row.units)
    obs = observations(rt, f"dedup:{work}")
    if len(obs) >= MIN_FIT_OBSERVATIONS:
        outlook.hazard = fit_hazard(obs)
        data = np.asarray(obs, dtype=float)
        total = float(_hazards(data, *outlook.hazard).sum())
        outlook.pairs_per_hazard = float(data[:, 2].sum()) / total if total > 0 else outlook.pairs_per_hazard
        outlook.measured["deduplication"] = True
    resolution = f"{float(topic.settings.resolution):g}"
    row = figures.rows.get(f"communities:{work}:{resolution}")
    if row is not None and row.units > 0:
        outlook.reports_per_entity = row.count / row.units
        outlook.measured["community_report"] = True
    run = last_run(rt.redis, topic.id)
    if run is not None and f"{run.resolution:g}" == resolution:
        outlook.last = run
        outlook.measured["community_report"] = True
    outlook.work = fit_work(observations(rt, f"work:{work}"))
    return outlook


def graph_calls(
    rt: Runtime,
    topic,
    kinds: set[str],
    figures: Figures,
    files: list[tuple[FileEstimate, float]],
    *,
    pending_chars: float = 0.0,
    probe: list[tuple[str, list[str] | None]] | None = None,
) -> GraphOutlook:
    """Fill in the deduplication calls and community reports of a GraphRAG Topic's files, one after another.

    Files are stored one at a time (each deduplicates against the graph the earlier ones left): file ``i``
    with ``c_i`` characters of chunk text brings ``e_i = mentions_per_char·c_i`` mentions into a graph of
    ``N_i = N + new_per_char·(c_1 + … + c_(i-1))`` entities (:func:`dedup_calls`), and its community reports
    are what it adds to those of the next rebuild: ``reports(N_(i+1)) - reports(N_i)`` (:meth:`GraphOutlook.reports`).

    Deduplication calls, before this installation has measured any, under the NLP extraction method: the first
    files (up to :data:`~ragtopics.graph.probe.PROBE_CHUNKS` chunks) are run through the extraction and the
    deduplication rules (:func:`~ragtopics.graph.probe.probe_dedup`), which gives their calls; the files after
    them get the modelled calls scaled by the probe's ratio to the model over the probed files,
    ``(Σ probed + ½) / (Σ modelled + ½)`` (the halves keep a probe that found nothing from promising nothing
    for a much larger rest). Community reports into a Topic with no graph yet, before any rebuild measured them
    at its Resolution, come from the same probe: the probed graph's communities and their growth
    (:func:`_apply_probe`). The result is kept for an hour (:data:`PROBE_KEY`), so the estimates kept with the
    files when they are then uploaded agree with the preview; a file not probed gets the scaled model.

    Args:
        files: each file's estimate (not refused) with the characters of its chunks the extraction reads.
        pending_chars: characters of chunk text of files received before these and not in the graph yet (the
            same upload's earlier files, estimated one at a time): the graph is taken as grown by them first.
        probe: ``(file name, chunk texts or None)`` of each of ``files`` for the deduplication probe;
            None (the estimate kept with one received file): the Topic's last probe is read instead.

    Returns:
        The outlook used.
    """
    work = work_name(topic, kinds)
    outlook = graph_outlook(rt, topic, work, figures)
    n = outlook.entities + outlook.new_per_char * max(0.0, pending_chars)
    grown: list[tuple[float, float]] = []  # the graph's entities before and after each file
    for f, chars in files:
        mentions, added = outlook.mentions_per_char * chars, outlook.new_per_char * chars
        if "deduplication" in kinds:
            f.calls["deduplication"] = dedup_calls(mentions, n, outlook.hazard, outlook.pairs_per_hazard)
        if "community_report" in kinds:
            f.calls["community_report"] = max(0.0, outlook.reports(n + added) - outlook.reports(n))
        grown.append((n, n + added))
        n += added
    if work == "graphrag-nlp" and files:
        _apply_probe(rt, topic, kinds, outlook, files, grown, probe)
    return outlook


def _apply_probe(
    rt: Runtime,
    topic,
    kinds: set[str],
    outlook: GraphOutlook,
    files: list[tuple[FileEstimate, float]],
    grown: list[tuple[float, float]],
    probe: list[tuple[str, list[str] | None]] | None,
) -> None:
    """:func:`graph_calls`' probe of the files (``probe`` given), or what the last one found (one received file).

    Deduplication calls: see :func:`graph_calls`. Community reports, into a Topic with no graph yet and no
    communities measured at its Resolution: the probed graph's communities and their growth
    (:meth:`~ragtopics.graph.probe.DedupProbe.community_growth`), ``R(N) = R·(N/N̂)^β`` with ``N̂`` the modelled
    entities after the probed files, so the probed files' reports add up to the probed graph's communities.
    """
    key = PROBE_KEY.format(topic_id=topic.id)
    if probe is None:
        stored = rt.redis.hgetall(key)
        if stored:
            scale = float(stored.get(b"scale", b"1"))
            for f, chars in files:
                for kind in PER_METHOD & f.calls.keys():
                    value = stored.get(f"{kind}:{_probe_id(f.file_name, chars)}".encode())
                    if value is not None:
                        f.calls[kind] = float(value)
                    elif kind == "deduplication" and not outlook.measured.get(kind):
                        f.calls[kind] *= scale
        return
    dedup = "deduplication" in kinds and not outlook.measured.get("deduplication")
    reports = "community_report" in kinds and not outlook.measured.get("community_report") and not outlook.entities
    usable: list[tuple[str, list[str]]] = []
    for name, texts in probe:
        if texts is None:  # a document estimated from its size: the probe stops before it
            break
        usable.append((name, texts))
    if not (dedup or reports) or not usable:
        return
    # deferred: the graph package imports ingest at module level, and loads only for GraphRAG Topics
    from ragtopics.graph.probe import probe_dedup

    found = probe_dedup(rt, topic, usable)
    k = len(found.calls)
    kept: dict[str, float] = {}
    if dedup:
        modelled = sum(f.calls["deduplication"] for f, _ in files[:k])
        kept["scale"] = scale = (sum(found.calls) + 0.5) / (modelled + 0.5)
        for i, (f, _) in enumerate(files):
            f.calls["deduplication"] = float(found.calls[i]) if i < k else f.calls["deduplication"] * scale
        outlook.probed_kinds.append("deduplication calls")
    if reports:
        communities, beta = found.community_growth(float(topic.settings.resolution))
        probed_entities = grown[k - 1][1]

        def total(n: float) -> float:
            return communities * (n / probed_entities) ** beta if probed_entities > 0 else 0.0

        for (f, _), (before, after) in zip(files, grown, strict=True):
            f.calls["community_report"] = max(0.0, total(after) - total(before))
        outlook.probed_kinds.append("community reports")
    for f, chars in files:
        for kind in PER_METHOD & f.calls.keys():
            kept[f"{kind}:{_probe_id(f.file_name, chars)}"] = f.calls[kind]
    outlook.probed = found.chunks
    pipe = rt.redis.pipeline()
    pipe.delete(key)
    pipe.hset(key, mapping=cast(Any, kept))
    pipe.expire(key, PROBE_TTL_S)
    pipe.execute()


def _probe_id(file_name: str, chars: float) -> str:
    """What identifies a probed file in :data:`PROBE_KEY`: its name and characters of chunk text."""
    return hashlib.sha256(f"{file_name}\0{chars:.0f}".encode()).hexdigest()


def load_figures(rt: Runtime) -> Figures:
    """The figures measured on this installation so far (none on a new one)."""
    with rt.metadata.session() as s:
        return Figures({row.name: row for row in s.exec(select(UsageFigureRow))})


def add_figures(rt: Runtime, increments: dict[str, dict[str, float]]) -> None:
    """Add to the running totals: name → ``{"count", "units", "tokens_in", "tokens_out", "seconds"}`` (missing: 0).

    Each row is increased in one UPDATE, so workers that finish uploads at the same time add up.
    """
    fields = ("count", "units", "tokens_in", "tokens_out", "seconds")
    for name, inc in increments.items():
        values = {f: float(inc.get(f, 0.0)) for f in fields}
        for _ in range(2):  # a row another worker inserted meanwhile: update it instead
            with rt.metadata.session() as s:
                statement = (
                    update(UsageFigureRow)
                    .where(col(UsageFigureRow.name) == name)
                    .values(
                        **{f: getattr(UsageFigureRow, f) + values[f] for f in fields},
                        samples=UsageFigureRow.samples + 1,
                        updated_at=utcnow(),
                    )
                )
                changed = cast(CursorResult[Any], s.execute(statement))  # an UPDATE's result, which has a rowcount
                if changed.rowcount:
                    break
            try:
                with rt.metadata.session() as s:
                    s.add(
                        UsageFigureRow(
                            name=name,
                            samples=1,
                            count=values["count"],
                            units=values["units"],
                            tokens_in=values["tokens_in"],
                            tokens_out=values["tokens_out"],
                            seconds=values["seconds"],
                        )
                    )
                break
            except IntegrityError:
                continue


@dataclass
class FileEstimate:
    """The estimate for one file.

    Attributes:
        file_name: the file's name.
        size_bytes: its size.
        chunks: chunks it will give.
        method: ``chunked`` (read and chunked now: exact) or ``from size`` (documents and pictures).
        pictures: pictures it holds (estimated from size for documents).
        records: records of a structured file (0 otherwise).
        calls: kind → model calls it will make (fractions for per-chunk ratios).
        refused: why the upload would refuse the file ("" when it would take it).
    """

    file_name: str
    size_bytes: int
    chunks: float = 0.0
    method: str = "chunked"
    pictures: float = 0.0
    records: int = 0
    calls: dict[str, float] = field(default_factory=dict)
    refused: str = ""


@dataclass
class CallEstimate:
    """The model calls of one kind over the whole upload.

    Attributes:
        kind: the prompt name (a key of :data:`KINDS`).
        role: the model role that answers it.
        calls: how many.
        tokens_in, tokens_out: tokens sent and received, in all.
        seconds: the calls' time one after another.
        cost: in the endpoint's currency; None when its role has no price.
        measured: whether the per-call figures come from this installation (else :data:`DEFAULTS`).
    """

    kind: str
    role: str
    calls: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0
    seconds: float = 0.0
    cost: float | None = None
    measured: bool = False


@dataclass
class CostEstimate:
    """What an upload will take.

    Attributes:
        topic: the Topic's name.
        files: each file's estimate (refused ones included, with the reason).
        calls: kind → the model calls of that kind (only kinds the settings make).
        chunks: chunks of the files taken.
        embed_seconds: time to embed the chunks.
        read_seconds: time to read and convert the files.
        work_seconds: time of the upload's other work (chunking, storing; GraphRAG: NLP extraction, deduplication
            rules, the entities' embeddings).
        notes: what the operator should know about how it was made.
    """

    topic: str
    files: list[FileEstimate] = field(default_factory=list)
    calls: dict[str, CallEstimate] = field(default_factory=dict)
    chunks: float = 0.0
    embed_seconds: float = 0.0
    read_seconds: float = 0.0
    work_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """The upload's time: reading, embedding and every model call made during it, one after another."""
        return (
            self.read_seconds
            + self.embed_seconds
            + self.work_seconds
            + sum(c.seconds for c in self.calls.values() if not KINDS[c.kind].at_rebuild)
        )

    @property
    def cost(self) -> float | None:
        """The money of the priced calls (None when no role making calls has a price)."""
        priced = [c.cost for c in self.calls.values() if c.cost is not None]
        return sum(priced) if priced else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"topic", "chunks", "calls": {kind: {...}}, "tokens_in", "tokens_out", "seconds", "cost",
        "files": [...], "notes"}`` (counts rounded)."""
        calls = {
            k: {
                **asdict(c),
                "calls": round(c.calls),
                "tokens_in": round(c.tokens_in),
                "tokens_out": round(c.tokens_out),
                "seconds": round(c.seconds, 1),
                "cost": _money(c.cost),
                "label": KINDS[k].label,
                "at_rebuild": KINDS[k].at_rebuild,
            }
            for k, c in self.calls.items()
        }
        return {
            "topic": self.topic,
            "chunks": round(self.chunks),
            "calls": calls,
            "tokens_in": round(sum(c.tokens_in for c in self.calls.values())),
            "tokens_out": round(sum(c.tokens_out for c in self.calls.values())),
            "seconds": round(self.seconds, 1),
            "cost": _money(self.cost),
            "files": [
                {
                    **asdict(f),
                    "chunks": round(f.chunks, 2),
                    "pictures": round(f.pictures, 2),
                    "calls": {k: round(v, 2) for k, v in f.calls.items()},
                }
                for f in self.files
            ],
            "notes": list(self.notes),
        }

    def to_text(self) -> str:
        """The estimate as lines for a terminal."""
        taken = [f for f in self.files if not f.refused]
        exact = sum(1 for f in taken if f.method == "chunked")
        lines = [
            f"Cost estimate for {len(taken)} file(s) into Topic {self.topic!r} (nothing was stored):",
            f"  chunks: {round(self.chunks):,} ({exact} file(s) chunked now, {len(taken) - exact} estimated from size)",
        ]
        if not self.calls:
            lines.append("  model calls: none (only embeddings)")
        for c in self.calls.values():
            money = f", {_money_text(c.cost)}" if c.cost is not None else ""
            basis = "measured here" if c.measured else "default figures"
            lines.append(
                f"  {KINDS[c.kind].label}: {round(c.calls):,} call(s), {round(c.tokens_in):,} tokens in, "
                f"{round(c.tokens_out):,} out, ~{_duration(c.seconds)}{money} ({basis})"
            )
        lines.append(
            f"  time: ~{_duration(self.seconds)} (reading {_duration(self.read_seconds)}, embedding "
            f"{_duration(self.embed_seconds)}, other work {_duration(self.work_seconds)}, model calls one "
            "after another)"
        )
        lines.append(
            f"  cost: {_money_text(self.cost)}"
            if self.cost is not None
            else "  cost: no price entered for these endpoints (Admin → LLM Configuration)"
        )
        lines += [f"  refused {f.file_name}: {f.refused}" for f in self.files if f.refused]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The estimate as the Upload tab shows it."""
        taken = [f for f in self.files if not f.refused]
        exact = sum(1 for f in taken if f.method == "chunked")
        rows = ["| Calls | Count | Tokens in | Tokens out | Time | Cost | Figures |", "|---|---|---|---|---|---|---|"]
        for c in self.calls.values():
            rows.append(
                f"| {KINDS[c.kind].label} | {round(c.calls):,} | {round(c.tokens_in):,} | {round(c.tokens_out):,} | "
                f"{_duration(c.seconds)} | {_money_text(c.cost) if c.cost is not None else '—'} | "
                f"{'measured here' if c.measured else 'default'} |"
            )
        head = (
            f"**Cost estimate** for {len(taken)} file(s): **{round(self.chunks):,} chunks** ({exact} chunked now, "
            f"{len(taken) - exact} estimated from size) · about **{_duration(self.seconds)}** · "
            + (f"**{_money_text(self.cost)}**" if self.cost is not None else "no price entered")
        )
        body = "\n".join(rows) if self.calls else "No model calls: only the chunks' embeddings."
        extra = [f"- Refused: {f.file_name}: {f.refused}" for f in self.files if f.refused] + [f"- {n}" for n in self.notes]
        return "\n\n".join([head, body, "\n".join(extra)]).strip()


def _money(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _money_text(value: float | None) -> str:
    return "" if value is None else f"{value:,.4f}" if value < 1 else f"{value:,.2f}"


def _duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


#: Kinds whose calls per chunk depend on the graph the extraction makes: measured per extraction method.
PER_METHOD = frozenset({"deduplication", "community_report"})


def call_figure(kind: str, work: str = "") -> str:
    """The ``usage_figure`` name of a kind of call: ``call:<kind>``, or ``call:<kind>:<work name>`` for
    :data:`PER_METHOD` kinds (their rate differs between NLP and LLM extraction)."""
    return f"call:{kind}:{work}" if kind in PER_METHOD and work else f"call:{kind}"


def work_name(topic, kinds: set[str]) -> str:
    """What a Topic's upload work per chunk is measured under: ``rag``, ``graphrag-nlp`` or ``graphrag-llm``."""
    return kind_of(topic).upload_work("graph_extraction" in kinds)


def active_kinds(rt: Runtime, topic) -> set[str]:
    """The kinds of model calls the Topic's settings make at upload (and at the next rebuild), on these endpoints."""
    cfg = ingest_settings(topic.settings, rt)
    kinds: set[str] = set()
    if cfg.describe_pictures:
        kinds.add("describe_picture")
    if kind_of(topic).has_graph:
        # deferred: the graph package imports ingest at module level, and loads only for GraphRAG Topics
        from ragtopics.graph.communities import uses_bundled_model
        from ragtopics.graph.extract import choose_method
        from ragtopics.graph.pictures import uses_model

        if choose_method(topic.settings, rt.gateway) == "LLM":
            kinds.add("graph_extraction")
        if not rt.settings.endpoint("deduplication").is_local:
            kinds.add("deduplication")
        if cfg.store_pictures and uses_model(rt):
            kinds.add("picture_entities")
        if not uses_bundled_model(rt.gateway):
            kinds.add("community_report")
        return kinds
    if cfg.chunking_strategy == "SEMANTIC":
        kinds.add("context_line")
    if cfg.import_strategy == "NARRATE":
        kinds.add("narrate")
    if cfg.retrieval_strategy == "HYBRID" and cfg.keyword_enrichment == "LLM":
        kinds.add("keywords")
    return kinds


def endpoint_prices(rt: Runtime) -> dict[str, tuple[float | None, float | None]]:
    """Role → ``(price per 1M input tokens, per 1M output tokens)`` entered in the console.

    A role without an endpoint of its own set in the console is answered by the Language Model's
    endpoint unless the environment gives it one, and takes the Language Model's prices then.
    """
    rows = stored_overrides(rt)
    llm = rows.get("language_model")
    prices = {}
    for role in ROLES:
        row = rows.get(role)
        if row is None and llm is not None and not rt.settings.has_own_endpoint(role):
            row = llm
        if row is not None and (row.price_in_per_mtok is not None or row.price_out_per_mtok is not None):
            prices[role] = (row.price_in_per_mtok, row.price_out_per_mtok)
    return prices


def estimate_upload(rt: Runtime, topic, files: Iterable[tuple[str, bytes]]) -> CostEstimate:
    """Estimate what uploading ``files`` into ``topic`` will take; nothing is stored or queued.

    Args:
        topic: the Topic (:class:`~ragtopics.topics.topics.Topic`).
        files: ``(file name, bytes)`` of each file, as they would be uploaded.

    Returns:
        The estimate; a file the upload would refuse (type, size, too many chunks, unreadable)
        is listed with the reason and counts nothing.

    Raises:
        ConfigurationError: a setting the estimate needs is unusable (e.g. an unknown extraction method).
    """
    cfg = ingest_settings(topic.settings, rt)
    kinds = active_kinds(rt, topic)
    figures = load_figures(rt)
    estimate = CostEstimate(topic=topic.name, calls={k: CallEstimate(k, KINDS[k].role) for k in KINDS if k in kinds})
    text_chars: dict[str, float] = dict.fromkeys(kinds, 0.0)  # text each kind sends, for the default token counts
    graph_files: list[tuple[FileEstimate, float]] = []
    probe: list[tuple[str, list[str] | None]] = []  # the graph files' chunk texts, for the deduplication probe
    for name, data in files:
        f, chars, texts = _estimate_file(rt, topic, cfg, kinds, figures, name, data)
        estimate.files.append(f)
        if f.refused:
            continue
        estimate.chunks += f.chunks
        estimate.read_seconds += figures.read_seconds_per_byte(extension_of(f.file_name)) * f.size_bytes
        for kind, sent in chars.items():
            text_chars[kind] = text_chars.get(kind, 0.0) + sent
        graph_files.append((f, chars.get("graph", 0.0)))
        probe.append((f.file_name, texts))
    work = work_name(topic, kinds)
    per_work = figures.work_seconds(work)[0]
    estimate.work_seconds = per_work * estimate.chunks
    outlook = None
    if kind_of(topic).has_graph:
        outlook = graph_calls(rt, topic, kinds, figures, graph_files, probe=probe)
        if outlook.work is not None:  # the graph's work per chunk grows with the graph the upload finds
            entities, estimate.work_seconds = outlook.entities, 0.0
            for f, graph_chars in graph_files:
                estimate.work_seconds += outlook.work_seconds(f.chunks, entities) or 0.0
                entities += outlook.new_per_char * graph_chars
    for f, _ in graph_files:
        for kind, n in f.calls.items():
            estimate.calls[kind].calls += n
    per_embed, _ = figures.embed_seconds()
    estimate.embed_seconds = per_embed * estimate.chunks
    prices = endpoint_prices(rt)
    for kind, c in estimate.calls.items():
        measured = figures.per_call(kind, work)
        default = DEFAULTS[kind]
        c.measured = (
            outlook.measured.get(kind, False) if outlook is not None and kind in PER_METHOD else figures.per_unit(kind, work)[1]
        )
        if measured is not None:
            c.tokens_in, c.tokens_out, c.seconds = (c.calls * v for v in measured)
            c.measured = c.measured or kind not in PER_METHOD
        else:
            c.tokens_in = c.calls * default.tokens_in + text_chars.get(kind, 0.0) / CHARS_PER_TOKEN
            c.tokens_out, c.seconds = c.calls * default.tokens_out, c.calls * default.seconds
        price_in, price_out = prices.get(c.role, (None, None))
        if price_in is not None or price_out is not None:
            c.cost = (c.tokens_in * (price_in or 0.0) + c.tokens_out * (price_out or 0.0)) / 1e6
    sized = [f for f in estimate.files if not f.refused and f.method == "from size"]
    if sized:
        estimate.notes.append(
            f"{len(sized)} document or picture file(s) estimated from size: "
            + ", ".join(sorted({extension_of(f.file_name) for f in sized}))
        )
    if "community_report" in estimate.calls:
        estimate.notes.append("community reports are written at the next rebuild, not during the upload")
    if kind_of(topic).has_graph and "graph_extraction" not in kinds:
        estimate.notes.append("graph extraction uses the NLP method: no model calls")
    if outlook is not None and outlook.probed:
        estimate.notes.append(
            f"{' and '.join(outlook.probed_kinds)}: {outlook.probed:g} chunk(s) of these files were run through the NLP "
            "extraction and the deduplication rules (no model), as nothing was measured on this installation yet"
        )
    return estimate


def _estimate_file(
    rt: Runtime, topic, cfg, kinds: set[str], figures: Figures, name: str, data: bytes
) -> tuple[FileEstimate, dict[str, float], list[str] | None]:
    """One file's estimate, the characters of text each kind of call would send for it, and its chunk texts
    (None: a refused file, or a document or picture estimated from its size)."""
    f = FileEstimate(file_name=name, size_bytes=len(data))
    try:
        f.file_name = name = clean_file_name(name)
    except RagTopicsError as exc:
        f.refused = str(exc)
        return f, {}, None
    ext = extension_of(name)
    if ext not in topic.settings.file_types:
        f.refused = f"Topic {topic.name!r} does not accept .{ext} files"
        return f, {}, None
    if ext in DOCUMENT_TYPES and not is_docling_available(topic.settings.docling_server):
        f.refused = f"it is a document, and the Docling Server of Topic {topic.name!r} is not available"
        return f, {}, None
    if len(data) > topic.settings.max_file_size_mb * 1024 * 1024:
        f.refused = f"it is {len(data) / 1048576:.1f} MB, the limit of this Topic is {topic.settings.max_file_size_mb:g} MB"
        return f, {}, None
    chars: dict[str, float] = {}
    if ext in DOCUMENT_TYPES or ext in IMAGE_TYPES:
        f.method = "from size"
        if ext in IMAGE_TYPES:
            f.chunks, f.pictures = 1.0, 1.0
        else:
            per_byte, _ = figures.chunks_per_byte(ext, cfg.chunk_size, cfg.chunk_overlap)
            f.chunks = max(1.0, per_byte * len(data))
            f.pictures = figures.pictures_per_byte(ext) * len(data)
        chunk_chars = f.chunks * cfg.chunk_size
        texts: list[str] | None = None
    else:
        try:
            texts, f.records, record_chars = _chunk_texts(rt, cfg, name, data, figures)
        except RagTopicsError as exc:
            f.refused = str(exc)
            return f, {}, None
        f.chunks = float(len(texts))
        chunk_chars = float(sum(len(t) for t in texts))
        chars["narrate"] = record_chars
    units = {"chunk": f.chunks, "picture": f.pictures, "record": float(f.records)}
    for kind in kinds:
        spec = KINDS[kind]
        if kind in PER_METHOD:  # they follow the graph, not the file: graph_calls
            continue
        count = units[spec.unit]
        if kind == "graph_extraction" and texts is not None:
            # deferred: the graph package imports ingest at module level, and loads only for GraphRAG Topics
            from ragtopics.graph.extract import looks_like_toc_or_index

            count = float(sum(1 for t in texts if not looks_like_toc_or_index(t)))
        per_unit, _ = figures.per_unit(kind, work_name(topic, kinds))
        calls = count * per_unit
        if calls:
            f.calls[kind] = calls
        if spec.unit == "chunk" and kind in ("graph_extraction", "keywords", "context_line"):
            chars[kind] = chunk_chars * (per_unit if kind == "graph_extraction" else 1.0)
    if kind_of(topic).has_graph:  # the text the graph extraction reads (tables of contents skipped)
        # deferred: the graph package imports ingest at module level, and loads only for GraphRAG Topics
        from ragtopics.graph.extract import looks_like_toc_or_index

        chars["graph"] = float(sum(len(t) for t in texts if not looks_like_toc_or_index(t))) if texts is not None else chunk_chars
    if "context_line" in f.calls:  # each context line's prompt also shows the start of the document
        chars["context_line"] += f.calls["context_line"] * min(CONTEXT_DOCUMENT_CHARS, chunk_chars)
    return f, chars, texts


def _chunk_texts(rt: Runtime, cfg, name: str, data: bytes, figures: Figures) -> tuple[list[str], int, float]:
    """Read and chunk a text or structured file as the upload will, without model calls.

    Under NARRATE each record's paragraph is not written; it is taken to be as long as the
    replies measured for NARRATE (its default before any), so its chunks are estimated.

    Returns:
        ``(chunk texts, records, characters of the records)``.

    Raises:
        ReadError: the file cannot be read. RefusedFileError: it would give too many chunks.
    """
    result = read_file(data, file_name=name, docling_server=cfg.docling_server)
    records = len(result.records) if result.records is not None else 0
    record_chars = float(sum(len(r) for r in result.records)) if result.records is not None else 0.0
    if result.records is not None and cfg.import_strategy == "NARRATE":
        measured = figures.per_call("narrate")
        paragraph = int((measured[1] if measured else DEFAULTS["narrate"].tokens_out) * CHARS_PER_TOKEN)
        packed = pack_records_counted(["x" * max(1, paragraph)] * records, size=cfg.chunk_size)
        pieces = [Piece(text=t, start=0, end=len(t), records=n) for t, n in packed]
    else:
        pieces = _chunk(rt, result, cfg, Trace("estimate", name), name, NARRATE)
    capped = _cap_to_window(rt, pieces, cfg, name)
    return [p.text for p in capped.pieces], records, record_chars


def store_estimate(rt: Runtime, row, estimate: FileEstimate, topic) -> None:
    """Keep a file's estimate with its upload (its job), to be compared with what the upload took."""
    body = {
        "chunks": round(estimate.chunks, 2),
        "method": estimate.method,
        "pictures": round(estimate.pictures, 2),
        "calls": {k: round(v, 2) for k, v in estimate.calls.items()},
    }
    with rt.metadata.session() as s:
        s.merge(
            UploadCostRow(
                job_id=row.job_id, document_id=row.id, topic_id=topic.id, file_name=row.file_name, estimate=body, actual={}
            )
        )


def estimate_and_store(
    rt: Runtime, topic, row, data: bytes, figures: Figures | None = None, *, pending_chars: float = 0.0
) -> float:
    """Estimate one received file and keep the estimate with its job; a failure is logged, never raised
    (the upload itself must not fail for its estimate).

    A GraphRAG file is estimated as the next upload into the graph as it will be once the files received before
    it are stored: ``pending_chars`` are their characters of chunk text (what this function returned for each),
    so the estimates kept for the files of one upload add up to its preview (:func:`estimate_upload`).

    Returns:
        The file's characters of chunk text the graph extraction reads (0.0 for a RAG Topic, a refused file or a
        failed estimate), to add to ``pending_chars`` for the next file.
    """
    try:
        cfg = ingest_settings(topic.settings, rt)
        kinds, figures = active_kinds(rt, topic), figures or load_figures(rt)
        f, chars, _ = _estimate_file(rt, topic, cfg, kinds, figures, row.file_name, data)
        if f.refused:
            return 0.0
        graph_chars = chars.get("graph", 0.0) if kind_of(topic).has_graph else 0.0
        if kind_of(topic).has_graph:
            graph_calls(rt, topic, kinds, figures, [(f, graph_chars)], pending_chars=pending_chars)
        store_estimate(rt, row, f, topic)
        return graph_chars
    except Exception as exc:
        log.warning("no cost estimate kept for %s: %s", row.file_name, exc)
        return 0.0


def actual_from_trace(trace: Trace) -> dict[str, Any]:
    """What a stored upload took, from its trace: ``{"chunks", "calls": {kind: n}, "tokens_in", "tokens_out",
    "seconds", "embedded", "bytes", "pictures", "records", "read_seconds", "extracted", "by_kind": {kind:
    {"calls", "tokens_in", "tokens_out", "seconds"}}}``."""
    out: dict[str, Any] = {
        "chunks": 0,
        "calls": {},
        "tokens_in": 0,
        "tokens_out": 0,
        "seconds": 0.0,
        "embedded": 0,
        "embed_seconds": 0.0,
        "bytes": 0,
        "pictures": 0,
        "records": 0,
        "read_seconds": 0.0,
        "extracted": None,
        "by_kind": {},
        "graph": {},
    }
    share = 1.0
    top_seconds = embed_step_seconds = 0.0
    for event in trace.events:
        data = event.data
        if event.parent is None and event.step != "model_call":
            top_seconds += float(event.duration_ms or 0) / 1000
        if event.step == "model_call":
            if data.get("role") == "embedding":
                if data.get("prompt_name") != "embedding":  # entity embeddings: part of the graph's other work
                    continue
                out["embedded"] += int(data.get("items", 1))
                out["embed_seconds"] += float(data.get("duration_ms") or 0) / 1000
                continue
            kind = data.get("prompt_name", "")
            by = out["by_kind"].setdefault(kind, {"calls": 0, "tokens_in": 0, "tokens_out": 0, "seconds": 0.0})
            by["calls"] += 1
            by["tokens_in"] += int(data.get("prompt_tokens") or 0)
            by["tokens_out"] += int(data.get("completion_tokens") or 0)
            by["seconds"] += float(data.get("duration_ms") or 0) / 1000
        elif event.step == "embed":
            embed_step_seconds += float(event.duration_ms or 0) / 1000
            if data.get("batch_chunks"):  # files embedded together share the batch's time
                share = min(1.0, int(data.get("count") or 0) / int(data["batch_chunks"]))
        elif event.step == "find_partners":
            out["graph"]["graph_entities"] = int(data.get("graph_entities") or 0)
        elif event.step == "deduplicate":
            out["graph"].update(
                mentions=int(data.get("incoming") or 0),
                open_pairs=int(data.get("open_pairs") or 0),
                dedup_calls=int(data.get("model_calls") or 0),
            )
        elif event.step == "extract_graph":
            out["graph"]["chars"] = int(data.get("chars") or 0)
        elif event.step == "read":
            out["bytes"] = int(data.get("bytes") or 0)
            out["pictures"] = int(data.get("pictures") or 0)
            out["records"] = int(data.get("records") or 0)
            out["read_seconds"] = float(event.duration_ms or 0) / 1000
        elif event.step == "store":
            out["chunks"] = int(data.get("chunks") or 0)
            graph = data.get("graph")
            if isinstance(graph, dict):
                out["extracted"] = int(graph.get("chunks_extracted") or 0)
                out["graph"]["new_entities"] = int(graph.get("new_entities") or 0)
    out["embed_seconds"] *= share
    out["calls"] = {k: v["calls"] for k, v in out["by_kind"].items() if k in KINDS}
    for v in out["by_kind"].values():
        out["tokens_in"] += v["tokens_in"]
        out["tokens_out"] += v["tokens_out"]
        out["seconds"] += v["seconds"]
    out["seconds"] = round(out["seconds"], 3)
    # What is left of the upload's time besides reading, embedding and model calls (calls made inside steps).
    out["work_seconds"] = max(0.0, top_seconds - out["read_seconds"] - embed_step_seconds - out["seconds"])
    return out


def record_upload(rt: Runtime, trace: Trace, doc) -> None:
    """After a version was stored: add what it took to this installation's figures, and keep its actual counts
    beside its estimate (when one was kept). A failure is logged, never raised: the upload is done.

    Args:
        trace: the upload's trace (every model call of the upload, extraction jobs' included).
        doc: its document row as the job started it (``job_id`` names the upload).
    """
    try:
        _record_upload(rt, trace, doc)
    except Exception as exc:
        log.warning("cost figures of %s not recorded: %s", getattr(doc, "file_name", "?"), exc)


def _record_upload(rt: Runtime, trace: Trace, doc) -> None:
    topic = get_topic(rt, doc.topic_id)
    actual = actual_from_trace(trace)
    ext = extension_of(doc.file_name)
    units = {"chunk": actual["chunks"], "picture": actual["pictures"], "record": actual["records"]}
    increments: dict[str, dict[str, float]] = {}
    kinds = active_kinds(rt, topic)
    for kind in kinds:
        if KINDS[kind].at_rebuild:
            continue
        by = actual["by_kind"].get(kind, {})
        unit = units[KINDS[kind].unit]
        if kind == "graph_extraction" and actual["extracted"] is not None:
            unit = actual["extracted"]  # chunks found in the extraction cache made no call
        if kind == "describe_picture":
            unit = actual["pictures"]
        if unit or by.get("calls"):
            increments[call_figure(kind, work_name(topic, kinds))] = {
                "count": by.get("calls", 0),
                "units": unit,
                "tokens_in": by.get("tokens_in", 0),
                "tokens_out": by.get("tokens_out", 0),
                "seconds": by.get("seconds", 0.0),
            }
    if actual["chunks"]:
        increments[f"work:{work_name(topic, kinds)}"] = {"count": actual["chunks"], "seconds": actual["work_seconds"]}
    if actual["embedded"]:
        increments["embedding"] = {"count": actual["embedded"], "seconds": actual["embed_seconds"]}
    if actual["bytes"]:
        increments[f"read:{ext}"] = {"count": 1, "units": actual["bytes"], "seconds": actual["read_seconds"]}
        if ext in DOCUMENT_TYPES:
            increments[f"file:{ext}"] = {"count": actual["chunks"], "units": actual["bytes"]}
            increments[f"pictures:{ext}"] = {"count": actual["pictures"], "units": actual["bytes"]}
    graph, work = actual["graph"], work_name(topic, kinds)
    has_graph = kind_of(topic).has_graph
    if has_graph and graph.get("chars"):
        increments[f"graph:mentions:{work}"] = {"count": graph.get("mentions", 0), "units": graph["chars"]}
        increments[f"graph:new:{work}"] = {"count": graph.get("new_entities", 0), "units": graph["chars"]}
        if "deduplication" in kinds:
            observe(
                rt,
                f"dedup:{work}",
                [
                    graph.get("mentions", 0),
                    graph.get("graph_entities", 0),
                    graph.get("open_pairs", 0),
                    graph.get("dedup_calls", 0),
                ],
            )
        observe(rt, f"work:{work}", [actual["chunks"], graph.get("graph_entities", 0), actual["work_seconds"]])
    add_figures(rt, increments)
    if has_graph and actual["chunks"]:
        rt.redis.incrby(SINCE_REBUILD_KEY.format(topic_id=topic.id), actual["chunks"])
    body = {k: actual[k] for k in ("chunks", "calls", "tokens_in", "tokens_out", "seconds", "pictures", "records")}
    with rt.metadata.session() as s:
        row = s.get(UploadCostRow, doc.job_id)
        if row is not None:
            row.actual, row.finished_at = body, utcnow()
            s.add(row)


def record_rebuild(rt: Runtime, topic_id: str, trace: Trace) -> None:
    """After a community rebuild: its report calls over the chunks stored since the last rebuild join the figures
    (reports per new chunk). A failure is logged, never raised."""
    try:
        key = SINCE_REBUILD_KEY.format(topic_id=topic_id)
        pipe = rt.redis.pipeline()
        pipe.get(key)
        pipe.delete(key)
        new_chunks = int(pipe.execute()[0] or 0)
        if not new_chunks or rt.gateway.endpoint("community_report").is_local:  # the bundled model writes no reports
            return

        topic = get_topic(rt, topic_id)
        by = actual_from_trace(trace)["by_kind"].get("community_report") or {}
        work = work_name(topic, active_kinds(rt, topic))
        increments = {
            call_figure("community_report", work): {
                "count": by.get("calls", 0),
                "units": new_chunks,
                "tokens_in": by.get("tokens_in", 0),
                "tokens_out": by.get("tokens_out", 0),
                "seconds": by.get("seconds", 0.0),
            }
        }
        detect = next((e.data for e in trace.events if e.step == "detect_communities"), None)
        if detect and detect.get("entities"):  # communities of two or more per entity, at this Resolution
            reportable = int(detect.get("communities") or 0) - int(detect.get("skipped_small") or 0)
            increments[f"communities:{work}:{float(detect.get('resolution', 1.0)):g}"] = {
                "count": reportable,
                "units": int(detect["entities"]),
            }
        add_figures(rt, increments)
    except Exception as exc:
        log.warning("cost figures of a community rebuild not recorded: %s", exc)


def comparison(rt: Runtime, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Job id → ``{"estimate", "actual", "file_name"}`` of the uploads whose estimate was kept (``actual`` empty
    until the version was stored)."""
    if not job_ids:
        return {}
    with rt.metadata.session() as s:
        rows = s.exec(select(UploadCostRow).where(col(UploadCostRow.job_id).in_(job_ids))).all()
    return {r.job_id: {"estimate": dict(r.estimate), "actual": dict(r.actual), "file_name": r.file_name} for r in rows}


def comparison_text(entry: dict[str, Any]) -> str:
    """``estimated 12 chunks, 12 calls · actual 12 chunks, 13 calls`` for one upload (calls made during the upload;
    community reports come at the next rebuild)."""
    est, act = entry.get("estimate") or {}, entry.get("actual") or {}

    def calls(counts: dict[str, float]) -> int:
        return round(sum(v for k, v in counts.items() if k in KINDS and not KINDS[k].at_rebuild))

    def counted(n: int, word: str) -> str:
        return f"{n:,} {word}{'' if n == 1 else 's'}"

    text = f"estimated {counted(round(est.get('chunks', 0)), 'chunk')}, {counted(calls(est.get('calls', {})), 'call')}"
    if act:
        text += f" · actual {counted(act.get('chunks', 0), 'chunk')}, {counted(calls(act.get('calls', {})), 'call')}"
    return text


def error_percent(estimated: float, actual: float) -> float | None:
    """``(estimated - actual) / actual`` in percent; None when both are 0, ``inf`` when only the actual is 0."""
    if actual == 0:
        return None if estimated == 0 else math.inf
    return (estimated - actual) / actual * 100


__all__ = [
    "DEFAULTS",
    "GRAPH_DEFAULTS",
    "KINDS",
    "CallEstimate",
    "CostEstimate",
    "Figures",
    "FileEstimate",
    "GraphOutlook",
    "active_kinds",
    "actual_from_trace",
    "add_figures",
    "clear_figures",
    "comparison",
    "comparison_text",
    "dedup_calls",
    "endpoint_prices",
    "error_percent",
    "estimate_and_store",
    "estimate_upload",
    "fit_hazard",
    "fit_work",
    "graph_calls",
    "graph_outlook",
    "load_figures",
    "observations",
    "observe",
    "record_rebuild",
    "record_upload",
    "store_estimate",
]
