"""A stored run read back: its iterations, nodes, row counts, tables and metrics. Reads
storage only, so it works on a finished, failed or running run, local or on S3
(rldag.console.inspect shows it in the terminal: `rldag inspect`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import yaml

from rldag.config.errors import InputError
from rldag.storage.store import Storage

DEFAULT_METRICS = (
    "reward/mean",
    "reward/std",
    "response_length/mean",
    "train/loss",
    "perf/tokens_per_s",
    "timing_s/iteration",
)


@dataclass
class StoredRun:
    """A run under a storage root: `<root>/<run_id>/{pipeline.yaml, iter=<i>/, metrics}`."""

    storage: Storage
    run_id: str

    @classmethod
    def open(cls, target: str, storage_uri: str, endpoint_url: str | None = None) -> StoredRun:
        """`target` is a run id under `storage_uri`, or the run's own URI or directory."""
        if "://" in target or "/" in target:
            root, _, run_id = target.rstrip("/").rpartition("/")
            storage = Storage(root or ".", endpoint_url=endpoint_url)
        else:
            storage, run_id = Storage(storage_uri, endpoint_url=endpoint_url), target
        if not storage.exists(f"{run_id}/pipeline.yaml"):
            message = f"no run {run_id!r} under {storage.root} (it has no pipeline.yaml)"
            raise InputError(message, path="RUN")
        return cls(storage, run_id)

    @property
    def uri(self) -> str:
        return self.storage.uri(self.run_id)

    def iterations(self) -> list[int]:
        """The iterations that stored at least one table, in order."""
        found = (re.fullmatch(r"iter=(\d+)", n) for n in self.storage.list(self.run_id))
        return sorted(int(m.group(1)) for m in found if m)

    @cached_property
    def pipeline(self) -> dict:
        """The run's resolved pipeline.yaml."""
        return yaml.safe_load(self.storage.read_text(f"{self.run_id}/pipeline.yaml")) or {}

    def nodes(self, iteration: int) -> list[str]:
        """The nodes whose table this iteration stored, in pipeline order."""
        names = self.storage.list(f"{self.run_id}/iter={iteration}")
        stored = {n.removesuffix(".parquet") for n in names if n.endswith(".parquet")}
        order = list(self.pipeline.get("nodes") or {})
        return [n for n in order if n in stored] + sorted(stored - set(order))

    def rounds(self, iteration: int) -> list[int]:
        """The refill rounds this iteration ran: [0] without refill, else 0 and each round r
        that stored its tables under `iter=<i>/round=<r>/` (rldag.engine.refill)."""
        names = self.storage.list(f"{self.run_id}/iter={iteration}")
        found = (re.fullmatch(r"round=(\d+)", n) for n in names)
        return [0, *sorted(int(m.group(1)) for m in found if m)]

    def rows(self, iteration: int, node: str) -> int:
        """A stored table's row count (from the Parquet footer)."""
        return self.storage.table_rows(f"{self.run_id}/iter={iteration}/{node}.parquet")

    def table(self, iteration: int, node: str, round: int = 0) -> pa.Table:
        """A node's stored table of one iteration (of its refill round `round`); InputError
        naming what exists if absent."""
        if iteration not in self.iterations():
            have = ", ".join(map(str, self.iterations())) or "none"
            raise InputError(f"iteration {iteration} not stored (stored: {have})", path="--iter")
        nodes = self.nodes(iteration)
        if node not in nodes:
            have = ", ".join(nodes) or "none"
            message = f"node {node!r} stored no table in iteration {iteration} (stored: {have})"
            raise InputError(message, path="--node")
        refill = f"round={round}/" if round else ""
        return self.storage.read_table(f"{self.run_id}/iter={iteration}/{refill}{node}.parquet")

    def last_iteration(self, node: str) -> int:
        """The last iteration that stored `node`'s table; InputError if none did."""
        stored = [i for i in self.iterations() if node in self.nodes(i)]
        if not stored:
            have = ", ".join(dict.fromkeys(n for i in self.iterations() for n in self.nodes(i)))
            raise InputError(f"node {node!r} stored no table (stored: {have})", path="--node")
        return stored[-1]

    def metrics(self) -> pa.Table | None:
        """metrics.parquet (one row per finished iteration), or None before the first."""
        rel = f"{self.run_id}/metrics.parquet"
        return self.storage.read_table(rel) if self.storage.exists(rel) else None
