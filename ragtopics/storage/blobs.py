"""The file store: original files and stored pictures, under ``<topic_id>/<document_id>/<version>/<name>``.

Everything that reads or writes such a file goes through a :class:`FileStore`. Two kinds exist,
chosen by the ``FILE_STORE`` setting (:func:`open_file_store`):

* :class:`BlobStore` (``local``, the default): a folder on this machine, ``<data_dir>/files``;
* :class:`~ragtopics.storage.s3.S3FileStore` (``s3``, in :mod:`ragtopics.storage.s3`): a bucket of an S3-compatible object store (MinIO, SeaweedFS,
  AWS S3), so that workers on other machines read what the console stored.

A stored file is named by its *relative path* (``<topic>/<document>/<sha256[:16]>/<name>``), the same
string for both kinds: it is what the metadata rows keep and what download links sign.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

from ragtopics.errors import StoreUnavailableError

if TYPE_CHECKING:
    from ragtopics.settings.env import Settings

log = logging.getLogger(__name__)


class FileStoreError(StoreUnavailableError):
    """The object store is unreachable, refuses the credentials, or answered with an error."""


class FileStore(ABC):
    """Where original files and pictures are kept; one instance per process, safe to share between threads."""

    @staticmethod
    def relative_path(topic_id: str, document_id: str, sha256: str, file_name: str) -> str:
        """Where :meth:`put` stores a file version: ``<topic>/<document>/<sha256[:16]>/<file_name>``."""
        return f"{topic_id}/{document_id}/{sha256[:16]}/{file_name}"

    @staticmethod
    def file_name(relative: str) -> str:
        """The file name of a relative path (its last part)."""
        return relative.rsplit("/", 1)[-1]

    def check(self, relative: str) -> str:
        """``relative`` when it names a place inside the store.

        Raises:
            ValueError: when it points outside the store (an empty, ``.`` or ``..`` part, a leading slash).
        """
        return _checked(relative)

    def put(self, topic_id: str, document_id: str, file_name: str, data: bytes) -> tuple[str, str]:
        """Store ``data`` and return ``(relative_path, sha256_hex)``.

        The file goes to :meth:`relative_path`, so a new version never overwrites the one still
        being served; a reader never sees a partly written file.

        Raises:
            ValueError: when a part of the path is empty, ``.`` or ``..``, or holds a slash.
            FileStoreError: when the object store cannot be written.
        """
        for part in (topic_id, document_id, file_name):
            if part in ("", ".", "..") or "/" in part or "\\" in part:
                raise ValueError(f"{part!r} cannot be part of a path in the file store")
        digest = hashlib.sha256(data).hexdigest()
        rel = self.relative_path(topic_id, document_id, digest, file_name)
        self._write(rel, data)
        return rel, digest

    def write(self, relative: str, data: bytes) -> str:
        """Store ``data`` at ``relative`` (a file of the product's own, not a document version: an evaluation run's
        file, a DEV report), replacing what is there; returns ``relative``. A reader never sees a partly written file.

        Raises:
            ValueError: when ``relative`` points outside the store.
            FileStoreError: when the object store cannot be written.
        """
        self._write(self.check(relative), data)
        return relative

    @abstractmethod
    def _write(self, relative: str, data: bytes) -> None:
        """Write ``data`` at ``relative`` atomically (replacing what is there)."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """The relative paths of every file under the folder ``prefix``, sorted (empty when there is none).

        Raises:
            ValueError: when ``prefix`` is empty or points outside the store.
            FileStoreError: when the object store cannot be listed.
        """

    @abstractmethod
    def exists(self, relative: str) -> bool:
        """Whether a file is stored at ``relative`` (False for a path outside the store)."""

    @abstractmethod
    def read(self, relative: str) -> bytes:
        """The bytes stored at ``relative``.

        Raises:
            FileNotFoundError: when nothing is stored there.
            ValueError: when ``relative`` points outside the store.
            FileStoreError: when the object store cannot be read.
        """

    @abstractmethod
    def remove(self, relative: str) -> None:
        """Delete one stored file (missing, or an empty path, is fine)."""

    def ping(self) -> str:
        """Check that the store can be reached; returns what was found (a readiness check).

        Raises:
            FileStoreError: when it cannot be reached or refuses the credentials.
        """
        return "on this machine"

    @abstractmethod
    def remove_tree(self, prefix: str) -> int:
        """Delete every file under ``prefix`` (``<topic>`` or ``<topic>/<document>``) and return how many there were.

        Raises:
            ValueError: when ``prefix`` is empty or points outside the store.
        """


def _checked(relative: str) -> str:
    """``relative`` when it is a plain relative path (no empty, ``.`` or ``..`` part, no leading slash).

    Raises:
        ValueError: otherwise, saying the path is outside the file store.
    """
    parts = relative.split("/")
    if not relative or "\\" in relative or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"blob path {relative!r} is outside the file store")
    return relative


class BlobStore(FileStore):
    """The local file store: a folder of this machine (``FILE_STORE=local``).

    Args:
        root: the folder that holds every Topic's files (created).
    """

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"BlobStore({str(self.root)!r})"

    def _write(self, relative: str, data: bytes) -> None:
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
            tmp.write(data)
            tmp_path = Path(tmp.name)
        os.replace(tmp_path, target)

    def exists(self, relative: str) -> bool:
        """Whether a blob is stored (False for a path outside the store)."""
        try:
            return self.path(relative).is_file()
        except ValueError:
            return False

    def check(self, relative: str) -> str:
        """``relative`` when it resolves inside :attr:`root` (ValueError otherwise)."""
        self.path(relative)
        return relative

    def path(self, relative: str) -> Path:
        """Absolute path of a stored blob (only the local store has one).

        Raises:
            ValueError: when ``relative`` points outside the store.
        """
        target = (self.root / relative).resolve()
        if self.root not in target.parents:
            raise ValueError(f"blob path {relative!r} is outside the file store")
        return target

    def read(self, relative: str) -> bytes:
        """The bytes of a stored blob (FileNotFoundError when missing, ValueError outside the store)."""
        target = self.path(relative)
        if not target.is_file():
            raise FileNotFoundError(f"{relative} is not in the file store")
        return target.read_bytes()

    def remove(self, relative: str) -> None:
        """Delete a blob and its now-empty version folder (missing is fine)."""
        if not relative:
            return
        target = self.path(relative)
        target.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            target.parent.rmdir()

    def list(self, prefix: str) -> list[str]:
        """The relative paths of the files under the folder ``prefix``, sorted (temporary files of a write left out)."""
        folder = self.path(_checked(prefix))
        if not folder.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix() for p in folder.rglob("*") if p.is_file() and not p.name.startswith("tmp")
        )

    def remove_tree(self, prefix: str) -> int:
        """Remove the folder ``prefix`` with everything in it; returns how many files it held (0 when absent)."""
        folder = self.path(_checked(prefix))
        if not folder.exists():
            return 0
        files = sum(1 for p in folder.rglob("*") if p.is_file())
        shutil.rmtree(folder, ignore_errors=True)
        return files


def open_file_store(settings: Settings) -> FileStore:
    """The file store the settings choose: ``FILE_STORE=local`` (``<data_dir>/files``) or ``s3`` (``S3_*``)."""
    if settings.file_store == "s3":
        # deferred: boto3 costs about a second at start and only FILE_STORE=s3 needs it
        from ragtopics.storage.s3 import S3FileStore

        return S3FileStore(
            settings.s3_bucket or "",
            endpoint_url=settings.s3_endpoint_url,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
            region=settings.s3_region,
            prefix=settings.s3_prefix,
        )
    return BlobStore(settings.data_dir / "files")
