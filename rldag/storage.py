"""Run storage under a URI (local path, file://, s3:// via fsspec): resolved pipeline, one
Parquet table per node per iteration, the metrics table and checkpoints.

Writes are atomic: a table is written to a temporary name and renamed into place, so a
reader never sees a torn file.
"""

from __future__ import annotations

import io
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from rldag.errors import InputError


@dataclass(frozen=True)
class TableHandle:
    """What the orchestrator sees of an edge: where it is and how big, never the rows."""

    uri: str
    rows: int
    bytes: int
    columns: tuple[str, ...]


def new_run_id(name: str) -> str:
    """A sortable, unique, path-safe run id: ``<name>-<utc time>-<random>``."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{slug}-{stamp}-{secrets.token_hex(2)}"


def _normalise(uri: str) -> str:
    if "://" not in uri:
        return str(Path(uri).expanduser().resolve())
    if uri.startswith("file://"):
        return str(Path(uri.removeprefix("file://")).expanduser().resolve())
    return uri.rstrip("/")


class Storage:
    """A storage root (``storage.uri``); paths below it are relative, '/'-separated."""

    def __init__(self, uri: str, **storage_options: object) -> None:
        self.root = _normalise(uri)
        try:
            self.fs, self._base = fsspec.core.url_to_fs(self.root, **storage_options)
        except (ImportError, ValueError) as err:
            raise InputError(f"cannot open {uri!r}: {err}", path="storage.uri") from None
        self.local = isinstance(self.fs, LocalFileSystem)

    def uri(self, rel: str) -> str:
        """The full URI of a relative path."""
        return f"{self.root}/{rel}"

    def _path(self, rel: str) -> str:
        return f"{self._base.rstrip('/')}/{rel}"

    def _write_bytes(self, rel: str, data: bytes) -> None:
        path = self._path(rel)
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        if not self.local:
            self.fs.pipe_file(path, data)  # an object store PUT is atomic
            return
        tmp = f"{parent}/.tmp-{secrets.token_hex(6)}-{path.rsplit('/', 1)[1]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def write_table(self, rel: str, table: pa.Table) -> TableHandle:
        """Write `table` as Parquet at `rel`, atomically; return its handle."""
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        data = buf.getvalue()
        self._write_bytes(rel, data)
        return TableHandle(self.uri(rel), table.num_rows, len(data), tuple(table.column_names))

    def read_table(self, rel: str) -> pa.Table:
        """Read the Parquet table at `rel`."""
        with self.fs.open(self._path(rel), "rb") as f:
            return pq.read_table(f)

    def write_text(self, rel: str, text: str) -> str:
        """Write a text file atomically; return its URI."""
        self._write_bytes(rel, text.encode())
        return self.uri(rel)

    def read_text(self, rel: str) -> str:
        with self.fs.open(self._path(rel), "rb") as f:
            return f.read().decode()

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self._path(rel))

    def list(self, rel: str) -> list[str]:
        """Names directly under `rel` (sorted), empty when it does not exist."""
        path = self._path(rel)
        if not self.fs.exists(path):
            return []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))
