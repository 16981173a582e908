"""`rldag inspect`: a stored run seen from the terminal — its iterations, nodes and row
counts, the metrics table, sample rows of any node's table, and one multi-turn episode turn
by turn. Reads storage only, so it works on a finished, failed or running run, local or on S3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import yaml
from rich.console import Console
from rich.table import Table

from rldag.config.errors import InputError
from rldag.report.trajectory import TRAJECTORY_COLUMN, print_trajectory
from rldag.storage.store import Storage

DEFAULT_METRICS = (
    "reward/mean",
    "reward/std",
    "response_length/mean",
    "train/loss",
    "perf/tokens_per_s",
    "timing_s/iteration",
)
CELL_CHARS = 60  # a sample cell longer than this is cut
TRANSPOSED_ITERATIONS = 8  # `--metrics all` shows the last this many iterations


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

    def rows(self, iteration: int, node: str) -> int:
        """A stored table's row count (from the Parquet footer)."""
        return self.storage.table_rows(f"{self.run_id}/iter={iteration}/{node}.parquet")

    def table(self, iteration: int, node: str) -> pa.Table:
        """A node's stored table of one iteration; InputError naming what exists if absent."""
        if iteration not in self.iterations():
            have = ", ".join(map(str, self.iterations())) or "none"
            raise InputError(f"iteration {iteration} not stored (stored: {have})", path="--iter")
        nodes = self.nodes(iteration)
        if node not in nodes:
            have = ", ".join(nodes) or "none"
            message = f"node {node!r} stored no table in iteration {iteration} (stored: {have})"
            raise InputError(message, path="--node")
        return self.storage.read_table(f"{self.run_id}/iter={iteration}/{node}.parquet")

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


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value).replace("\n", "\\n")
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def print_run(console: Console, run: StoredRun, metrics: str = "") -> None:
    """Iterations × nodes row counts, then the metrics table (`metrics`: comma-separated
    keys, "all", or empty for the usual ones)."""
    iterations = run.iterations()
    planned = run.pipeline.get("iterations", "?")
    console.print(f"[bold]{run.run_id}[/bold]  {run.uri}", highlight=False)
    console.print(f"{len(iterations)} of {planned} iterations stored", highlight=False)
    nodes = list(dict.fromkeys(n for i in iterations for n in run.nodes(i)))
    counts = Table(title="rows per node", title_justify="left")
    counts.add_column("iter", justify="right")
    for node in nodes:
        counts.add_column(node, justify="right")
    for i in iterations:
        stored = set(run.nodes(i))
        counts.add_row(str(i), *(str(run.rows(i, n)) if n in stored else "-" for n in nodes))
    console.print(counts)
    table = run.metrics()
    if table is None:
        console.print("no metrics yet (no iteration finished)")
        return
    if metrics == "all":
        keys = [c for c in table.column_names if c != "iteration"]
    elif metrics:
        keys = [k.strip() for k in metrics.split(",") if k.strip()]
        unknown = [k for k in keys if k not in table.column_names]
        if unknown:
            have = ", ".join(table.column_names)
            raise InputError(f"unknown metrics {unknown} (have: {have})", path="--metrics")
    else:
        keys = [k for k in DEFAULT_METRICS if k in table.column_names]
    rows = table.select(["iteration", *keys]).to_pylist()
    shown = Table(title="metrics (metrics.parquet)", title_justify="left")
    if len(keys) > len(DEFAULT_METRICS):  # many keys: one row per key, recent iterations
        rows = rows[-TRANSPOSED_ITERATIONS:]
        shown.add_column("metric")
        for row in rows:
            shown.add_column(f"iter {row['iteration']}", justify="right")
        for key in keys:
            shown.add_row(key, *(_cell(row[key]) for row in rows))
    else:
        for key in ("iteration", *keys):
            shown.add_column(key, justify="right")
        for row in rows:
            shown.add_row(*(_cell(row[k]) for k in ("iteration", *keys)))
    console.print(shown)


def print_rows(
    console: Console,
    run: StoredRun,
    node: str,
    iteration: int | None,
    rows: int,
    columns: str = "",
) -> None:
    """The first `rows` rows of `node`'s table in `iteration` (default: the last stored)."""
    iteration = run.last_iteration(node) if iteration is None else iteration
    table = run.table(iteration, node)
    names = [c.strip() for c in columns.split(",") if c.strip()] or table.column_names
    unknown = [c for c in names if c not in table.column_names]
    if unknown:
        have = ", ".join(table.column_names)
        raise InputError(f"unknown columns {unknown} (have: {have})", path="--columns")
    title = f"{node}, iteration {iteration}: {min(rows, table.num_rows)} of {table.num_rows} rows"
    shown = Table(title=title, title_justify="left")
    for name in names:
        shown.add_column(name, overflow="fold")
    for row in table.slice(0, rows).select(names).to_pylist():
        shown.add_row(*(_cell(row[c]) for c in names))
    console.print(shown)


def print_episode(
    console: Console, run: StoredRun, node: str, iteration: int | None, k: int
) -> None:
    """Row `k` of a multi-turn `node`'s table (default: the last iteration), turn by turn."""
    iteration = run.last_iteration(node) if iteration is None else iteration
    table = run.table(iteration, node)
    if TRAJECTORY_COLUMN not in table.column_names:
        message = (
            f"node {node!r} stored no trajectories (its table has no {TRAJECTORY_COLUMN!r} "
            "column: it is not a multi-turn generate node, or one downstream of it)"
        )
        raise InputError(message, path="--trajectory")
    if not 0 <= k < table.num_rows:
        message = f"no row {k}: {node!r} stored {table.num_rows} rows in iteration {iteration}"
        raise InputError(message, path="--trajectory")
    row = table.slice(k, 1).to_pylist()[0]
    title = f"{node}, iteration {iteration}, trajectory {k} of {table.num_rows}"
    print_trajectory(console, row, title)
