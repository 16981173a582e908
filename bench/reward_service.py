"""Reward service throughput: the `reward_model` operator against a plain Hugging Face forward
loop, the `llm_judge` operator against HF `generate`, and how much of the reward model's time
streaming hides behind generation.

* **RM**: the same rows (addition prompts + responses whose lengths are skewed as RL answers
  are: most short, one in ten long), the same model (the tiny reward model), one torch thread
  each. rldag cuts token-budget micro-batches by length (`micro_batch_tokens`); the HF loop
  takes fixed batches of `--hf-batch` rows in table order, padded to their longest row, as a
  `pipeline`-style scorer does. Scores are checked equal.
* **Judge**: the tiny policy as a judge (greedy, 4 new tokens) on one prompt per row (the
  template puts the response in front of the prompt, so every row's prompt differs); rldag's
  rollout engine in process against HF `generate` in batches of `--hf-batch`, left-padded.
* **Overlap**: examples/reward_model.yaml (reward model on its own pool) for `--iterations`
  iterations with streamed edges (`async.chunk_groups: 8`) and with whole tables (0): wall
  time per iteration and how long the score node runs after generate has finished.

Runs alternate and each side's best counts (this machine is shared).

    .venv/bin/python bench/reward_service.py [--rows 512] [--repeats 5] [--iterations 8]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples.tiny_task: the demo builders are not installed


def skewed_rows(count: int, seed: int = 0) -> pa.Table:
    """Addition prompts with responses: 90 % 1-2 characters, 10 % 20-50 (a long tail)."""
    from examples.tiny_task.problems import all_problems

    rng = random.Random(seed)
    problems = all_problems()
    prompts, responses = [], []
    for _ in range(count):
        p = problems[rng.randrange(len(problems))]
        long = rng.random() < 0.1
        size = rng.randint(20, 50) if long else rng.randint(1, 2)
        prompts.append(p.prompt)
        responses.append("".join(rng.choice("0123456789+=") for _ in range(size)))
    return pa.table(
        {
            "prompt_id": pa.array(range(count), pa.int64()),
            "sample_idx": pa.array([0] * count, pa.int32()),
            "prompt": prompts,
            "response": responses,
        }
    )


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_rm(rm: Path, rows: pa.Table, repeats: int, hf_batch: int) -> str:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from operators.score.reward_service.reward_model import RewardModelParams, RewardModelScorer
    from rldag.graph.operator import NodeContext

    scorer = RewardModelScorer(RewardModelParams(model_path=str(rm), micro_batch_tokens=2048))
    tokenizer = AutoTokenizer.from_pretrained(rm)
    model = AutoModelForSequenceClassification.from_pretrained(rm).eval()
    texts = [
        p + r for p, r in zip(rows["prompt"].to_pylist(), rows["response"].to_pylist(), strict=True)
    ]
    ctx = NodeContext("rm", 0, 0, "")

    def ours() -> list[float]:
        out = scorer({"rollouts": rows}, ctx)
        return [json.loads(i)["rm_score"] for i in out["reward_info"].to_pylist()]

    def hf() -> list[float]:
        scores: list[float] = []
        with torch.inference_mode():
            for i in range(0, len(texts), hf_batch):
                enc = tokenizer(texts[i : i + hf_batch], return_tensors="pt", padding=True)
                scores += model(**enc).logits[:, 0].tolist()
        return scores

    diff = float(np.max(np.abs(np.array(ours()) - np.array(hf()))))
    t_ours, t_hf = float("inf"), float("inf")
    for _ in range(repeats):
        t_ours, t_hf = min(t_ours, best(ours, 1)), min(t_hf, best(hf, 1))
    n = rows.num_rows
    before = scorer.forwards
    ours()
    forwards = scorer.forwards - before
    return (
        f"reward model, {n} rows: rldag {n / t_ours:,.0f} rows/s ({forwards} forwards), "
        f"HF loop (batch {hf_batch}) {n / t_hf:,.0f} rows/s, ratio {t_hf / t_ours:.2f}x, "
        f"max |score diff| {diff:.1e}"
    )


def bench_judge(policy: Path, rows: pa.Table, repeats: int, hf_batches: list[int]) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from operators.generate.single_turn import GenerateParams
    from operators.score.reward_service.llm_judge import JudgeParams, LLMJudge
    from rldag.graph.operator import NodeContext

    generate = GenerateParams(model_path=str(policy), temperature=0.0, max_new_tokens=4)
    judge = LLMJudge(
        JudgeParams(generate=generate, template="{{ response[:2] }}+{{ prompt }}", on_error="zero")
    )
    prompts = judge.prompts(rows)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    model = AutoModelForCausalLM.from_pretrained(policy).eval()
    pad = tokenizer.pad_token_id
    ctx = NodeContext("judge", 0, 0, "")

    def ours() -> None:
        judge({"rollouts": rows}, ctx)

    def hf(hf_batch: int) -> None:
        with torch.inference_mode():
            for i in range(0, len(prompts), hf_batch):
                ids = [tokenizer(p)["input_ids"] for p in prompts[i : i + hf_batch]]
                width = max(map(len, ids))
                x = torch.tensor([[pad] * (width - len(p)) + p for p in ids])
                mask = (
                    torch.arange(width)[None, :]
                    >= torch.tensor([width - len(p) for p in ids])[:, None]
                ).long()
                model.generate(
                    input_ids=x,
                    attention_mask=mask,
                    do_sample=False,
                    max_new_tokens=4,
                    pad_token_id=pad,
                )

    t_ours, t_hf = float("inf"), dict.fromkeys(hf_batches, float("inf"))
    for _ in range(repeats):
        t_ours = min(t_ours, best(ours, 1))
        for size in hf_batches:
            t_hf[size] = min(t_hf[size], best(lambda size=size: hf(size), 1))
    n = rows.num_rows
    peers = ", ".join(
        f"HF generate (batch {size}) {n / t:,.0f} rows/s, ratio {t / t_ours:.2f}x"
        for size, t in t_hf.items()
    )
    return f"judge, {n} rows: rldag engine {n / t_ours:,.0f} rows/s; {peers}"


def bench_overlap(policy: Path, rm: Path, data: Path, iterations: int) -> list[str]:
    from rldag.config.spec import load_pipeline
    from rldag.engine.driver import run_inline
    from rldag.engine.events import NodeFinished, add_listener
    from rldag.engine.run import Run
    from rldag.graph.dag import build_graph
    from rldag.report.reward_curve import store_reward_curve

    finished: dict[tuple[int, str], float] = {}
    seconds: dict[tuple[int, str], float] = {}

    def listen(event: object) -> None:
        if isinstance(event, NodeFinished):
            finished[event.iteration, event.node] = time.perf_counter()
            seconds[event.iteration, event.node] = event.seconds

    lines = []
    remove = add_listener(listen)
    for chunk in (8, 0):
        finished.clear()
        loaded = load_pipeline(
            ROOT / "examples" / "reward_model.yaml",
            [
                f"model.path={policy}",
                f"nodes.prompts.params.path={data}",
                f"nodes.score.params.model_path={rm}",
                f"iterations={iterations}",
                f"async.chunk_groups={chunk}",
                "storage.persist=false",
                "storage.uri=/tmp/rldag-bench-reward-service",
            ],
        )
        run = Run.start(loaded, build_graph(loaded))
        run_inline(run, on_close=(store_reward_curve,))
        run.close()
        its = range(1, iterations)
        walls = [finished[i, "train"] - finished[i - 1, "train"] for i in its]
        tail = [finished[i, "score"] - finished[i, "generate"] for i in its]
        score_s = [seconds[i, "score"] for i in its]
        mode = f"streamed (chunk_groups {chunk})" if chunk else "whole tables"
        lines.append(
            f"overlap, {mode}: {statistics.median(walls) * 1e3:.0f} ms per iteration, score "
            f"node {statistics.median(score_s) * 1e3:.0f} ms, of which "
            f"{statistics.median(tail) * 1e3:.0f} ms after generate finished (medians, "
            "iterations 1..)"
        )
    remove()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hf-batch", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--only", choices=["rm", "judge", "overlap"])
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    torch.set_num_threads(1)
    from examples.tiny_task import build_tiny_task
    from examples.tiny_task.reward_model import build_tiny_reward_model

    task = build_tiny_task(ROOT / ".cache" / "tiny")
    rm = build_tiny_reward_model(ROOT / ".cache" / "tiny_rm")
    rows = skewed_rows(args.rows)
    lines = []  # printed after the load at the end
    if args.only in (None, "rm"):
        lines.append(bench_rm(rm, rows, args.repeats, args.hf_batch))
    if args.only in (None, "judge"):
        lines.append(bench_judge(task / "model", rows, args.repeats, [args.hf_batch, 256]))
    if args.only in (None, "overlap"):
        lines += bench_overlap(task / "model", rm, task / "train.parquet", args.iterations)
    print(load_line("end"))
    print(*lines, sep="\n")


if __name__ == "__main__":
    main()
