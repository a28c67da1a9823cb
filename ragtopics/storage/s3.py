"""The S3 file store (``FILE_STORE=s3``): files as objects of one bucket of an S3-compatible object store.

A module of its own so that boto3 is loaded only where the setting chooses this store
(:func:`ragtopics.storage.blobs.open_file_store`).
"""

from __future__ import annotations

import logging

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ragtopics.errors import ConfigurationError
from ragtopics.storage.blobs import FileStore, FileStoreError, _checked

log = logging.getLogger(__name__)


class S3FileStore(FileStore):
    """Files as objects of one bucket of an S3-compatible object store (``FILE_STORE=s3``).

    The object of a relative path ``p`` has the key ``<prefix>p``. The bucket is created on the
    first write when it does not exist. Paths are addressed path-style (``<endpoint>/<bucket>/<key>``),
    which MinIO, SeaweedFS and AWS S3 all accept.

    Args:
        bucket: the bucket's name.
        endpoint_url: the object store's URL (``http://minio:9000``); None for AWS S3.
        access_key_id, secret_access_key: the credentials; None for boto3's credential chain.
        region: the region name used to sign requests.
        prefix: key prefix of every object (``""`` or ending in ``/``; one is added when missing).

    Raises:
        ConfigurationError: when ``bucket`` is empty.
    """

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        region: str = "us-east-1",
        prefix: str = "",
    ):
        if not bucket:
            raise ConfigurationError("the S3 file store needs a bucket name (S3_BUCKET)")
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        config = Config(
            s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=60
        )
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=config,
        )

    def __repr__(self) -> str:
        return f"S3FileStore(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r}, prefix={self.prefix!r})"

    def key(self, relative: str) -> str:
        """The object key of a relative path.

        Raises:
            ValueError: when ``relative`` points outside the store.
        """
        return self.prefix + _checked(relative)

    def _failure(self, action: str, exc: Exception) -> FileStoreError:
        where = self.endpoint_url or "AWS S3"
        return FileStoreError(
            f"the object store at {where} (bucket {self.bucket!r}) could not {action}: {exc}; "
            "check S3_ENDPOINT_URL, S3_BUCKET and the S3 keys"
        )

    def _write(self, relative: str, data: bytes) -> None:
        key = self.key(relative)
        try:
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
            except ClientError as exc:
                if _code(exc) != "NoSuchBucket":
                    raise
                self._create_bucket()
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._failure(f"store {relative}", exc) from exc

    def _create_bucket(self) -> None:
        log.info("creating bucket %s in the object store", self.bucket)
        try:
            self.client.create_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def ping(self) -> str:
        """Ask for the bucket (HEAD); a missing bucket is fine, the first upload creates it."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return "answers, bucket found"
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchBucket", "NotFound"):
                return "answers; the bucket is created by the first upload"
            raise self._failure("be reached", exc) from exc
        except BotoCoreError as exc:
            raise self._failure("be reached", exc) from exc

    def exists(self, relative: str) -> bool:
        """Whether an object is stored (False for a path outside the store).

        Raises:
            FileStoreError: when the object store cannot be asked.
        """
        try:
            key = self.key(relative)
        except ValueError:
            return False
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket"):
                return False
            raise self._failure(f"look up {relative}", exc) from exc
        except BotoCoreError as exc:
            raise self._failure(f"look up {relative}", exc) from exc

    def read(self, relative: str) -> bytes:
        """The bytes of a stored object (FileNotFoundError when missing, ValueError outside the store)."""
        key = self.key(relative)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket"):
                raise FileNotFoundError(f"{relative} is not in the file store") from exc
            raise self._failure(f"read {relative}", exc) from exc
        except BotoCoreError as exc:
            raise self._failure(f"read {relative}", exc) from exc

    def remove(self, relative: str) -> None:
        """Delete one object (missing is fine)."""
        if not relative:
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key(relative))
        except (BotoCoreError, ClientError) as exc:
            if isinstance(exc, ClientError) and _code(exc) == "NoSuchBucket":
                return
            raise self._failure(f"delete {relative}", exc) from exc

    def list(self, prefix: str) -> list[str]:
        """The relative paths of the objects whose key starts with ``<prefix>/``, sorted."""
        folder = self.key(prefix) + "/"
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=folder)
            return sorted(item["Key"][len(self.prefix) :] for page in pages for item in page.get("Contents", []))
        except ClientError as exc:
            if _code(exc) == "NoSuchBucket":
                return []
            raise self._failure(f"list the files under {prefix}", exc) from exc
        except BotoCoreError as exc:
            raise self._failure(f"list the files under {prefix}", exc) from exc

    def remove_tree(self, prefix: str) -> int:
        """Delete every object whose key starts with ``<prefix>/``; returns how many were deleted."""
        folder = self.key(prefix) + "/"
        removed = 0
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=folder):
                keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if not keys:
                    continue
                answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
                if answer.get("Errors"):
                    first = answer["Errors"][0]
                    raise FileStoreError(
                        f"the object store did not delete {len(answer['Errors'])} objects under {prefix}, "
                        f"first {first.get('Key')}: {first.get('Message') or first.get('Code')}"
                    )
                removed += len(keys)
        except ClientError as exc:
            if _code(exc) == "NoSuchBucket":
                return removed
            raise self._failure(f"delete the files under {prefix}", exc) from exc
        except BotoCoreError as exc:
            raise self._failure(f"delete the files under {prefix}", exc) from exc
        return removed


def _code(exc: Exception) -> str:
    """The error code of a botocore ``ClientError`` (``"NoSuchKey"``, ``"404"``...)."""
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
