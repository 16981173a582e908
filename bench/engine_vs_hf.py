"""Rollout throughput: rldag's torch engine vs Hugging Face ``generate``, same model, same work.

Both sample at temperature 1 (no top-k/top-p) from the same model, the same prompts, ``n``
samples per prompt and the same ``max_new_tokens``, in one process with the same torch threads;
runs alternate (ours, HF, ours, HF, ...) and each side's best run counts, because this machine is
shared and noisy. Tokens/s counts generated tokens up to and including the one that ended each
sequence (HF's padding after an early eos is not counted for it). HF gets ``n`` as
``num_return_sequences`` (it prefills each copy; we prefill each prompt once). Scenarios:

* ``grpo``: the default pipeline's rollout (tiny addition model, 32 prompts x 8, up to 32 new
  tokens, stop at eos), the headline;
* ``fewshot``: the same with 5-example few-shot prompts (~24 tokens), so prefill matters;
* ``random``: an untrained model of the same shape, whose lengths vary (eos ~1/16 per step);
* ``fixed-16`` / ``fixed-256``: eos ignored (HF: ``min_new_tokens``), pure decode at batch 16
  and 256: the worst case for us, since nothing finishes early.

    .venv/bin/python bench/engine_vs_hf.py [--repeats 3] [--threads 1] [--only grpo]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from operators.rollout import SamplingParams, TorchEngine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples.tiny_task: the demo builders are not installed


@dataclass
class Scenario:
    """One workload: which model, which prompts, group size, length, eos on or off."""

    name: str
    prompts: list[list[int]]
    n: int
    max_new_tokens: int
    ignore_eos: bool = False
    random_init: bool = False


def useful_tokens(rows: list[list[int]], eos: set[int]) -> int:
    """Generated tokens up to and including the first eos of each row."""
    total = 0
    for row in rows:
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        total += cut
    return total


def run_hf(model, scenario: Scenario, eos: set[int], pad: int) -> int:
    """HF generate over all prompts at once (left-padded); returns the useful tokens."""
    width = max(map(len, scenario.prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in scenario.prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in scenario.prompts])
    extra = {"min_new_tokens": scenario.max_new_tokens} if scenario.ignore_eos else {}
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=scenario.max_new_tokens,
            num_return_sequences=scenario.n,
            pad_token_id=pad,
            **extra,
        )
    rows = out[:, width:].tolist()
    return sum(len(r) for r in rows) if scenario.ignore_eos else useful_tokens(rows, eos)


def run_ours(engine: TorchEngine, scenario: Scenario, seed: int) -> int:
    params = SamplingParams(
        n=scenario.n,
        temperature=1.0,
        max_new_tokens=scenario.max_new_tokens,
        ignore_eos=scenario.ignore_eos,
        seed=seed,
    )
    groups = engine.generate(scenario.prompts, params)
    return sum(len(c.token_ids) for group in groups for c in group)


def measure(scenario: Scenario, model_dir: Path, repeats: int) -> tuple[float, float]:
    """Best tokens/s of (ours, HF) over ``repeats`` alternating runs each, after a warm-up."""
    from operators.model.hf import load_causal_lm

    model = load_causal_lm(str(model_dir)).eval()
    if scenario.random_init:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            model = type(model)(model.config).eval()
        model.generation_config.eos_token_id = model.config.eos_token_id
    engine = TorchEngine(model)
    eos = set(engine.eos_token_ids)
    pad = model.config.pad_token_id or 0
    best = {"ours": 0.0, "hf": 0.0}
    run_ours(engine, scenario, seed=0)
    run_hf(model, scenario, eos, pad)
    for r in range(repeats):
        for side in ("ours", "hf"):
            start = time.perf_counter()
            tokens = (
                run_ours(engine, scenario, r)
                if side == "ours"
                else run_hf(model, scenario, eos, pad)
            )
            best[side] = max(best[side], tokens / (time.perf_counter() - start))
    return best["ours"], best["hf"]


def scenarios(tokenizer) -> list[Scenario]:
    questions = [f"{a}+{b}=" for a in range(8) for b in range(4)]
    plain = [tokenizer(q)["input_ids"] for q in questions]
    shots = "1+2=3 4+4=8 2+5=7 6+1=7 3+3=6 "
    fewshot = [tokenizer(shots + q)["input_ids"] for q in questions]
    return [
        Scenario("grpo", plain, n=8, max_new_tokens=32),
        Scenario("fewshot", fewshot, n=8, max_new_tokens=32),
        Scenario("random", plain, n=8, max_new_tokens=32, random_init=True),
        Scenario("fixed-16", plain[:2], n=8, max_new_tokens=64, ignore_eos=True),
        Scenario("fixed-256", plain, n=8, max_new_tokens=32, ignore_eos=True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from examples.tiny_task import build_tiny_task

    hf_logging.set_verbosity_error()
    task = build_tiny_task(ROOT / ".cache" / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(task / "model")
    print(f"torch threads: {args.threads}; best of {args.repeats} alternating runs per side")
    ratios = {}
    for scenario in scenarios(tokenizer):
        if args.only and scenario.name not in args.only:
            continue
        ours, hf = measure(scenario, task / "model", args.repeats)
        ratios[scenario.name] = ours / hf
        seqs = len(scenario.prompts) * scenario.n
        print(
            f"  {scenario.name:<10} {seqs:4d} seqs x <={scenario.max_new_tokens:3d} tokens: "
            f"rldag {ours:9.0f} tok/s   HF generate {hf:9.0f} tok/s   ratio {ours / hf:5.2f}",
            flush=True,
        )
    if ratios:
        geo = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
        if "grpo" in ratios:
            print(f"ratio vs HF generate (grpo): {ratios['grpo']:.2f}")
        print(f"geometric mean over {len(ratios)} scenarios: {geo:.2f}")


if __name__ == "__main__":
    main()
