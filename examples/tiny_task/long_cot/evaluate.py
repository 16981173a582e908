"""How the warmed-up policy does at the start (recorded in ``build.json``): samples of the
test problems at temperature 1, their reward, and their lengths in tokens."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.coding.evaluate import sample_with_cache
from examples.tiny_task.long_cot.problems import LongCotProblem
from examples.tiny_task.long_cot.reward import compute_score, extract_answer

EVALUATED = 128  # the first problems of the split that are sampled
SHOWN_SAMPLES = 2


def p99(values: Sequence[float]) -> float:
    """The 99th percentile of ``values``, linear between closest ranks."""
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def evaluate_long_cot_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[LongCotProblem],
    *,
    samples_per_problem: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    seed: int = 0,
) -> dict[str, Any]:
    """``exact_rate`` (the reward's mean), ``format_rate``, ``short_exact_rate`` (sizes up to
    4), response-length ``length_median``/``length_p99``/``length_max`` (tokens, EOS counted)
    and a few ``samples``, over the first :data:`EVALUATED` problems."""
    was_training = model.training
    model.eval()
    chosen = [p for p in problems[:EVALUATED] for _ in range(samples_per_problem)]
    samples = sample_with_cache(
        model,
        tokenizer,
        [p.prompt for p in chosen],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )
    model.train(was_training)
    rewards = [
        compute_score("long_cot", text, p.ground_truth)
        for (text, _), p in zip(samples, chosen, strict=True)
    ]
    lengths = [
        len(tokenizer(t, add_special_tokens=False)["input_ids"]) + int(stopped)
        for t, stopped in samples
    ]
    short = [r for r, p in zip(rewards, chosen, strict=True) if p.size <= 4]
    return {
        "exact_rate": sum(rewards) / len(rewards),
        "short_exact_rate": sum(short) / max(len(short), 1),
        "format_rate": sum(extract_answer(t) is not None for t, _ in samples) / len(samples),
        "length_median": statistics.median(lengths),
        "length_p99": p99(lengths),
        "length_max": max(lengths),
        "samples": [
            {"prompt": chosen[i].prompt, "response": samples[i][0]}
            for i in range(min(SHOWN_SAMPLES, len(chosen)))
        ],
    }
