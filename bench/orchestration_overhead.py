"""Per-iteration orchestration overhead of the default pipeline: everything that is not
operator compute (Prefect subflow and task runs, Ray dispatch, schema checks, Parquet
persistence, metrics), measured on a real `rldag run` (Prefect + Ray pools).

    .venv/bin/python bench/orchestration_overhead.py [--iterations 12] [key=value ...]

Prints per-iteration wall time, operator compute, weight sync and overhead (total and per
node), skipping the first iteration (actor and model start-up).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from flows.rl_loop import rldag_run
from rldag.engine.events import IterationFinished, NodeFinished, RunStarted, add_listener

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    marks: list[float] = []
    compute: dict[int, float] = {}
    sync: dict[int, float] = {}
    nodes: list[int] = []

    def listen(event: object) -> None:
        if isinstance(event, RunStarted):
            marks.append(time.perf_counter())
        elif isinstance(event, NodeFinished):  # a node's own seconds (its pool call)
            compute[event.iteration] = compute.get(event.iteration, 0.0) + event.seconds
            if event.iteration == 0:
                nodes.append(1)
        elif isinstance(event, IterationFinished):
            marks.append(time.perf_counter())
            sync[event.iteration] = event.metrics["timing_s/weight_sync"]

    add_listener(listen)
    overrides = [f"iterations={args.iterations}", *args.overrides]
    rldag_run(str(ROOT / "pipeline.yaml"), overrides)
    walls = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    rows = []
    for i, wall in enumerate(walls):
        rows.append((wall, compute[i], sync[i], wall - compute[i] - sync[i]))
    print(f"{'iter':>4} {'wall s':>8} {'compute s':>10} {'sync s':>8} {'overhead ms':>12}")
    for i, (wall, comp, syn, over) in enumerate(rows):
        print(f"{i:>4} {wall:8.3f} {comp:10.3f} {syn:8.4f} {over * 1e3:12.1f}")
    steady = [r[3] for r in rows[1:]]
    per_iter = statistics.median(steady)
    print(
        f"overhead per iteration (median, iterations 1..): {per_iter * 1e3:.0f} ms "
        f"({per_iter * 1e3 / len(nodes):.1f} ms per node, {len(nodes)} nodes); "
        f"share of wall: {per_iter / statistics.median(r[0] for r in rows[1:]):.0%}"
    )


if __name__ == "__main__":
    main()
