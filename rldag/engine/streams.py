"""A streaming edge: the chunks (whole prompt groups) one step emits, readable while it
runs. A consumer that runs per chunk iterates them as they arrive; one that needs the whole
table waits for the end and gets every chunk joined in prompt order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa

from rldag.graph.reported import with_chunks_reported

ORDER_KEYS = ("prompt_id", "sample_idx")  # a joined stream is sorted by these when present


class EdgeStream:
    """Chunks appended by one producer, read by any number of consumers (thread-safe)."""

    def __init__(self) -> None:
        self._chunks: list[pa.Table] = []
        self._closed = False
        self._failed: BaseException | None = None
        self._cond = threading.Condition()
        self._joined: pa.Table | None = None

    def append(self, chunk: pa.Table) -> None:
        with self._cond:
            self._chunks.append(chunk)
            self._cond.notify_all()

    def close(self, failure: BaseException | None = None) -> None:
        """No more chunks; with `failure`, readers raise it instead of waiting forever. The
        first close stands (a run that stops closes the streams still open)."""
        with self._cond:
            if self._closed:
                return
            self._closed, self._failed = True, failure
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def chunks(self) -> int:
        return len(self._chunks)

    def __iter__(self) -> Iterator[pa.Table]:
        """Every chunk, blocking until the next arrives or the stream ends."""
        index = 0
        while True:
            with self._cond:
                while index >= len(self._chunks) and not self._closed:
                    self._cond.wait()
                if self._failed is not None:
                    raise StreamFailed(self._failed) from self._failed
                if index >= len(self._chunks):
                    return
                chunk = self._chunks[index]
            index += 1
            yield chunk

    def table(self) -> pa.Table:
        """All chunks once the stream has ended, in (prompt_id, sample_idx) order when the
        chunks came in completion order (so a streamed table equals the unstreamed one)."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed)
            if self._failed is not None:
                raise StreamFailed(self._failed) from self._failed
            if self._joined is None:
                self._joined = join_chunks(self._chunks)
            return self._joined


class StreamFailed(RuntimeError):
    """The producer of a stream failed; the consumer stops with it."""


def join_chunks(chunks: list[pa.Table]) -> pa.Table:
    """One table from a stream's chunks, rows in prompt order."""
    if len(chunks) == 1:
        return chunks[0]
    table = pa.concat_tables(chunks)
    keys = [k for k in ORDER_KEYS if k in table.column_names]
    if keys and table.num_rows:
        table = table.sort_by([(k, "ascending") for k in keys])
    return with_chunks_reported(table, chunks)
