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
  and 256: the worst case for us, since nothing finishes early;
* ``long_cot``: long, variable chains of thought (issue 30) on an untrained Llama of ~2.7M
  parameters (hidden 256, 4 layers, vocabulary 100, 512 positions), 32 prompts of 16-24
  tokens, ``n = 8``, up to 256 new tokens.
  Each sequence's length is drawn beforehand from a log-normal (median 30, sigma 0.8: p99 ~190,
  clipped to 256) and forced identically on both sides: eos is suppressed (ours:
  ``ignore_eos``; HF: ``min_new_tokens``) and the sequence ends at its drawn length (ours: its
  own ``SamplingParams.max_new_tokens``, so each sample is submitted as a group of one; HF: a
  ``StoppingCriteria`` that ends each row at its length; HF keeps ended rows in its batch, as it
  does after an eos). Both sides generate exactly the drawn tokens.

``--profile`` adds where our time per generated token goes, by part, per scenario.

The first lines name the machine and the load average; the last lines are the headline ratios
(``long_cot: engine vs HF: X`` and ``fixed-256: engine vs HF: X``).

    .venv/bin/python bench/engine_vs_hf.py [--repeats 3] [--threads 1] [--only grpo] [--profile]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from machine import describe, load_line

from operators.rollout import SamplingParams, TorchEngine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples.tiny_task: the demo builders are not installed
HEADLINE = ("long_cot", "fixed-256")


@dataclass
class Scenario:
    """One workload: which model, which prompts, group size, length, eos on or off."""

    name: str
    prompts: list[list[int]]
    n: int
    max_new_tokens: int
    ignore_eos: bool = False
    random_init: bool = False
    build: Callable[[], torch.nn.Module] | None = None  # its own model instead of the tiny one
    lengths: list[int] | None = None  # per sequence (prompt-major), forced on both sides


class _EndAt:
    """HF stopping criterion: row ``r`` is done once it has ``lengths[r]`` new tokens."""

    def __init__(self, width: int, lengths: list[int]) -> None:
        self.width, self.lengths = width, torch.tensor(lengths)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_) -> torch.Tensor:
        return (input_ids.shape[1] - self.width) >= self.lengths


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
    if scenario.lengths is not None:
        from transformers import StoppingCriteriaList

        extra["stopping_criteria"] = StoppingCriteriaList([_EndAt(width, scenario.lengths)])
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
    if scenario.lengths is not None:
        assert len(rows) == len(scenario.lengths) and len(rows[0]) == max(scenario.lengths)
        return sum(scenario.lengths)
    return sum(len(r) for r in rows) if scenario.ignore_eos else useful_tokens(rows, eos)


def run_forced(engine: TorchEngine, scenario: Scenario, seed: int) -> int:
    """Each sequence a group of one, ending at its drawn length (eos ignored)."""
    batcher, tickets = engine.batcher, set()
    for i, prompt in enumerate(scenario.prompts):
        for j in range(scenario.n):
            length = scenario.lengths[i * scenario.n + j]
            params = SamplingParams(
                n=1, temperature=1.0, max_new_tokens=length, ignore_eos=True, seed=seed
            )
            index = i * scenario.n + j
            tickets.add(batcher.submit(prompt, params, seed=seed, index=index, stop_ids=[]))
    tokens = 0
    while tickets:
        for ticket, completions in batcher.step():
            tickets.discard(ticket)
            tokens += sum(len(c.token_ids) for c in completions)
    assert tokens == sum(scenario.lengths)
    return tokens


def run_ours(engine: TorchEngine, scenario: Scenario, seed: int) -> int:
    if scenario.lengths is not None:
        return run_forced(engine, scenario, seed)
    params = SamplingParams(
        n=scenario.n,
        temperature=1.0,
        max_new_tokens=scenario.max_new_tokens,
        ignore_eos=scenario.ignore_eos,
        seed=seed,
    )
    groups = engine.generate(scenario.prompts, params)
    return sum(len(c.token_ids) for group in groups for c in group)


def load_model(scenario: Scenario, model_dir: Path) -> torch.nn.Module:
    from operators.model.hf import load_causal_lm

    if scenario.build is not None:
        return scenario.build()
    model = load_causal_lm(str(model_dir)).eval()
    if scenario.random_init:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            model = type(model)(model.config).eval()
        model.generation_config.eos_token_id = model.config.eos_token_id
    return model


def measure(scenario: Scenario, model_dir: Path, repeats: int) -> tuple[float, float]:
    """Best tokens/s of (ours, HF) over ``repeats`` alternating runs each, after a warm-up."""
    model = load_model(scenario, model_dir)
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


def long_cot_model() -> torch.nn.Module:
    """An untrained Llama of a few million parameters (fixed seed: the same on every run)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=100, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
        bos_token_id=2, eos_token_id=1, pad_token_id=0, tie_word_embeddings=True,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(30)
        model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def long_cot(prompts: int = 32, n: int = 8, max_new_tokens: int = 256) -> Scenario:
    """Prompts of 16-24 random tokens; per-sequence lengths log-normal, median 30, sigma 0.8."""
    gen = torch.Generator().manual_seed(30)
    rows = [
        torch.randint(3, 100, (int(torch.randint(16, 25, (1,), generator=gen)),), generator=gen)
        for _ in range(prompts)
    ]
    normal = torch.randn(prompts * n, generator=gen, dtype=torch.float64)
    lengths = (30.0 * torch.exp(0.8 * normal)).round().clamp(1, max_new_tokens)
    return Scenario(
        "long_cot", [r.tolist() for r in rows], n=n, max_new_tokens=max_new_tokens,
        ignore_eos=True, build=long_cot_model, lengths=[int(x) for x in lengths],
    )  # fmt: skip


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
        long_cot(),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    parser.add_argument(
        "--profile", action="store_true", help="also print where our time per token goes"
    )
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from examples.tiny_task import build_tiny_task

    hf_logging.set_verbosity_error()
    task = build_tiny_task(ROOT / ".cache" / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(task / "model")
    print(f"torch threads: {args.threads}; best of {args.repeats} alternating runs per side")
    ratios, profiles = {}, {}
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
        if scenario.lengths is not None:
            lengths = torch.tensor(scenario.lengths, dtype=torch.float64)
            q = torch.quantile(lengths, torch.tensor([0.5, 0.99], dtype=torch.float64)).tolist()
            print(
                f"    lengths: median {q[0]:.0f}, p99 {q[1]:.0f}, max {lengths.max():.0f}, "
                f"mean {lengths.mean():.1f}, {int(lengths.sum())} tokens"
            )
        if args.profile:
            from engine_profile import breakdown

            parts = breakdown(scenario, task / "model", args.repeats)
            profiles[scenario.name] = (parts, 1e6 / hf)
    if profiles:
        from engine_profile import print_breakdown

        print(f"where our time per token goes (fastest of {args.repeats} timed runs each):")
        for name, (modes, hf_us) in profiles.items():
            print_breakdown(name, modes, hf_us)
    print(load_line("end"))
    if ratios:
        geo = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
        if "grpo" in ratios:
            print(f"ratio vs HF generate (grpo): {ratios['grpo']:.2f}")
        print(f"geometric mean over {len(ratios)} scenarios: {geo:.2f}")
        for name in HEADLINE:
            if name in ratios:
                print(f"{name}: engine vs HF: {ratios[name]:.2f}")


if __name__ == "__main__":
    main()
