"""Sample-level async on the long-CoT task: sync, iteration-async and continuous generation.

The shipped long-CoT pipeline (``examples/long_cot.yaml``: 16 prompts x 8 samples, answers
of 11 to ~240 tokens) on split pools (training and rollout one CPU each, Ray), driven
inline, each configuration in a process of its own: sync (k = 0), iteration-async
(``async.mode: iteration``, k = 1, 2) and continuous generation (``async.mode:
continuous``, k = 1, 2). The engine has one iteration's samples of slots
(``max_batch_size``). Figures are over iterations 2.. (the first two pay model loads and
warm-up):

* samples/s, seconds per iteration;
* slot occupancy: decoding sequences x seconds (``rollout/busy_slot_s``) over slots x seconds;
* trainer idle: the share of the seconds no train step ran;
* token staleness: the share of trained tokens sampled 0, 1, 2 ... versions behind;
* the ideal: the sum of the sync run's stage times over its slowest stage (what a perfect
  pipeline of those stages would gain over sync). The stages: rollout (the source,
  generate and the nodes streamed behind it: first start to last end) and train.

With ``--train-groups G`` a DAPO filter (``dynamic_sampling``, no refill round) keeps the first
G informative groups of the 16 for the trainer, as DAPO trains on fewer groups than it
generates: the trainer's share shrinks and generation bounds the pipeline.

Then sync and continuous (k = 2) learn for ``--curve-iterations`` per seed (0: no curves),
and the reward against wall-clock seconds of the first seed goes to ``--png``. Last it prints
(X a number):

    continuous vs iteration-async (k=2): X
    fraction of ideal (continuous, k=2): X
    slot occupancy (continuous, k=2): X
    time to sync's final reward (continuous / sync): X
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
from collections import Counter
from pathlib import Path

from grpo_race import Result
from long_cot_race import plot, rolling_mean
from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "examples/long_cot.yaml"
PROMPTS, GROUP = 16, 8
SLOTS = PROMPTS * GROUP
WARM = 2  # iterations left out of the figures
FINAL = 10  # iterations whose mean reward is a run's final reward
EXTRA: list[str] = []  # overrides every run gets (--train-groups)
CONFIGS = {  # name -> (k, mode)
    "sync": (0, "iteration"),
    "iteration k=1": (1, "iteration"),
    "iteration k=2": (2, "iteration"),
    "continuous k=1": (1, "continuous"),
    "continuous k=2": (2, "continuous"),
}


def child(k: int, mode: str, overrides: list[str]) -> None:
    """One run; prints its figures as JSON."""
    from rldag.config.spec import load_pipeline
    from rldag.engine.driver import run_inline
    from rldag.engine.events import IterationFinished, NodeFinished, NodeStarted, add_listener
    from rldag.engine.run import Run
    from rldag.graph.dag import build_graph

    steps: dict[tuple[int, str], list[float]] = {}
    ends: list[float] = []

    def listen(event: object) -> None:
        now = time.perf_counter()
        if isinstance(event, NodeStarted):
            steps[(event.iteration, event.node)] = [now, now]
        elif isinstance(event, NodeFinished):
            steps[(event.iteration, event.node)][1] = now
        elif isinstance(event, IterationFinished):
            ends.append(now)

    add_listener(listen)
    pools = ["pools.colocate=[]"] if k else []
    loaded = load_pipeline(
        PIPELINE, [*pools, f"async.max_staleness={k}", f"async.mode={mode}", *overrides]
    )
    run = Run.start(loaded, build_graph(loaded))
    run_dir = Path(run.uri.removeprefix("file://"))
    run_inline(run)
    print(json.dumps(_figures(run.metrics, steps, ends, run_dir)))


def _figures(
    metrics: list[dict], steps: dict[tuple[int, str], list[float]], ends: list[float], run_dir: Path
) -> dict:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    n = len(metrics)
    wall = ends[-1] - ends[WARM - 1]
    steady = metrics[WARM:]
    stage = {  # rollout: generate with the nodes streamed behind it; then train
        name: statistics.median(
            max(b for (j, nd), (_, b) in steps.items() if j == i and (nd == "train") == is_train)
            - min(a for (j, nd), (a, _) in steps.items() if j == i and (nd == "train") == is_train)
            for i in range(WARM, n)
        )
        for name, is_train in (("rollout", False), ("train", True))
    }
    train_s = sum(b - a for (i, nd), (a, b) in steps.items() if nd == "train" and i >= WARM)
    lags: Counter[int] = Counter()
    for i in range(n):
        table = pq.read_table(
            run_dir / f"iter={i}" / "advantage.parquet", columns=["response_versions"]
        )
        lags.update((i - pc.list_flatten(table["response_versions"]).to_numpy()).tolist())
    start = min(a for a, _ in steps.values())
    return {
        "per_iteration": wall / (n - WARM),
        "samples_per_s": SLOTS * (n - WARM) / wall,
        "occupancy": sum(m.get("rollout/busy_slot_s", 0.0) for m in steady) / (SLOTS * wall),
        "trainer_idle": 1 - train_s / wall,
        "stages": stage,
        "staleness": {str(lag): count / sum(lags.values()) for lag, count in sorted(lags.items())},
        "spanning_rows": sum(m.get("rollout/spanning_rows", 0.0) for m in metrics),
        "curve": [(end - start, m["reward/mean"]) for end, m in zip(ends, metrics, strict=True)],
    }


def measure(name: str, iterations: int, seed: int, runs: Path) -> dict:
    k, mode = CONFIGS[name]
    overrides = [
        f"iterations={iterations}",
        f"seed={seed}",
        f"storage.uri=file://{runs}",
        f"nodes.prompts.params.batch_size={PROMPTS}",
        f"nodes.generate.params.n={GROUP}",
        f"nodes.generate.params.max_batch_size={SLOTS}",
        *EXTRA,
    ]
    command = [sys.executable, __file__, "--child", str(k), mode, *overrides]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_to(curve: list[tuple[float, float]], target: float) -> float:
    """Seconds until the rolling mean of the reward first reaches `target`."""
    seconds, rewards = zip(*curve, strict=True)
    smooth = rolling_mean(list(rewards), 5)
    return next((s for s, r in zip(seconds, smooth, strict=True) if r >= target), float("inf"))


def final(curve: list[tuple[float, float]]) -> float:
    return statistics.mean(r for _, r in curve[-FINAL:])


def dapo_filter(train_groups: int) -> list[str]:
    """Overrides: a dynamic_sampling filter between score and advantage keeping the first
    `train_groups` informative groups, with no refill round."""
    node = "nodes.filter"
    return [
        f"{node}.kind=transform",
        f"{node}.op=dynamic_sampling",
        f"{node}.inputs.scored=score",
        f"{node}.params.metric=reward",
        f"{node}.params.train_groups={train_groups}",
        f"{node}.params.max_rounds=1",
        "nodes.advantage.inputs.scored=filter",
    ]


def decode_scaling(batches: tuple[int, ...] = (16, 32, 64, 128), tokens: int = 64) -> str:
    """The engine's decode tokens/s on the long-CoT model, one thread, by the number of
    sequences in its batch (fuller slots pay only while a step's cost grows slower than its
    rows: on a GPU, memory-bound, nearly free; on a CPU, compute-bound, it saturates)."""
    import torch

    from operators.model.hf import load_causal_lm
    from operators.rollout import SamplingParams, TorchEngine

    torch.set_num_threads(1)
    batcher = TorchEngine(load_causal_lm(str(ROOT / ".cache/tiny-long-cot/model"))).batcher
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, ignore_eos=True)
    rates = []
    for rows in batches:
        best = float("inf")
        for repeat in range(3):
            start = time.perf_counter()
            tickets = {
                batcher.submit([3, 4, 5, 6, 7, 8], params, seed=repeat, index=i, stop_ids=[])
                for i in range(rows)
            }
            while tickets:
                tickets -= {ticket for ticket, _ in batcher.step()}
            best = min(best, time.perf_counter() - start)
        rates.append(f"{rows}: {rows * tokens / best:.0f}")
    return "decode tokens/s by sequences in the batch: " + ", ".join(rates)


def throughput(iterations: int, runs: Path) -> dict[str, dict]:
    found = {}
    for name in CONFIGS:
        figures = found[name] = measure(name, iterations, 0, runs / name.replace(" ", "-"))
        lags = ", ".join(f"{lag}: {share:.2f}" for lag, share in figures["staleness"].items())
        print(
            f"{name:>15}: {figures['per_iteration']:.3f} s/iteration, "
            f"{figures['samples_per_s']:.1f} samples/s, slot occupancy {figures['occupancy']:.2f}, "
            f"trainer idle {figures['trainer_idle']:.2f}, token staleness {{{lags}}}, "
            f"rows spanning versions {figures['spanning_rows']:.0f}",
            flush=True,
        )
    stages = found["sync"]["stages"]
    print("sync stage medians: " + ", ".join(f"{n} {s:.3f} s" for n, s in stages.items()))
    return found


def learning(iterations: int, seeds: list[int], runs: Path, png: Path) -> float:
    """Sync and continuous (k = 2) per seed; returns the mean time ratio to sync's final."""
    ratios, curves = [], {}
    for seed in seeds:
        for name in ("sync", "continuous k=2"):
            curves[(seed, name)] = measure(name, iterations, seed, runs / f"{seed}-{name[:4]}")[
                "curve"
            ]
        sync, cont = curves[(seed, "sync")], curves[(seed, "continuous k=2")]
        target = final(sync)
        ratio = time_to(cont, target) / time_to(sync, target)
        ratios.append(ratio)
        print(
            f"seed {seed}: final reward (mean of the last {FINAL}) sync {target:.3f}, continuous "
            f"{final(cont):.3f}; seconds to sync's final: sync {time_to(sync, target):.1f}, "
            f"continuous {time_to(cont, target):.1f} (ratio {ratio:.2f}); wall sync "
            f"{sync[-1][0]:.1f} s, continuous {cont[-1][0]:.1f} s",
            flush=True,
        )
    first = seeds[0]
    results = [Result(name, [], curve=curves[(first, name)]) for name in ("sync", "continuous k=2")]
    plot(results, f"long CoT GRPO, split pools, seed {first}: sync vs continuous (k = 2)", png)
    return statistics.mean(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=16)
    parser.add_argument("--curve-iterations", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--png", type=Path, default=ROOT / "docs/results/long_tail.png")
    parser.add_argument("--train-groups", type=int, default=0, help="a DAPO filter keeps these")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        child(int(args.child[0]), args.child[1], rest)
        return
    print(describe())
    print(load_line("start"), flush=True)
    if args.train_groups:
        EXTRA.extend(dapo_filter(args.train_groups))
        print(f"a DAPO filter keeps {args.train_groups} of {PROMPTS} groups (no refill)")
    print(decode_scaling(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        found = throughput(args.iterations, Path(tmp))
        curves = args.curve_iterations > 0
        ratio = learning(args.curve_iterations, args.seeds, Path(tmp), args.png) if curves else 0
    stages = found["sync"]["stages"]
    ideal = sum(stages.values()) / max(stages.values())
    sync_s = found["sync"]["per_iteration"]
    cont, iteration = found["continuous k=2"], found["iteration k=2"]
    print(f"ideal (sum of sync's stages / slowest): {ideal:.2f}x sync")
    print(load_line("end"))
    gain = cont["samples_per_s"] / iteration["samples_per_s"]
    print(f"continuous vs iteration-async (k=2): {gain:.2f}")
    print(f"fraction of ideal (continuous, k=2): {sync_s / cont['per_iteration'] / ideal:.2f}")
    print(f"slot occupancy (continuous, k=2): {cont['occupancy']:.2f}")
    if ratio:
        print(f"time to sync's final reward (continuous / sync): {ratio:.2f}")


if __name__ == "__main__":
    main()
