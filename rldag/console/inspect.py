"""`rldag inspect`: a stored run seen from the terminal — its iterations, nodes and row
counts, the metrics table, sample rows of any node's table, and one multi-turn episode turn
by turn (the run is read through rldag.storage.stored_run).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rldag.config.errors import InputError
from rldag.console.trajectory import print_trajectory
from rldag.report.trajectory import TRAJECTORY_COLUMN
from rldag.storage.stored_run import DEFAULT_METRICS, StoredRun

CELL_CHARS = 60  # a sample cell longer than this is cut
TRANSPOSED_ITERATIONS = 8  # `--metrics all` shows the last this many iterations


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
