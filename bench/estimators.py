"""Each advantage estimator (and policy loss) on the default task: the same pipeline, seed
and number of iterations, one `rldag run` after the other, on this machine.

Prints a Markdown table: mean sampled reward over the first 5 and the last 5 iterations,
seconds per iteration (`timing_s/iteration`: the iteration's nodes, iteration 0 excluded:
it builds the pool workers) and the whole `rldag run`'s wall time (Prefect and Ray start
included).

    .venv/bin/python bench/estimators.py [--iterations 30] [--only grpo,rloo]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
# The settings the table of docs/results/learning.md was measured with (the default pipeline
# before it moved to 64 prompts x 16 samples and 2 optimizer steps): 32 prompts x 8 samples,
# one step.
BASE = [
    "nodes.prompts.params.batch_size=32",
    "nodes.generate.params.n=8",
    "nodes.train.params.mini_batch_size=0",
    "nodes.train.params.clip_ratio_high=0.2",
]
BY_NAME = ["nodes.advantage.op=advantage"]
RUNS: dict[str, tuple[str, list[str]]] = {
    "grpo_advantage (default)": ("pipeline.yaml", []),
    "grpo": ("pipeline.yaml", [*BY_NAME, "nodes.advantage.params.estimator=grpo"]),
    "dr_grpo": (
        "pipeline.yaml",
        [
            *BY_NAME,
            "nodes.advantage.params.estimator=dr_grpo",
            "nodes.train.params.loss_agg_mode=seq-mean-token-sum",
        ],
    ),
    "rloo": ("pipeline.yaml", [*BY_NAME, "nodes.advantage.params.estimator=rloo"]),
    "reinforce_plus_plus": (
        "pipeline.yaml",
        [*BY_NAME, "nodes.advantage.params.estimator=reinforce_plus_plus"],
    ),
    "reinforce_plus_plus_baseline": (
        "pipeline.yaml",
        [*BY_NAME, "nodes.advantage.params.estimator=reinforce_plus_plus_baseline"],
    ),
    "remax": ("examples/remax.yaml", []),
    "gae (PPO with a critic)": ("examples/ppo_gae.yaml", []),
    "grpo + gspo (4 steps)": (
        "pipeline.yaml",
        [
            "nodes.train.params.policy_loss=gspo",
            "nodes.train.params.loss_agg_mode=seq-mean-token-mean",
            "nodes.train.params.clip_ratio_low=3e-4",
            "nodes.train.params.clip_ratio_high=4e-4",
            "nodes.train.params.mini_batch_size=64",
        ],
    ),
    "grpo + cispo (4 steps)": (
        "pipeline.yaml",
        [
            "nodes.train.params.policy_loss=cispo",
            "nodes.train.params.clip_ratio_low=1.0",
            "nodes.train.params.clip_ratio_high=4.0",
            "nodes.train.params.mini_batch_size=64",
        ],
    ),
    "grpo + ppo (4 steps)": ("pipeline.yaml", ["nodes.train.params.mini_batch_size=64"]),
    "grpo + tis token (4 steps)": (
        "pipeline.yaml",
        ["nodes.train.params.tis=token", "nodes.train.params.mini_batch_size=64"],
    ),
}


def run(pipeline: str, overrides: list[str], iterations: int, storage: Path) -> list[dict]:
    """One `rldag run`; its metrics rows."""
    command = [sys.executable, "-m", "flows.cli", "run", pipeline, f"iterations={iterations}"]
    command += [f"storage.uri={storage}", *BASE, *overrides]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    (metrics,) = storage.glob("*/metrics.parquet")
    return pq.read_table(metrics).to_pylist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--only", default="", help="comma-separated names of RUNS")
    args = parser.parse_args()
    names = [n for n in RUNS if not args.only or n in args.only.split(",")]
    print(describe())
    print(load_line("start"), flush=True)
    print("| run | reward, first 5 | reward, last 5 | s / iteration | run wall time |")
    print("|---|---|---|---|---|")
    for name in names:
        pipeline, overrides = RUNS[name]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            rows = run(pipeline, overrides, args.iterations, Path(tmp))
        wall = time.perf_counter() - start
        rewards = [r["reward/mean"] for r in rows]
        seconds = statistics.mean(r["timing_s/iteration"] for r in rows[1:])
        first, last = statistics.mean(rewards[:5]), statistics.mean(rewards[-5:])
        line = f"| {name} | {first:.2f} | {last:.2f} | {seconds:.2f} | {wall:.0f} s |"
        print(line, flush=True)
    print(load_line("end"))


if __name__ == "__main__":
    main()
