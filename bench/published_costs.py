"""Beyond this machine: the simulator on stage costs veRL published for Qwen2.5-Math-7B (DAPO,
responses up to 28K tokens, 512 prompts x 16 per step, H20 GPUs) at 32, 64 and 128 GPUs
(docs/advance/fully_async.md of verl, "Asynchronous Training on 7B Model"). For each size it
writes the colocated synchronous stage costs as a cost table (docs/published/), lets the
planner search placements of the default pipeline's graph on that cluster, and prints
simulated sync vs async against the speedups veRL reports.

    .venv/bin/python bench/published_costs.py
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.csv
from machine import describe, load_line

from rldag.planning.costs import CostModel, NodeCost

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS, SAMPLES = 512, 512 * 16
PARAMS = 7_620_000_000  # Qwen2.5-Math-7B
H20_GB = 96.0
# GPUs -> colocated sync step, gen, old_log_prob, update_actor seconds; then fully async
# (half the GPUs each) step, trainer's wait for samples, update_actor; reported speedups of
# the total time at 100 and 400 steps
VERL = {
    32: (790.10, 357.41, 107.71, 269.80, 294.77, 21.26, 313.81, 1.72, 2.66),
    64: (365.28, 150.72, 70.26, 133.41, 189.26, 28.46, 156.98, 2.09, 1.92),
    128: (356.30, 177.85, 53.92, 113.81, 150.63, 33.14, 113.16, 2.67, 2.35),
}


def fixed_and_parallel(seconds: dict[int, float]) -> tuple[float, float]:
    """Least squares of seconds(N) = fixed + work / N over the published sizes: the part no
    number of GPUs shortens (the longest answer, per-step overheads) and the GPU-seconds."""
    gpus = sorted(seconds)
    work, fixed = np.polyfit([1 / n for n in gpus], [seconds[n] for n in gpus], 1)
    return max(0.0, float(fixed)), float(work)


def sync_costs(gpus: int, across_sizes: bool) -> CostModel:
    """The cost model of veRL's colocated sync step on `gpus` GPUs: generation per prompt,
    training (old_log_prob + update_actor) per sample, the rest of the step (reward, ref,
    weight refit) on the driver. `across_sizes`: each stage as a fixed part plus work shared
    by GPUs, fitted over 32-128 GPUs; else all of the stage's time at `gpus` is work."""
    step, gen, old_logp, update, *_ = VERL[gpus]
    train = old_logp + update
    gen_fixed, gen_work = 0.0, gen * gpus
    train_fixed, train_work = 0.0, train * gpus
    if across_sizes:
        gen_fixed, gen_work = fixed_and_parallel({n: r[1] for n, r in VERL.items()})
        train_fixed, train_work = fixed_and_parallel({n: r[2] + r[3] for n, r in VERL.items()})
    nodes = {
        "generate": NodeCost(
            "generate", "generate", "rollout", gen_fixed, gen_work / PROMPTS, 0.0, 1, PROMPTS
        ),
        "train": NodeCost(
            "train", "train", "training", train_fixed, train_work / SAMPLES, 0.0, 1, SAMPLES
        ),
    }
    rest = step - gen - train
    return CostModel(nodes, {"colocated": 0.0, "split": 0.0}, PARAMS, rest, SAMPLES, PROMPTS)


def async_mode_costs(gpus: int) -> CostModel:
    """Stage costs as veRL's fully async run measured them on half the GPUs each: rollouts
    (streamed, long answers resumed across updates) deliver a batch per async step, the
    trainer updates in update_actor seconds (no old_log_prob pass)."""
    half = gpus // 2
    step, _, update = VERL[gpus][4:7]
    nodes = {
        "generate": NodeCost(
            "generate", "generate", "rollout", 0.0, step / PROMPTS, 0.0, half, PROMPTS
        ),
        "train": NodeCost("train", "train", "training", 0.0, update / SAMPLES, 0.0, half, SAMPLES),
    }
    return CostModel(nodes, {"colocated": 0.0, "split": 0.0}, PARAMS, 0.0, SAMPLES, PROMPTS)


def best_of(found, sync_only: bool):
    """The fastest ranked placement (colocated and k = 0 when `sync_only`)."""
    ranked = [
        r
        for r in found.ranked
        if not sync_only or (r.candidate.max_staleness == 0 and len(r.candidate.colocate) == 1)
    ]
    return max(ranked, key=lambda r: r.result.samples_per_s)


def placement(ranked) -> str:
    c = ranked.candidate
    workers = ", ".join(f"{p}={w}" for p, w in c.workers)
    return f"{c.describe_colocate()}, {workers}, k={c.max_staleness}"


def main() -> None:
    from rldag.config.spec import load_pipeline
    from rldag.graph.dag import build_graph
    from rldag.planning.auto_plan import Limits, parse_cluster, search, sim_plan
    from rldag.planning.simulator import simulate

    print(describe())
    print(load_line("start"), flush=True)
    out = ROOT / "docs" / "published"
    out.mkdir(parents=True, exist_ok=True)
    pipeline = ROOT / "pipeline.yaml"

    def load(extra: list[str]):
        loaded = load_pipeline(pipeline, extra)
        return loaded, build_graph(loaded)

    lines = [  # printed after the load at the end
        "| GPUs | veRL sync step | cost model | simulated sync | simulated best "
        "(placement) | simulated speedup | veRL reported speedup |",
        "|---|---|---|---|---|---|---|",
    ]
    for gpus, row in VERL.items():
        for label, across in (("all work", False), ("fixed + work", True)):
            costs = sync_costs(gpus, across)
            name = "fit" if across else "work"
            pyarrow.csv.write_csv(
                costs.to_table(), out / f"verl-qwen2.5-math-7b-{gpus}gpu-{name}.csv"
            )
            cluster = parse_cluster(f"{gpus // 8}x8gpu")
            limits = Limits(max_staleness=2, gpu_memory_gb=H20_GB)
            found = search(load, costs, cluster, limits)
            sync, best = best_of(found, True), best_of(found, False)
            sync_step = SAMPLES / sync.result.samples_per_s
            best_step = SAMPLES / best.result.samples_per_s
            lines.append(
                f"| {gpus} | {row[0]:.0f} s | {label} | {sync_step:.0f} s | {best_step:.0f} s "
                f"({placement(best)}) | {sync_step / best_step:.2f}x "
                f"| {row[7]:.2f}x (100 steps), {row[8]:.2f}x (400 steps) |"
            )
    lines += [
        "",
        "| GPUs | veRL async-mode stage costs: simulated step (split, half each, k=1) "
        "| vs veRL sync step | veRL reported |",
        "|---|---|---|---|",
    ]
    for gpus, row in VERL.items():
        loaded, graph = load(["pools.colocate=[]", "async.max_staleness=1"])
        plan = sim_plan(loaded, graph)
        plan = replace(plan, workers={"rollout": gpus // 2, "training": gpus // 2})
        step = SAMPLES / simulate(graph, async_mode_costs(gpus), plan, 12).samples_per_s
        lines.append(
            f"| {gpus} | {step:.0f} s | {row[0] / step:.2f}x | {row[7]:.2f}x-{row[8]:.2f}x |"
        )
    print(load_line("end"))
    print(*lines, sep="\n")


if __name__ == "__main__":
    main()
