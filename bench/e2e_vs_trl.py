"""End-to-end GRPO race on the same work: TRL's GRPOTrainer, rldag, and a bare PyTorch loop.

Same tiny addition model (``examples.tiny_task``), same prompts, group size, completion length,
learning rate and number of optimizer steps (one step per batch of prompts, as rldag's default
pipeline does). Contestants, all on CPU (``--threads`` sets torch's threads in this process;
by default torch uses every core, and on a busy 2-core machine two threads contend badly, while
rldag's pool workers are Ray actors with one thread each: run with ``--threads 1`` to pin
everyone to one thread):

* TRL ``GRPOTrainer`` (``use_cpu=True``, ``bf16=False``, ``beta=0``; needs the ``bench`` extra);
* rldag's default pipeline driven through ``rldag.engine.run.Run`` (what the Prefect tasks
  call, with every edge persisted as Parquet), and the full ``rldag run`` CLI under Prefect in a
  subprocess (reported separately: its wall time includes starting Prefect's embedded server);
* a bare single-process loop: HF ``generate`` + the same reward, GRPO advantages and PPO-clip
  token-mean loss + AdamW, no orchestration: the near-limit reference.

Seconds per step count everything a step does (rollout, reward, advantage, update; rldag also
its Ray dispatch and Parquet writes). The first step also pays one-time setup (rldag builds its
operators in their pool workers then; TRL and the bare loop load the model before step 1), so
s/step and samples/s are the mean over steps 2..N, and the first step is shown apart. Prints
``ratio vs TRL: X`` (TRL s/step over rldag s/step) and the ratio vs the bare loop.

    .venv/bin/python bench/e2e_vs_trl.py [--steps 8] [--prompts 8] [--group 8] [--max-new-tokens 8]
    .venv/bin/python bench/e2e_vs_trl.py --task long_cot [--steps 40]   # bench/long_cot_race.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import long_cot_race
import numpy as np
import torch
from grpo_race import Result, Work, problems, run_trl
from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples.tiny_task: the demo builders are not installed


def reward(completion: str, truth: str) -> float:
    from operators.score.rewards.arithmetic import compute_score

    return float(compute_score("arithmetic", completion, truth))


# ---- contestants -----------------------------------------------------------------------------


def _overrides(task: Path, work: Work, storage: str) -> list[str]:
    return [
        f"iterations={work.steps}",
        f"storage.uri={storage}",
        f"model.path={task / 'model'}",
        f"nodes.prompts.params.path={task / 'train.parquet'}",
        f"nodes.prompts.params.batch_size={work.prompts}",
        f"nodes.generate.params.n={work.group}",
        f"nodes.generate.params.max_new_tokens={work.max_new_tokens}",
        f"nodes.train.params.lr={work.lr}",
        f"nodes.generate.params.ignore_eos={str(work.fixed_length).lower()}",
        *work.rldag,
    ]


def run_rldag(task: Path, work: Work) -> Result:
    """The default pipeline through ``rldag.engine.run.Run`` (no Prefect). A step's cost is the wall
    time between iterations' ends (with async, iterations overlap: their own durations are
    longer than what each adds)."""
    from rldag.config.spec import load_pipeline
    from rldag.engine.driver import run_inline
    from rldag.engine.events import IterationFinished, RunStarted, add_listener
    from rldag.engine.run import Run
    from rldag.graph.dag import build_graph
    from rldag.report.reward_curve import store_reward_curve

    marks: list[float] = []

    def listen(event: object) -> None:
        if isinstance(event, RunStarted | IterationFinished):
            marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        loaded = load_pipeline(ROOT / "pipeline.yaml", _overrides(task, work, out))
        run = Run.start(loaded, build_graph(loaded))
        remove = add_listener(listen)
        try:
            run_inline(run, work.steps, on_close=(store_reward_curve,))
        finally:
            remove()
    times = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    return Result("rldag (Run, no Prefect)", times)


def _rldag_run_wall(task: Path, work: Work, steps: int) -> float:
    """Seconds `rldag run` takes, as a process, for `steps` iterations of `work`."""
    with tempfile.TemporaryDirectory() as out:
        # rldag's pool workers get one torch thread per CPU they hold (Ray's default when
        # OMP_NUM_THREADS is unset): `--threads` is for this process, not for them.
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        cmd = [sys.executable, "-m", "flows.cli", "run", str(ROOT / "pipeline.yaml")]
        args = [*_overrides(task, work, out), f"iterations={steps}"]
        start = time.perf_counter()
        done = subprocess.run(cmd + args, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"rldag run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return time.perf_counter() - start


def run_rldag_prefect(task: Path, work: Work) -> Result:
    """``rldag run`` as a user runs it. A step's cost is the marginal wall time of an
    iteration, everything included (the iteration subflow's own API round trips too): the
    difference between a run of PREFECT_STEPS iterations and a run of one (startup, ~20 s,
    cancels out; enough iterations that its jitter does not)."""
    steps = max(work.steps, PREFECT_STEPS)
    one = _rldag_run_wall(task, work, 1)
    full = _rldag_run_wall(task, work, steps)
    step = (full - one) / (steps - 1)
    note = f"{steps} iterations: {full:.1f} s incl. startup; marginal wall per iteration"
    return Result("rldag run (Prefect)", [one] + [step] * (steps - 1), note=note)


PREFECT_STEPS = 30


def run_bare(task: Path, work: Work) -> Result:
    """HF generate + reward + GRPO advantages + PPO-clip token-mean loss + AdamW, inline."""
    from transformers import AutoTokenizer

    from operators.algorithms.logprobs import token_logprobs
    from operators.algorithms.policy_losses import ppo_clip_loss
    from operators.model.hf import load_causal_lm
    from operators.transform.advantage import grpo_advantages

    tokenizer = AutoTokenizer.from_pretrained(task / "model")
    tokenizer.padding_side = "left"
    model = load_causal_lm(str(task / "model"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=work.lr, weight_decay=0.0)
    data = problems(task / "train.parquet")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rng = np.random.default_rng(0)
    times = []
    for _ in range(work.steps):
        start = time.perf_counter()
        picked = [data[i] for i in rng.choice(len(data), work.prompts, replace=False)]
        enc = tokenizer([p for p, _ in picked], return_tensors="pt", padding=True)
        model.eval()
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad,
                max_new_tokens=work.max_new_tokens, num_return_sequences=work.group,
                min_new_tokens=work.max_new_tokens if work.fixed_length else 0,
            )  # fmt: skip
        width = enc["input_ids"].shape[1]
        completion = out[:, width:]
        is_eos = (completion == eos).int() * (not work.fixed_length)
        ended = is_eos.cumsum(-1)
        keep = ((ended == 0) | ((ended == 1) & (is_eos == 1))).float()  # up to the first eos
        texts = tokenizer.batch_decode(
            completion * keep.long() + pad * (1 - keep.long()), skip_special_tokens=True
        )
        truths = [g for _, g in picked for _ in range(work.group)]
        rewards = np.array([reward(t, g) for t, g in zip(texts, truths, strict=True)])
        groups = np.repeat(np.arange(work.prompts), work.group)
        adv = torch.tensor(grpo_advantages(rewards, groups)).unsqueeze(-1)
        model.train()
        attention = torch.cat(
            [enc["attention_mask"].repeat_interleave(work.group, 0), keep.long()], -1
        )
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=out, attention_mask=attention, position_ids=positions).logits
        logits = logits[:, width - 1 : -1]
        logp = token_logprobs(logits, completion)
        loss, _, _ = ppo_clip_loss(logp, logp.detach(), adv * keep, keep)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        times.append(time.perf_counter() - start)
    return Result("bare loop (HF generate)", times)


# ---- driver ----------------------------------------------------------------------------------

ADDITION = {"steps": 8, "prompts": 8, "group": 8, "max_new_tokens": 8, "lr": 3e-4, "threads": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task",
        choices=["addition", "long_cot"],
        default="addition",
        help="addition: the default task (TRL, rldag inline and under Prefect, a bare loop); "
        "long_cot: the long chain-of-thought race (bench/long_cot_race.py)",
    )
    parser.add_argument("--steps", type=int, help="optimizer steps (8; long_cot 40)")
    parser.add_argument("--prompts", type=int, help="prompts per optimizer step (8; long_cot 16)")
    parser.add_argument("--group", type=int, help="completions per prompt (8)")
    parser.add_argument("--max-new-tokens", type=int, help="(8; long_cot 256)")
    parser.add_argument("--lr", type=float, help="(3e-4; long_cot 1e-4)")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads in this process (TRL, bare loop, driver); 0 = torch's default "
        "(all cores; long_cot: 2). rldag's pool workers are Ray actors with one thread each",
    )
    parser.add_argument("--png", type=Path, default=ROOT / "docs/results/long_cot_vs_trl.png")
    parser.add_argument("--skip", nargs="*", default=[], choices=["trl", "prefect", "bare"])
    parser.add_argument(
        "--fixed-length", action="store_true", help="ignore eos: every completion is full length"
    )
    parser.add_argument(
        "--rldag",
        nargs="*",
        default=[],
        help="pipeline overrides for both rldag contestants, e.g. async.max_staleness=1 "
        "pools.colocate=[]",
    )
    args = parser.parse_args()
    defaults = long_cot_race.DEFAULTS if args.task == "long_cot" else ADDITION
    given = {k: getattr(args, k) for k in defaults}
    work = Work(
        **{k: defaults[k] if v is None else v for k, v in given.items()},
        fixed_length=args.fixed_length,
        rldag=tuple(args.rldag),
    )
    if args.task == "long_cot":
        long_cot_race.race(work, args.png, skip_trl="trl" in args.skip)
        return
    if work.threads:
        torch.set_num_threads(work.threads)
    from transformers.utils import logging as hf_logging

    from examples.tiny_task import build_tiny_task

    hf_logging.set_verbosity_error()
    task = build_tiny_task(ROOT / ".cache" / "tiny")
    print(describe())
    print(load_line("start"))
    print(
        f"work: {work.steps} steps x {work.prompts} prompts x {work.group} samples "
        f"({'exactly' if work.fixed_length else '<='} {work.max_new_tokens} new tokens), "
        f"lr {work.lr}, torch threads here {torch.get_num_threads()}",
        flush=True,
    )
    # `rldag run` goes first: it starts its own Ray, which must not meet this process's.
    contestants = [("prefect", run_rldag_prefect), ("rldag", run_rldag), ("bare", run_bare)]
    contestants.append(("trl", lambda t, w: run_trl(t / "model", t / "train.parquet", reward, w)))
    contestants = [(k, f) for k, f in contestants if k not in args.skip]
    results = {}
    for key, run in contestants:
        result = run(task, work)
        results[key] = result
        rate = work.prompts * work.group / result.per_step
        extra = f"; {result.note}" if result.note else ""
        print(
            f"  {result.name:<26} {result.per_step:7.3f} s/step  {rate:8.1f} samples/s"
            f"  (first step {result.first:.2f} s{extra})",
            flush=True,
        )
    print(load_line("end"))
    ours = results["rldag"].per_step
    if "trl" in results:
        print(f"ratio vs TRL: {results['trl'].per_step / ours:.1f}")
    if "bare" in results:
        print(f"ratio vs bare loop: {results['bare'].per_step / ours:.2f}")
    if "prefect" in results and "trl" in results:
        ratio = results["trl"].per_step / results["prefect"].per_step
        print(f"ratio vs TRL (rldag run under Prefect): {ratio:.1f}")


if __name__ == "__main__":
    main()
