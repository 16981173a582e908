"""Per-iteration orchestration overhead of the default pipeline: everything that is not
operator compute (Prefect subflow and task runs, Ray dispatch, schema checks, Parquet
persistence, metrics), measured on a real `rldag run` (Prefect + Ray pools).

    .venv/bin/python bench/orchestration_overhead.py [--iterations 12] [--server prefect] \
        [key=value ...]

Prints per-iteration wall time, operator compute (the seconds in which some node's own pool
call ran; streamed nodes overlap), weight sync and overhead (total and per node), skipping the
first iteration (actor and model start-up), and the stalls: iterations a second or more over
the median (Prefect's client backing off 2 s after a 503 from a busy SQLite, before
flows/busy_retry.py). Overlapped iterations (`async.max_staleness=1 pools.colocate=[]`)
showed them most.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from machine import describe, load_line

from flows.embedded_server import start_embedded_server, stop_embedded_server
from flows.rl_loop import rldag_run
from rldag.engine.events import IterationFinished, NodeFinished, RunStarted, add_listener

ROOT = Path(__file__).resolve().parents[1]
STALL_S = 1.0  # an iteration this much over the median counts as a stall


def busy(spans: list[tuple[float, float]]) -> float:
    """Seconds in which at least one of `spans` ran (streamed nodes overlap: their sum would
    count the same seconds twice)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        total += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument(
        "--server",
        choices=["rldag", "prefect"],
        default="rldag",
        help="the server rldag run starts, or Prefect's own ephemeral one (the peer)",
    )
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    marks: list[float] = []
    spans: dict[int, list[tuple[float, float]]] = {}
    sync: dict[int, float] = {}
    nodes: list[int] = []

    def listen(event: object) -> None:
        if isinstance(event, RunStarted):
            marks.append(time.perf_counter())
        elif isinstance(event, NodeFinished):  # a node's own seconds (its pool call)
            now = time.perf_counter()
            spans.setdefault(event.iteration, []).append((now - event.seconds, now))
            if event.iteration == 0:
                nodes.append(1)
        elif isinstance(event, IterationFinished):
            marks.append(time.perf_counter())
            sync[event.iteration] = event.metrics["timing_s/weight_sync"]

    add_listener(listen)
    overrides = [f"iterations={args.iterations}", *args.overrides]
    if args.server == "rldag":
        start_embedded_server()  # as `rldag run` does, unless PREFECT_API_URL names a server
    try:
        rldag_run(str(ROOT / "pipeline.yaml"), overrides)
    finally:
        stop_embedded_server()
    walls = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    compute = {i: busy(spans[i]) for i in spans}
    rows = []
    for i, wall in enumerate(walls):
        rows.append((wall, compute[i], sync[i], wall - compute[i] - sync[i]))
    print(f"{'iter':>4} {'wall s':>8} {'compute s':>10} {'sync s':>8} {'overhead ms':>12}")
    for i, (wall, comp, syn, over) in enumerate(rows):
        print(f"{i:>4} {wall:8.3f} {comp:10.3f} {syn:8.4f} {over * 1e3:12.1f}")
    print(load_line("end"))
    steady = [r[3] for r in rows[1:]]
    per_iter = statistics.median(steady)
    print(
        f"overhead per iteration (median, iterations 1..): {per_iter * 1e3:.0f} ms "
        f"({per_iter * 1e3 / len(nodes):.1f} ms per node, {len(nodes)} nodes); "
        f"share of wall: {per_iter / statistics.median(r[0] for r in rows[1:]):.0%}"
    )
    median = statistics.median(r[0] for r in rows[1:])
    stalls = [i for i, r in enumerate(rows) if i and r[0] > median + STALL_S]
    print(f"iterations more than {STALL_S:g} s over the median wall: {len(stalls)} {stalls}")
    print(f"longest iteration over the median wall: {max(r[0] for r in rows[1:]) - median:.3f} s")


if __name__ == "__main__":
    main()
