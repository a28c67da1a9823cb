"""The one error hierarchy of the product.

Every error that the product raises on purpose derives from :class:`RagTopicsError`,
so the console and the CLI can show its message to the operator as it is.
"""

from __future__ import annotations


class RagTopicsError(Exception):
    """Root of all errors raised on purpose; the message is meant for the operator."""


class ConfigurationError(RagTopicsError):
    """A setting, environment variable or endpoint is missing or invalid."""


class InvalidSettingError(ConfigurationError):
    """A Topic setting has an unknown key or a value outside its range."""


class EmbeddingMismatchError(ConfigurationError):
    """A Topic's index was built with another embedding model or dimension than the configured one."""


class RefusedFileError(RagTopicsError):
    """An uploaded file is refused before anything is stored (type, name, size)."""


class ReadError(RagTopicsError):
    """A file's text could not be read (undecodable bytes, parse error)."""


class ModelUnavailableError(RagTopicsError):
    """A model endpoint (chat or embedding) could not be reached or failed."""


class StoreUnavailableError(RagTopicsError):
    """The Redis server is unreachable or lacks a required module."""


class NotFoundError(RagTopicsError):
    """A Topic, document, chat session or job does not exist."""


class PromptTemplateError(RagTopicsError):
    """A prompt template was rendered with a missing or unknown variable."""


class StructuredOutputError(ModelUnavailableError):
    """A model's structured reply could not be parsed into the expected type."""


class SupersededError(RagTopicsError):
    """An indexing job's version is no longer the one wanted: a newer upload replaced it, or the document was deleted."""


class StateTransitionError(RagTopicsError):
    """A document state change that the state machine does not allow (a bug, not the operator's doing)."""


#: What the console shows while Redis does not answer (each action can simply be tried again).
STORE_DOWN_MESSAGE = "Storage unavailable (Redis does not answer); retrying. Nothing is lost: try again in a moment."


def is_store_outage(exc: BaseException | None) -> bool:
    """Whether an error means Redis is unreachable or restarting, not that the input is bad.

    True for :class:`StoreUnavailableError` and redis-py's connection error, timeout and "loading
    the dataset" reply, also when another library wrapped one of them (followed through
    ``__cause__`` / ``__context__``, at most five links).
    """
    import redis  # here, not at the top: the error classes stay importable without the client

    outage = (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.BusyLoadingError,
        StoreUnavailableError,
    )
    for _ in range(6):
        if exc is None:
            return False
        if isinstance(exc, outage):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class AccessDeniedError(RagTopicsError):
    """A caller is not logged in, or its role or permissions do not allow the action."""
