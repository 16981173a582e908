"""Async vs sync RL on split pools: samples/s for async.max_staleness k = 0, 1, 2 against the
ideal overlap computed from measured stage times, and reward against wall-clock seconds.

The work: the default GRPO pipeline on the tiny addition task, rollout and training on one
Ray worker each (one torch thread each, `pools.colocate=[]`), answers sampled hot enough for
a long tail of lengths (most short, a few to the limit), and a heavy environment between
generate and score: 50-200 ms per prompt group, 16 groups at a time, like an environment
pool with 16 slots (bench/slow_env.py). First one synchronous run
without streaming measures each stage alone; the ideal is sum of stages / slowest stage
(perfect overlap). Prints samples/s per setting, the line `fraction of ideal (k=2): X`, and
writes docs/async-reward-vs-time.png (reward per iteration against wall-clock seconds, k = 0
and k = 2).

    .venv/bin/python bench/async_vs_sync.py [--iterations 24] [--prompts 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.slow_env, referenced by the pipeline as module:function

STAGES = ("generate", "env", "score", "advantage", "train")


def run(args: argparse.Namespace, *overrides: str) -> tuple[list[float], list[dict]]:
    """Wall-clock seconds at each iteration's end (from the run's start) and its metrics."""
    from rldag.config.spec import load_pipeline
    from rldag.engine.driver import run_inline
    from rldag.engine.events import IterationFinished, RunStarted, add_listener
    from rldag.engine.run import Run
    from rldag.graph.dag import build_graph
    from rldag.report.reward_curve import store_reward_curve

    marks: list[float] = []
    metrics: list[dict] = []

    def listen(event: object) -> None:
        if isinstance(event, RunStarted):
            marks.append(time.perf_counter())
        elif isinstance(event, IterationFinished):
            marks.append(time.perf_counter())
            metrics.append(event.metrics)

    with tempfile.TemporaryDirectory() as out:
        loaded = load_pipeline(
            ROOT / "pipeline.yaml",
            [
                f"iterations={args.iterations}",
                f"storage.uri={out}",
                "pools.colocate=[]",
                "checkpoint.export_hf=false",
                f"nodes.prompts.params.batch_size={args.prompts}",
                f"nodes.generate.params.n={args.group}",
                "nodes.env.kind=transform",
                "nodes.env.op=bench.slow_env:SLOW_ENV",
                "nodes.env.inputs.rollouts=generate",
                "nodes.score.inputs.rollouts=env",
                f"nodes.generate.params.max_new_tokens={args.max_new_tokens}",
                f"nodes.generate.params.temperature={args.temperature}",
                *overrides,
            ],
        )
        remove = add_listener(listen)
        try:
            run_inline(Run.start(loaded, build_graph(loaded)), on_close=(store_reward_curve,))
        finally:
            remove()
    return [m - marks[0] for m in marks[1:]], metrics


def steady_rate(ends: list[float], samples: int, skip: int = 2) -> float:
    """Samples/s over iterations `skip`.. (the first ones build the pool workers)."""
    return samples * (len(ends) - skip) / (ends[-1] - ends[skip - 1])


def plot(curves: dict[str, tuple[list[float], list[dict]]], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, (ends, metrics) in curves.items():
        ax.plot(ends, [m["reward/mean"] for m in metrics], marker=".", label=label)
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel("mean reward")
    ax.set_title("reward against time: synchronous vs async (split pools, 2 cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=24)
    parser.add_argument("--prompts", type=int, default=16, help="prompt groups per iteration")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=1.3)
    parser.add_argument("--png", default=str(ROOT / "docs" / "async-reward-vs-time.png"))
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    samples = args.prompts * args.group
    _, alone = run(args, "async.chunk_groups=0")  # stage by stage, nothing overlaps
    stage = {s: statistics.median(m[f"timing_s/{s}"] for m in alone[2:]) for s in STAGES}
    stage["weight_sync"] = statistics.median(m["timing_s/weight_sync"] for m in alone[2:])
    lengths = [m["response_length/max"] for m in alone]
    print(
        "stage seconds per iteration (median, alone): "
        + ", ".join(f"{k} {v:.3f}" for k, v in stage.items())
        + f"; longest answer per iteration {min(lengths):.0f}-{max(lengths):.0f} tokens "
        f"(mean {statistics.mean(m['response_length/mean'] for m in alone):.1f})"
    )
    ideal = samples / max(stage.values())
    serial = samples / sum(stage.values())
    print(f"serial (sum of stages) {serial:.1f} samples/s; ideal (slowest stage) {ideal:.1f}")
    curves = {}
    rates = {}
    for k in (0, 1, 2):
        ends, metrics = run(args, f"async.max_staleness={k}", f"async.chunk_groups={args.prompts}")
        rates[k] = steady_rate(ends, samples)
        curves[f"k={k}"] = (ends, metrics)
        last = statistics.mean(m["reward/mean"] for m in metrics[-3:])
        print(
            f"k={k}: {rates[k]:6.1f} samples/s ({rates[k] / serial:.2f}x serial), "
            f"{ends[-1]:.1f} s for {args.iterations} iterations, reward of the last 3 {last:.2f}"
        )
    plot({k: v for k, v in curves.items() if k != "k=1"}, Path(args.png))
    print(f"wrote {args.png}")
    print(load_line("end"))
    print(f"fraction of ideal (k=2): {rates[2] / ideal:.2f}")


if __name__ == "__main__":
    main()
