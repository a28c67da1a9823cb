"""Original files on disk under ``<data_dir>/files/<topic_id>/<document_id>/``."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


class BlobStore:
    """Content-addressed storage of uploaded files.

    Args:
        root: the folder that holds every Topic's files (created).
    """

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, topic_id: str, document_id: str, file_name: str, data: bytes) -> tuple[str, str]:
        """Write ``data`` atomically and return ``(relative_path, sha256_hex)``.

        The file goes to ``<topic>/<document>/<sha256[:16]>/<file_name>``, so a new
        version never overwrites the one still being served.
        """
        digest = hashlib.sha256(data).hexdigest()
        rel = Path(self.relative_path(topic_id, document_id, digest, file_name))
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
            tmp.write(data)
            tmp_path = Path(tmp.name)
        os.replace(tmp_path, target)
        return rel.as_posix(), digest

    @staticmethod
    def relative_path(topic_id: str, document_id: str, sha256: str, file_name: str) -> str:
        """Where :meth:`put` stores a file version: ``<topic>/<document>/<sha256[:16]>/<file_name>``."""
        return f"{topic_id}/{document_id}/{sha256[:16]}/{file_name}"

    def exists(self, relative: str) -> bool:
        """Whether a blob is stored (False for a path outside the store)."""
        try:
            return self.path(relative).is_file()
        except ValueError:
            return False

    def path(self, relative: str) -> Path:
        """Absolute path of a stored blob.

        Raises:
            ValueError: when ``relative`` points outside the store.
        """
        target = (self.root / relative).resolve()
        if self.root not in target.parents:
            raise ValueError(f"blob path {relative!r} is outside the file store")
        return target

    def read(self, relative: str) -> bytes:
        """The bytes of a stored blob."""
        return self.path(relative).read_bytes()

    def remove(self, relative: str) -> None:
        """Delete a blob and its now-empty version folder (missing is fine)."""
        if not relative:
            return
        target = self.path(relative)
        target.unlink(missing_ok=True)
        try:
            target.parent.rmdir()
        except OSError:
            pass
