"""Short supervised warm-up on the reference solutions, so that samples look like code.

Teacher forcing on ``prompt + response + EOS`` with plain cross-entropy on the response and EOS
tokens only, AdamW on mini-batches of a few problems (epochs of a seeded permutation). It is
kept short (300 steps of 4 problems, ~10 s on one thread): the policy learns the shape of an
answer (a fenced ``python`` block defining a function, then EOS) but at temperature 1.0 it still
garbles most names and bodies (about 1 sample in 10 is the reference solution), which leaves RL
something to learn. Seeded and single-threaded, so the result is bit-for-bit reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.coding.params import CodeWarmupParams
from examples.tiny_task.coding.problems import CodeProblem
from examples.tiny_task.warmup import IGNORE_INDEX, single_thread


def supervised_batch(
    tokenizer: PreTrainedTokenizerBase, problems: Sequence[CodeProblem]
) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``/``attention_mask``/``labels``; labels mask out the prompt."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows: list[tuple[list[int], list[int]]] = []
    for problem in problems:
        prompt = tokenizer(problem.prompt, add_special_tokens=False)["input_ids"]
        answer = tokenizer(problem.answer, add_special_tokens=False)["input_ids"] + [eos]
        rows.append((prompt + answer, [IGNORE_INDEX] * len(prompt) + answer))
    width = max(len(ids) for ids, _ in rows)
    return {
        "input_ids": torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows]),
        "attention_mask": torch.tensor(
            [[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows]
        ),
        "labels": torch.tensor([lab + [IGNORE_INDEX] * (width - len(lab)) for _, lab in rows]),
    }


def warm_up(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[CodeProblem],
    params: CodeWarmupParams,
) -> list[float]:
    """Trains ``model`` in place on the reference solutions; returns the loss of every step."""
    batch = supervised_batch(tokenizer, problems)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay
    )
    losses: list[float] = []
    model.train()
    with torch.random.fork_rng(devices=[]), single_thread():
        torch.manual_seed(params.seed)
        for rows in _mini_batches(len(problems), params.batch_size, params.steps):
            logits = model(
                input_ids=batch["input_ids"][rows], attention_mask=batch["attention_mask"][rows]
            ).logits
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(),
                batch["labels"][rows, 1:].flatten(),
                ignore_index=IGNORE_INDEX,
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    model.eval()
    return losses


def _mini_batches(count: int, size: int, steps: int) -> list[torch.Tensor]:
    """Row indices of ``steps`` mini-batches: epochs of a random permutation (global RNG)."""
    batches: list[torch.Tensor] = []
    while len(batches) < steps:
        order = torch.randperm(count)
        batches += [order[i : i + size] for i in range(0, count - size + 1, size)]
    return batches[:steps]
