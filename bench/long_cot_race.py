"""The GRPO race on the long chain-of-thought task (``bench/e2e_vs_trl.py --task long_cot``).

Contestants on the same work — the shipped long-CoT model (``make model``), its train split,
``prompts`` problems x ``group`` samples per step, at most ``max_new_tokens`` new tokens,
temperature 1, the same learning rate, one optimizer step per batch, ``steps`` steps — and
the same cores:

* TRL ``GRPOTrainer`` in this process with ``threads`` torch threads (2: the machine's cores);
* ``rldag run examples/long_cot.yaml`` under Prefect (its embedded server and Ray pools, in a
  process of its own; pool workers take one torch thread per core they hold);
* the inline driver on the same pipeline, for the cost of orchestration.

A step's seconds are the mean over steps 2..N (the first pays one-time setup and is shown
apart). Prints the machine and load, each contestant's figures, and last (X a number):

    ratio vs TRL (rldag run under Prefect): X
    rldag run s/iteration over inline: X
    longest gap between a node finishing and the next starting: X s

and draws the reward of each step against seconds since the first step began, for both, into
``--png``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from grpo_race import Result, Work, run_trl
from machine import describe, load_line
from run_vs_inline import measure

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "examples/long_cot.yaml"
TASK = ROOT / ".cache" / "tiny-long-cot"
DEFAULTS = {"steps": 40, "prompts": 16, "group": 8, "max_new_tokens": 256, "lr": 1e-4, "threads": 2}


def score(completion: str, truth: str) -> float:
    from examples.tiny_task.long_cot.reward import compute_score

    return compute_score("long_cot", completion, truth)


def _overrides(work: Work) -> list[str]:
    return [
        f"nodes.prompts.params.batch_size={work.prompts}",
        f"nodes.generate.params.n={work.group}",
        f"nodes.generate.params.max_new_tokens={work.max_new_tokens}",
        f"nodes.train.params.lr={work.lr}",
        *work.rldag,
    ]


def run_rldag(mode: str, work: Work, runs: Path) -> tuple[Result, dict]:
    """`rldag run` (mode ``run``) or the inline driver (``inline``) in a process of its own."""
    args = argparse.Namespace(iterations=work.steps, pipeline=PIPELINE, overrides=_overrides(work))
    figures = measure(mode, args, runs)
    walls = [figures["first"]] + [figures["mean_per_iteration"]] * (work.steps - 1)
    name = "rldag run (Prefect)" if mode == "run" else "rldag inline driver"
    return Result(name, walls, curve=[tuple(p) for p in figures["curve"]]), figures


SMOOTH = 5  # steps in the plot's rolling mean


def rolling_mean(values: list[float], width: int) -> list[float]:
    """Mean of each value and up to `width - 1` before it."""
    return [
        sum(values[max(0, i - width + 1) : i + 1]) / min(i + 1, width) for i in range(len(values))
    ]


def title(work: Work) -> str:
    return (
        f"long CoT GRPO: {work.steps} steps x {work.prompts} prompts x {work.group} samples, "
        f"<= {work.max_new_tokens} tokens"
    )


def plot(results: list[Result], heading: str, png: Path) -> None:
    """Reward against wall-clock seconds, one line per contestant."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for result in results:
        seconds, rewards = zip(*result.curve, strict=True)
        (line,) = axes.plot(seconds, rewards, ".", alpha=0.35)
        axes.plot(seconds, rolling_mean(rewards, SMOOTH), color=line.get_color(), label=result.name)
    axes.set_xlabel("seconds since the first step began")
    axes.set_ylabel(f"reward (dots: each step; lines: mean of {SMOOTH} steps)")
    axes.set_title(heading, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png)


def race(work: Work, png: Path, skip_trl: bool = False) -> None:
    print(describe())
    print(load_line("start"), flush=True)
    print(
        f"work: {work.steps} steps x {work.prompts} prompts x {work.group} samples "
        f"(<= {work.max_new_tokens} new tokens), lr {work.lr}, TRL torch threads {work.threads}",
        flush=True,
    )
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["run"], run = run_rldag("run", work, Path(tmp) / "run")
        results["inline"], inline = run_rldag("inline", work, Path(tmp) / "inline")
    if not skip_trl:
        import torch

        torch.set_num_threads(work.threads)
        results["trl"] = run_trl(TASK / "model", TASK / "train.parquet", score, work)
    for result in results.values():
        last = [r for _, r in result.curve[-5:]]
        print(
            f"  {result.name:<22} {result.per_step:7.3f} s/step  (first step "
            f"{result.first:.2f} s); reward first 3 steps "
            f"{sum(r for _, r in result.curve[:3]) / 3:.3f}, last 5 {sum(last) / len(last):.3f}",
            flush=True,
        )
    for side, figures in (("rldag run", run), ("inline", inline)):
        print(f"generate's share of an iteration ({side}): {figures['generate_share']:.2f}")
    plot([results[k] for k in ("run", "trl") if k in results], title(work), png)
    print(f"reward against wall-clock seconds: {png}")
    print(load_line("end"))
    if "trl" in results:
        ratio = results["trl"].per_step / results["run"].per_step
        print(f"ratio vs TRL (rldag run under Prefect): {ratio:.2f}")
    over = run["per_iteration"] / inline["per_iteration"]
    print(f"rldag run s/iteration over inline: {over:.2f}")
    print(f"longest gap between a node finishing and the next starting: {run['idle']:.3f} s")
