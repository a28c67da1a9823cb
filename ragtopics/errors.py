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
