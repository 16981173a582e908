"""Short supervised warm-up that teaches the output format but only a hint of the answers.

Teacher forcing on ``prompt + answer + EOS`` with the loss on the answer and EOS tokens only.
The answer-digit targets are smoothed towards the uniform distribution over the ten digits:
the target is ``(1 - digit_smoothing) * one_hot(correct) + digit_smoothing * uniform(digits)``,
while EOS keeps a hard target. A policy trained this way always answers with digits then EOS
(the format), but at temperature 1.0 it samples the right answer only ~15-20% of the time,
which leaves RL a clear signal to climb.

Training is full batch over all problems in index order, with AdamW; the model's random state
is seeded and the loop runs on one thread, so the result is bit-for-bit reproducible.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.params import WarmupParams
from examples.tiny_task.problems import Problem

IGNORE_INDEX = -100


@contextmanager
def single_thread() -> Iterator[None]:
    """Runs torch on one thread inside the block (same float results on any machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def supervised_batch(
    tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem]
) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``/``attention_mask``/``labels``; labels mask out the prompt."""
    rows: list[tuple[list[int], list[int]]] = []
    for problem in problems:
        prompt = tokenizer(problem.prompt, add_special_tokens=False)["input_ids"]
        answer = tokenizer(problem.answer, add_special_tokens=False)["input_ids"]
        ids = prompt + answer + [tokenizer.eos_token_id]
        labels = [IGNORE_INDEX] * len(prompt) + answer + [tokenizer.eos_token_id]
        rows.append((ids, labels))
    return padded_batch(rows, tokenizer.pad_token_id)


def padded_batch(rows: Sequence[tuple[list[int], list[int]]], pad: int) -> dict[str, torch.Tensor]:
    """(ids, labels) rows right-padded into ``input_ids``/``attention_mask``/``labels``."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = [ids + [pad] * (width - len(ids)) for ids, _ in rows]
    labels = [lab + [IGNORE_INDEX] * (width - len(lab)) for _, lab in rows]
    mask = [[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows]
    return {
        "input_ids": torch.tensor(input_ids),
        "attention_mask": torch.tensor(mask),
        "labels": torch.tensor(labels),
    }


def smoothed_digit_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    digit_ids: torch.Tensor,
    smoothing: float | torch.Tensor,
) -> torch.Tensor:
    """Mean next-token loss; digit targets smoothed over ``digit_ids``, others one-hot.

    ``logits[:, t]`` predicts ``labels[:, t + 1]`` (the usual causal shift is done here).
    ``smoothing`` is one value, or one per label position (shaped like ``labels``).
    """
    if isinstance(smoothing, torch.Tensor):
        smoothing = smoothing[:, 1:]
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = labels[:, 1:]
    valid = targets != IGNORE_INDEX
    hard = -logprobs.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    uniform = -logprobs[..., digit_ids].mean(dim=-1)
    is_digit = torch.isin(targets, digit_ids)
    per_token = torch.where(is_digit, (1.0 - smoothing) * hard + smoothing * uniform, hard)
    return (per_token * valid).sum() / valid.sum()


def digit_token_ids(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """The ids of the ten digit tokens ``0`` ... ``9``."""
    return torch.tensor([tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)])


def warm_up(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    params: WarmupParams,
) -> list[float]:
    """Trains ``model`` in place on ``problems``; returns the loss of every step."""
    return train_on_batch(model, supervised_batch(tokenizer, problems), tokenizer, params)


def train_on_batch(
    model: PreTrainedModel,
    batch: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
    params: Any,
) -> list[float]:
    """Full-batch AdamW steps on ``batch`` with the smoothed digit loss (``params``: steps,
    learning_rate, weight_decay, seed, and digit_smoothing unless ``batch`` holds a
    per-position ``smoothing``); returns the loss of every step."""
    digits = digit_token_ids(tokenizer)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay
    )
    losses: list[float] = []
    model.train()
    with torch.random.fork_rng(devices=[]), single_thread():
        torch.manual_seed(params.seed)
        for _ in range(params.steps):
            logits = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits
            smoothing = batch["smoothing"] if "smoothing" in batch else params.digit_smoothing
            loss = smoothed_digit_loss(logits, batch["labels"], digits, smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    model.eval()
    return losses
