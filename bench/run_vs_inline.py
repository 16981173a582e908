"""What `rldag run` (Prefect, the server it starts, Ray pools) costs over the inline driver on
the same pipeline and code: marginal seconds per iteration, and the longest time in which no
node ran (one node finished, the next had not started) once the first iteration is done.

Each side runs in its own process, alternating (inline, run, inline, run, ...); each side's
median over its runs counts. The default pipeline is the long chain-of-thought task
(examples/long_cot.yaml), where generation is long and varies.

    .venv/bin/python bench/run_vs_inline.py [--iterations 50] [--repeats 1] \\
        [--pipeline examples/long_cot.yaml] [key=value ...]

Last lines (X a number): ``rldag run s/iteration over inline: X`` and ``longest gap between a
node finishing and the next starting: X s`` (of the `rldag run` side).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples.*: the example pipelines' code is not installed


Step = tuple[float, str, int, str]  # (time, started|finished, iteration, node)


def _listen() -> tuple[list[float], list[Step], list[tuple[float, float]], list[dict]]:
    """Times of RunStarted and each IterationFinished, each node step's start and end,
    (time, reward mean) of each finished iteration, and its metrics."""
    from rldag.engine.events import (
        IterationFinished,
        NodeFinished,
        NodeStarted,
        RunStarted,
        add_listener,
    )

    marks: list[float] = []
    steps: list[Step] = []
    rewards: list[tuple[float, float]] = []
    metrics: list[dict] = []

    def listen(event: object) -> None:
        now = time.perf_counter()
        if isinstance(event, RunStarted):
            marks.append(now)
        elif isinstance(event, IterationFinished):
            marks.append(now)
            rewards.append((now, event.metrics.get("reward/mean", float("nan"))))
            metrics.append(event.metrics)
        elif isinstance(event, NodeStarted):
            steps.append((now, "started", event.iteration, event.node))
        elif isinstance(event, NodeFinished):
            steps.append((now, "finished", event.iteration, event.node))

    add_listener(listen)
    return marks, steps, rewards, metrics


def longest_idle(steps: list[Step]) -> tuple[float, str]:
    """The longest time with no node step running after the first iteration's steps, and
    between which steps it fell."""
    running, last_end, longest = 0, None, (0.0, "")
    for at, what, iteration, node in sorted(steps):
        if what == "started":
            if running == 0 and last_end is not None and iteration > 0:
                gap = at - last_end[0]
                where = f"{last_end[1]} finished -> {iteration}:{node} started"
                longest = max(longest, (gap, where))
            running += 1
        else:
            running -= 1
            if running == 0:
                last_end = (at, f"{iteration}:{node}")
    return longest


def _share(metrics: list[dict], key: str) -> float:
    """`key`'s seconds over the iterations' seconds (timing_s/iteration), summed."""
    return sum(m.get(key, 0.0) for m in metrics) / sum(m["timing_s/iteration"] for m in metrics)


def child(mode: str, pipeline: str, overrides: list[str]) -> None:
    """One run of `pipeline` by `mode` (run: under Prefect as `rldag run`; inline); prints
    its figures as JSON: seconds of each iteration after the first (median and mean), of the
    first, the longest idle gap, and the reward against seconds since the run started."""
    marks, steps, rewards, metrics = _listen()
    if mode == "run":
        from flows.embedded_server import start_embedded_server, stop_embedded_server
        from flows.rl_loop import rldag_run

        start_embedded_server()
        try:
            rldag_run(pipeline, overrides)
        finally:
            stop_embedded_server()
    else:
        from rldag.config.spec import load_pipeline
        from rldag.engine.driver import run_inline
        from rldag.engine.run import Run
        from rldag.graph.dag import build_graph

        loaded = load_pipeline(pipeline, overrides)
        run_inline(Run.start(loaded, build_graph(loaded)))
    walls = [b - a for a, b in zip(marks, marks[1:], strict=False)]  # iterations 0..
    idle, where = longest_idle(steps)
    figures = {
        "per_iteration": statistics.median(walls[1:]),
        "mean_per_iteration": statistics.mean(walls[1:]),
        "first": walls[0],
        "idle": idle,
        "where": where,
        "curve": [(at - marks[0], reward) for at, reward in rewards],
        "generate_share": _share(metrics[1:], "timing_s/generate"),
    }
    print(json.dumps(figures))


def measure(mode: str, args: argparse.Namespace, runs: Path) -> dict:
    overrides = [f"iterations={args.iterations}", f"storage.uri=file://{runs}", *args.overrides]
    command = [sys.executable, __file__, "--child", mode, "--pipeline", args.pipeline, *overrides]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pipeline", default="examples/long_cot.yaml")
    parser.add_argument("--child", choices=["run", "inline"], help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.pipeline, args.overrides)
        return
    print(describe())
    print(load_line("start"))
    found: dict[str, list[dict]] = {"inline": [], "run": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for mode in ("inline", "run"):
                figures = measure(mode, args, Path(tmp) / f"{mode}-{repeat}")
                found[mode].append(figures)
                print(
                    f"{mode:>6}: {figures['per_iteration']:.3f} s/iteration, "
                    f"longest idle {figures['idle']:.3f} s ({figures['where']})"
                )
    print(load_line("end"))
    inline = statistics.median(f["per_iteration"] for f in found["inline"])
    run = statistics.median(f["per_iteration"] for f in found["run"])
    idle = max(f["idle"] for f in found["run"])
    print(f"rldag run s/iteration over inline: {run / inline:.2f}")
    print(f"longest gap between a node finishing and the next starting: {idle:.3f} s")


if __name__ == "__main__":
    main()
