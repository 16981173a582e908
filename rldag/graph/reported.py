"""Counts a node reports for its iteration, carried in its table's schema metadata (so the
stored Parquet file keeps them too) under `rldag.metrics:<node>`; the engine adds them to
the iteration's metrics row. Operators call `with_reported_metrics`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pyarrow as pa

from rldag.graph.dag import Graph

_PREFIX = b"rldag.metrics:"


def _reported_key(node: str) -> bytes:
    return _PREFIX + node.encode()


def with_reported_metrics(table: pa.Table, node: str, values: Mapping[str, float]) -> pa.Table:
    """`table` carrying counts its node reports for the iteration, in its schema metadata
    (so the stored Parquet file keeps them too); rldag.engine.metrics adds them to the row.
    Keyed by node: downstream tables that inherit the metadata do not count them again.
    They join what the node's table reports already (the engine's refill counts join a
    filter's own)."""
    metadata = dict(table.schema.metadata or {})
    key = _reported_key(node)
    reported = json.loads(metadata.get(key, b"{}")) | {k: float(v) for k, v in values.items()}
    metadata[key] = json.dumps(reported).encode()
    return table.replace_schema_metadata(metadata)


def reported_metrics(graph: Graph, tables: Mapping[str, pa.Table]) -> dict[str, float]:
    """The counts each node reported on its own table (summed when two report one name)."""
    out: dict[str, float] = {}
    for name in graph.order:
        table = tables.get(name)
        if table is None or _reported_key(name) not in (table.schema.metadata or {}):
            continue
        for key, value in json.loads(table.schema.metadata[_reported_key(name)]).items():
            out[key] = out.get(key, 0.0) + value
    return out


def with_chunks_reported(joined: pa.Table, chunks: list[pa.Table]) -> pa.Table:
    """`joined` (the chunks of one step, concatenated) carrying the sum of what each chunk
    reported: a streaming operator reports per chunk (the slot-seconds its chunk took)."""
    sums: dict[bytes, dict[str, float]] = {}
    for chunk in chunks:
        for key, value in (chunk.schema.metadata or {}).items():
            if key.startswith(_PREFIX):
                into = sums.setdefault(key, {})
                for name, number in json.loads(value).items():
                    into[name] = into.get(name, 0.0) + number
    if not sums:
        return joined
    metadata = dict(joined.schema.metadata or {})
    metadata |= {key: json.dumps(values).encode() for key, values in sums.items()}
    return joined.replace_schema_metadata(metadata)
