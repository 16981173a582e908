"""Run storage under a URI (local path, file://, s3:// via fsspec/s3fs): resolved pipeline,
one Parquet table per node per iteration, the metrics table, the reward curve, checkpoints.

Writes are atomic: on disk a file is written to a temporary name and renamed into place; on
S3 an object appears whole when its PUT (or multipart upload) completes. A reader never sees
a torn file. S3 credentials come from the usual AWS variables (AWS_ACCESS_KEY_ID, ...,
AWS_ENDPOINT_URL) or from `storage.endpoint_url` / `storage.options`.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from rldag.config.errors import InputError
from rldag.config.faults import FaultsSpec
from rldag.config.spec import StorageSpec
from rldag.storage.kill_points import kill_point
from rldag.storage.parquet_io import footer_rows, table_from_bytes


@dataclass(frozen=True)
class TableHandle:
    """What the orchestrator sees of an edge: where it is and how big, never the rows."""

    uri: str
    rows: int
    bytes: int
    columns: tuple[str, ...]


# botocore's defaults retry a dead endpoint for minutes (legacy mode, 60 s connect and read
# timeouts, under s3fs's own 5 retries): one request is tried S3_ATTEMPTS times, each waiting
# at most faults.storage_timeout_s to connect and then for each answer, and s3fs does not try it
# again; the run stops resumably. storage.options config_kwargs replaces this.
S3_ATTEMPTS = 3
S3_BACKOFF_S = 3.0  # botocore's standard-mode backoff between those attempts: at most 1 + 2 s
# aiohttp starts its read timeout only once a PUT's body is sent, and botocore's PUTs wait for
# `100 Continue` first: a write also has a deadline of its own, counting its bytes at this rate
MIN_WRITE_BYTES_PER_S = 1 << 20
TMP_PREFIX = ".tmp-"  # a file being written, renamed into place when whole
RUN_ID_RANDOM_BYTES = 6  # 48 random bits: 10,000 ids in one second collide with p < 2e-7


def new_run_id(name: str) -> str:
    """A sortable, path-safe run id: ``<name>-<utc time>-<12 random hex digits>``. Unique by
    chance; `Storage.create_run_dir` makes it certain (a taken id is never reused)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{slug}-{stamp}-{secrets.token_hex(RUN_ID_RANDOM_BYTES)}"


def _normalise(uri: str) -> str:
    if "://" not in uri:
        return str(Path(uri).expanduser().resolve())
    if uri.startswith("file://"):
        return str(Path(uri.removeprefix("file://")).expanduser().resolve())
    return uri.rstrip("/")


def s3_config(timeout_s: float) -> dict[str, object]:
    """botocore's Config for one S3 request bounded by about S3_ATTEMPTS x `timeout_s`."""
    retries = {"total_max_attempts": S3_ATTEMPTS, "mode": "standard"}
    return {"connect_timeout": timeout_s, "read_timeout": timeout_s, "retries": retries}


def open_storage(spec: StorageSpec, faults: FaultsSpec | None = None) -> Storage:
    """The storage of a pipeline's `storage:` section, its waits bounded by `faults`."""
    timeout_s = (faults or FaultsSpec()).storage_timeout_s
    return Storage(spec.uri, endpoint_url=spec.endpoint_url, timeout_s=timeout_s, **spec.options)


