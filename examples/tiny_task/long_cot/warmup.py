"""Supervised warm-up on short problems only, so that the policy knows the scratchpad's format
and the digit step, while the long problems (and much of the short ones, sampled at
temperature 1) are left for RL.

Teacher forcing on ``prompt + response + EOS``, cross-entropy on the response and EOS, AdamW;
every step draws a fresh batch of 1..``max_digits``-digit problems from a generator seeded by
``params.seed``, and the loop runs on one thread, so the result is reproducible bit for bit on
one machine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.long_cot.params import LongCotWarmupParams
from examples.tiny_task.long_cot.problems import LongCotProblem, draw_problem
from examples.tiny_task.warmup import IGNORE_INDEX, padded_batch, single_thread


def supervised_batch(
    tokenizer: PreTrainedTokenizerBase, problems: Sequence[LongCotProblem]
) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``/``attention_mask``/``labels``; labels mask out the prompt."""
    rows = []
    for problem in problems:
        prompt = tokenizer(problem.prompt, add_special_tokens=False)["input_ids"]
        answer = tokenizer(problem.answer, add_special_tokens=False)["input_ids"]
        answer = answer + [tokenizer.eos_token_id]
        rows.append((prompt + answer, [IGNORE_INDEX] * len(prompt) + answer))
    return padded_batch(rows, tokenizer.pad_token_id)


def warm_up(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[LongCotProblem],
    params: LongCotWarmupParams,
) -> list[float]:
    """Trains ``model`` in place on freshly drawn short problems (``problems``, the RL split,
    is not used); returns the loss of every step."""
    del problems
    rng = random.Random(f"warmup:{params.seed}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.learning_rate, weight_decay=0.0)
    losses: list[float] = []
    model.train()
    with torch.random.fork_rng(devices=[]), single_thread():
        torch.manual_seed(params.seed)
        for _ in range(params.steps):
            chosen = [
                draw_problem(rng, rng.randint(1, params.max_digits), i)
                for i in range(params.batch_size)
            ]
            batch = supervised_batch(tokenizer, chosen)
            logits = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(),
                batch["labels"][:, 1:].flatten(),
                ignore_index=IGNORE_INDEX,
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    model.eval()
    return losses
