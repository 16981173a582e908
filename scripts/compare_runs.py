"""Whether two stored runs hold the same rows and metrics: every ``iter=<i>/<node>.parquet``
(and refill round's ``iter=<i>/round=<r>/<node>.parquet``) equal in schema and rows
(measured times left out, in columns and in the metrics reported in schema metadata) and
``metrics.parquet`` equal outside the columns that measure time. For a refactor's
"behaviour unchanged" check: the same pipeline run before and after it on one machine.

    python scripts/compare_runs.py RUN_DIR_A RUN_DIR_B [--added COLUMN ...]

``--added`` names columns that run B's code adds to its tables since A's (left out of B's).

Exit 0 when they match; otherwise 1, listing every difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# Columns that measure time or speed: they differ between two identical runs.
TIMING = ("timing_s/", "perf/", "_s", "seconds", "tokens_per_s", "time", "elapsed")


def tables(run: Path) -> dict[str, Path]:
    """``iter=<i>/<node>`` (and ``iter=<i>/round=<r>/<node>``) -> its Parquet file."""
    return {str(p.relative_to(run)): p for p in sorted(run.glob("iter=*/**/*.parquet"))}


def timing(column: str) -> bool:
    return any(part in column for part in TIMING)


def metadata(table: pa.Table) -> dict[bytes, object]:
    """The schema metadata with the timing figures of reported metrics left out."""
    found: dict[bytes, object] = {}
    for key, value in (table.schema.metadata or {}).items():
        try:
            parsed = json.loads(value)
        except ValueError:
            found[key] = value
            continue
        if isinstance(parsed, dict):
            parsed = {k: v for k, v in parsed.items() if not timing(k)}
        found[key] = parsed
    return found


def compare(a: Path, b: Path, added: tuple[str, ...] = ()) -> list[str]:
    """The differences between runs `a` and `b` (empty when they match), `added` columns
    left out of `b`'s tables."""
    found_a, found_b = tables(a), tables(b)
    problems = [f"only in {a}: {k}" for k in sorted(set(found_a) - set(found_b))]
    problems += [f"only in {b}: {k}" for k in sorted(set(found_b) - set(found_a))]
    for key in sorted(set(found_a) & set(found_b)):
        left, right = pq.read_table(found_a[key]), pq.read_table(found_b[key])
        right = right.drop_columns([c for c in added if c in right.column_names])
        if not left.schema.equals(right.schema):
            problems.append(f"{key}: schema differs")
        elif differ := [
            c for c in left.column_names if not timing(c) and not left[c].equals(right[c])
        ]:
            problems.append(f"{key}: rows differ in {differ}")
        elif metadata(left) != metadata(right):
            problems.append(f"{key}: schema metadata differs")
    metrics_a, metrics_b = (
        pq.read_table(a / "metrics.parquet"),
        pq.read_table(b / "metrics.parquet"),
    )
    kept = [c for c in metrics_a.column_names if not timing(c)]
    if sorted(kept) != sorted(c for c in metrics_b.column_names if not timing(c)):
        problems.append("metrics.parquet: different columns")
    else:
        for name in kept:
            if not metrics_a.column(name).equals(metrics_b.column(name)):
                problems.append(f"metrics.parquet: {name} differs")
    return problems


def main(argv: list[str]) -> int:
    a, b = (Path(arg) for arg in argv[:2])
    rest = argv[2:]
    added = tuple(rest[i + 1] for i, arg in enumerate(rest) if arg == "--added")
    problems = compare(a, b, added)
    for problem in problems:
        print(problem)
    count = len(tables(a))
    print(f"{count} tables, metrics compared: {'same' if not problems else 'DIFFERENT'}")
    return 1 if problems else 0


if __name__ == "__main__":
    pa.set_cpu_count(1)
    sys.exit(main(sys.argv[1:]))