class Storage:
    """A storage root (``storage.uri``); paths below it are relative, '/'-separated."""

    def __init__(
        self,
        uri: str,
        endpoint_url: str | None = None,
        timeout_s: float = FaultsSpec.storage_timeout_s,
        **options: object,
    ) -> None:
        self.root = _normalise(uri)
        if endpoint_url:
            if not self.root.startswith(("s3://", "s3a://")):
                where = "storage.endpoint_url"
                raise InputError("only s3:// storage takes an endpoint", path=where)
            options["endpoint_url"] = endpoint_url
        if self.root.startswith(("s3://", "s3a://")):
            options.setdefault("config_kwargs", s3_config(timeout_s))
        try:
            self.fs, self._base = fsspec.core.url_to_fs(self.root, **options)
            if not isinstance(self.fs, LocalFileSystem):
                self.fs.retries = 1  # botocore's attempts bound a request; s3fs adds none
        except ImportError as err:
            hint = "; install the s3 extra: pip install 'rldag[s3]'" if "s3" in str(err) else ""
            raise InputError(f"cannot open {uri!r}: {err}{hint}", path="storage.uri") from None
        except (TypeError, ValueError) as err:
            raise InputError(f"cannot open {uri!r}: {err}", path="storage.options") from None
        self.local = isinstance(self.fs, LocalFileSystem)
        self.timeout_s = timeout_s
        self._silent_until, self._silence = 0.0, ""  # an endpoint that did not answer (_naming)

    def check(self) -> None:
        """Fail with an InputError now, before a run starts, if an object store's bucket
        cannot be reached (missing bucket, wrong endpoint, no credentials)."""
        if self.local:
            return
        bucket = self._base.split("/", 1)[0]
        try:
            found = self.fs.exists(bucket)
        except Exception as err:  # botocore/aiohttp errors vary by cause
            raise InputError(f"cannot reach {self.root!r}: {err}", path="storage.uri") from None
        if not found:
            raise InputError(f"bucket {bucket!r} does not exist", path="storage.uri")

    def uri(self, rel: str) -> str:
        """The full URI of a relative path."""
        return f"{self.root}/{rel}"

    def _path(self, rel: str) -> str:
        return f"{self._base.rstrip('/')}/{rel}"

    def _write_bytes(self, rel: str, data: bytes) -> None:
        path = self._path(rel)
        parent = path.rsplit("/", 1)[0]
        if not self.local:
            with self._naming(rel):  # a PUT (or multipart upload) appears whole
                self.fs.pipe_file(path, data, timeout=self.write_deadline_s(len(data)))
            return
        tmp = f"{parent}/{TMP_PREFIX}{secrets.token_hex(6)}-{path.rsplit('/', 1)[1]}"
        try:
            self.fs.makedirs(parent, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if rel.endswith(".parquet"):
                kill_point("parquet", rel)
            os.replace(tmp, path)
        except OSError as err:  # a full disk, a read-only mount: say which file
            raise OSError(err.errno, f"cannot write {self.uri(rel)}: {err.strerror}") from err
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def create_bytes(self, rel: str, data: bytes) -> bool:
        """Create the file `rel` with `data` only if it does not exist; False if it does. Of
        two concurrent creators exactly one gets True, and the file appears whole: on disk a
        hard link of a complete temporary file (fails if the name exists), on S3 a PUT with
        `If-None-Match: *`."""
        path = self._path(rel)
        if not self.local:
            try:
                deadline_s = self.write_deadline_s(len(data))
                self.fs.pipe_file(path, data, mode="create", timeout=deadline_s)
            except FileExistsError:
                return False
            return True
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/{TMP_PREFIX}{secrets.token_hex(6)}-{path.rsplit('/', 1)[1]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True

    def remove_temporaries(self, rel: str) -> list[str]:
        """Delete the temporary files a killed writer left under the directory `rel` (a
        SIGKILL skips the cleanup of `_write_bytes` and `create_bytes`); their names, relative
        to `rel`. The caller must hold the run: a live writer's temporary file is no leftover.
        An object store has none (a PUT appears whole or not at all)."""
        base = Path(self._path(rel))
        if not self.local or not base.is_dir():
            return []
        found = sorted(base.rglob(f"{TMP_PREFIX}*"))
        for path in found:
            path.unlink(missing_ok=True)
        return [str(path.relative_to(base)) for path in found]

    def create_run_dir(self, run_id: str) -> bool:
        """Claim the directory of a new run: False when `run_id` is taken. On disk the
        directory is made with an exclusive mkdir; an object store has no directories, so
        there the run's first lock epoch (rldag.storage.run_lock) is the claim."""
        if not self.local:
            return not self.fs.exists(self._path(run_id))
        self.fs.makedirs(self._base, exist_ok=True)
        try:
            os.mkdir(self._path(run_id))
        except FileExistsError:
            return False
        return True

    def write_table(self, rel: str, table: pa.Table) -> TableHandle:
        """Write `table` as Parquet at `rel`, atomically; return its handle."""
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        data = buf.getvalue()
        self._write_bytes(rel, data)
        return TableHandle(self.uri(rel), table.num_rows, len(data), tuple(table.column_names))

    def read_table(self, rel: str) -> pa.Table:
        """Read the Parquet table at `rel`. From an object store it is one GET of the whole
        object, so a concurrent rewrite yields the old or the new table, never a mix."""
        return table_from_bytes(self.read_bytes(rel))  # whole, then parsed (parquet_io)

    def write_text(self, rel: str, text: str) -> str:
        """Write a text file atomically; return its URI."""
        self._write_bytes(rel, text.encode())
        return self.uri(rel)

    def read_text(self, rel: str) -> str:
        """Read a text file."""
        return self.read_bytes(rel).decode()

    def write_bytes(self, rel: str, data: bytes) -> str:
        """Write a binary file (an image, a checkpoint shard) atomically; return its URI."""
        self._write_bytes(rel, data)
        return self.uri(rel)

    def read_bytes(self, rel: str) -> bytes:
        """Read a binary file (one GET from an object store)."""
        if self.local:
            return self.fs.cat_file(self._path(rel))
        with self._naming(rel, "read"):
            return self.fs.cat_file(self._path(rel))

    def table_rows(self, rel: str) -> int:
        """The row count of the Parquet table at `rel`, from its footer (no data read)."""
        for attempt in range(3):
            try:
                with self.fs.open(self._path(rel), "rb") as f:
                    return footer_rows(f)
            except Exception:  # an object replaced between its HEAD and range reads
                if self.local or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def local_dir(self, rel: str) -> Iterator[str]:
        """A local directory for a writer that only knows paths (checkpoints, HF exports):
        on disk `rel` itself; on an object store a temporary directory that is uploaded to
        `rel` when the block ends without error."""
        if self.local:
            path = self._path(rel)
            os.makedirs(path, exist_ok=True)
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="rldag-upload-") as tmp:
            yield tmp
            size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
            with self._naming(rel):
                deadline_s = self.write_deadline_s(size)
                self.fs.put(f"{tmp}/", self._path(rel), recursive=True, timeout=deadline_s)

    def write_deadline_s(self, size: int) -> float:
        """The deadline of one write of `size` bytes to an object store: its attempts, their
        backoff and its bytes at MIN_WRITE_BYTES_PER_S."""
        return S3_ATTEMPTS * self.timeout_s + S3_BACKOFF_S + size / MIN_WRITE_BYTES_PER_S

    @contextmanager
    def _naming(self, rel: str, verb: str = "write") -> Iterator[None]:
        """An object store's failed write (or read) as an OSError naming the object (its
        endpoint errors name a URL, not the run's file); a missing object stays as it is.
        After a call that got no answer, the calls that start within one more deadline of a
        request fail at once naming it: a stopping run does not wait out one deadline per
        table, checkpoint and lock it still writes."""
        where = f"cannot {verb} {self.uri(rel)}"
        if time.monotonic() < self._silent_until:
            raise OSError(f"{where}: not tried, the endpoint did not answer ({self._silence})")
        try:
            yield
        except Exception as err:
            if isinstance(err, FileNotFoundError) and verb == "read":
                raise  # callers ask whether it is there
            if isinstance(err, TimeoutError):  # fsspec's deadline of a write (FSTimeoutError)
                err_text = f"no answer (faults.storage_timeout_s = {self.timeout_s:g} s)"
            else:
                err_text = str(err)
            if _no_answer(err):
                self._went_silent(err_text)
            errno = err.errno if isinstance(err, OSError) else None
            message = f"{where}: {err_text}"  # botocore's errors are no OSErrors
            raise (OSError(errno, message) if errno else OSError(message)) from err

    def _went_silent(self, why: str) -> None:
        self._silence = why
        self._silent_until = time.monotonic() + S3_ATTEMPTS * self.timeout_s + S3_BACKOFF_S

    @contextmanager
    def fetch_dir(self, rel: str) -> Iterator[str]:
        """A local directory holding the files under `rel` (downloaded from an object store
        into a temporary directory, removed when the block ends)."""
        if self.local:
            yield self._path(rel)
            return
        with tempfile.TemporaryDirectory(prefix="rldag-download-") as tmp:
            self.fs.get(f"{self._path(rel)}/", f"{tmp}/", recursive=True)
            yield tmp

    def exists(self, rel: str) -> bool:
        """Whether a file or directory exists at `rel`."""
        return self.fs.exists(self._path(rel))

    def remove(self, rel: str) -> None:
        """Delete the file or directory tree at `rel`, if any."""
        path = self._path(rel)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def list(self, rel: str) -> list[str]:
        """Names directly under `rel` (sorted), empty when it does not exist."""
        path = self._path(rel)
        if not self.fs.exists(path):
            return []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))


def _no_answer(err: BaseException | None) -> bool:
    """Whether `err`, or an error it came from, is an endpoint that did not answer in time."""
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    while err is not None:
        if isinstance(err, TimeoutError | ConnectTimeoutError | ReadTimeoutError):
            return True
        err = err.__cause__ or err.__context__
    return False
