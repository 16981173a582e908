"""Parquet read from bytes: pyarrow is never handed a Python file object.

Reading Parquet through a Python file object makes pyarrow call back into Python from its
I/O threads; at interpreter exit that has aborted the process (``terminate called without an
active exception``, exit 134) in a share of `rldag inspect` calls. Every Parquet read of the
core goes through these helpers instead: the bytes are read by Python first, then parsed from
an Arrow buffer.
"""

from __future__ import annotations

from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"


def table_from_bytes(data: bytes, columns: list[str] | None = None) -> pa.Table:
    """The Parquet file `data` as a table (only `columns`, if given)."""
    return pq.read_table(pa.BufferReader(data), columns=columns, use_threads=False)


def footer_rows(f: BinaryIO) -> int:
    """The row count of the Parquet file open as `f`, from its footer alone: the footer's
    bytes are read (two small reads at the end) and parsed from a buffer."""
    f.seek(-8, 2)
    end = f.read(8)
    if len(end) != 8 or end[4:] != MAGIC:
        raise OSError("not a Parquet file (no PAR1 at its end)")
    length = int.from_bytes(end[:4], "little")
    f.seek(-(length + 8), 2)
    footer = f.read(length + 8)
    return pq.read_metadata(pa.BufferReader(MAGIC + footer)).num_rows
