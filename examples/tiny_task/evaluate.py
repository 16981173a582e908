"""Sampled exact-match accuracy and format rate of a policy on the arithmetic problems.

Sampling is plain ancestral sampling at a given temperature (no top-k / top-p), which is what an
RL rollout at ``temperature=1.0`` sees; responses are scored by the task's reward function.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.problems import DATA_SOURCE, Problem
from operators.score.rewards.arithmetic import compute_score


@torch.no_grad()
def sample_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[str]:
    """One sampled continuation per prompt, decoded up to and including the first EOS."""
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    done = torch.zeros(len(prompts), dtype=torch.bool)
    new_tokens: list[torch.Tensor] = []
    for _ in range(max_new_tokens):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token = torch.where(done, torch.full_like(token, pad), token)
        new_tokens.append(token)
        done |= token == eos
        ids = torch.cat([ids, token[:, None]], dim=-1)
        mask = torch.cat([mask, torch.ones_like(token)[:, None]], dim=-1)
        if bool(done.all()):
            break
    responses = []
    for row in torch.stack(new_tokens, dim=-1).tolist():
        row = row[: row.index(eos) + 1] if eos in row else row
        responses.append(tokenizer.decode(row, skip_special_tokens=False))
    return responses


def evaluate_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    *,
    samples_per_problem: int = 16,
    temperature: float = 1.0,
    max_new_tokens: int = 4,
    seed: int = 0,
) -> dict[str, float]:
    """Sampled ``accuracy`` (mean reward) and ``format_rate`` (digits then EOS) over problems.

    Uses its own seeded generator, so the result is reproducible and the global RNG untouched.
    """
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    prompts = [p.prompt for p in problems for _ in range(samples_per_problem)]
    answers = [p.answer for p in problems for _ in range(samples_per_problem)]
    responses = sample_responses(
        model,
        tokenizer,
        prompts,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        generator=generator,
    )
    model.train(was_training)
    well_formed = re.compile(r"[0-9]+" + re.escape(tokenizer.eos_token))
    scores = [compute_score(DATA_SOURCE, r, a) for r, a in zip(responses, answers, strict=True)]
    formats = [well_formed.fullmatch(r) is not None for r in responses]
    return {
        "accuracy": sum(scores) / len(scores),
        "format_rate": sum(formats) / len(formats),
    }
