"""How code-like the warmed-up policy's samples are (recorded in ``build.json``).

Samples are drawn by plain ancestral sampling with a KV cache and a seeded generator (kept here,
so the build does not depend on the rollout engine). Nothing is executed here (generated code
only ever runs in the sandbox): a sample is *well formed* when it is one fenced ``python`` block
defining a function and then EOS, *parses* when its program (the last fenced block, as the
sandbox extracts it) is valid Python, and is *exact* when that program is the reference
solution.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.coding.problems import CodeProblem
from operators.sandbox.extract import extract_program

WELL_FORMED = re.compile(r"```python\ndef \w+\([^\n]*\):\n(?:[^\n]*\n)+```")
SHOWN_SAMPLES = 3


def parses(program: str) -> bool:
    """Whether ``program`` is syntactically valid Python (it is parsed, never run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # e.g. "invalid decimal literal"
        try:
            ast.parse(program)
        except (SyntaxError, ValueError):
            return False
    return True


@torch.no_grad()
def sample_with_cache(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
) -> list[tuple[str, bool]]:
    """One sample per prompt: (text without special tokens, whether it ended with EOS)."""
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left")
    mask = enc["attention_mask"]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    cache = DynamicCache()
    inputs = enc["input_ids"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    rows: list[torch.Tensor] = []
    for _ in range(max_new_tokens):
        out = model(
            input_ids=inputs,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        probs = torch.softmax(out.logits[:, -1].float() / temperature, dim=-1)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token = torch.where(done, torch.full_like(token, pad), token)
        rows.append(token)
        done |= token == eos
        if bool(done.all()):
            break
        inputs, positions = token[:, None], positions[:, -1:] + 1
        mask = torch.cat([mask, torch.ones_like(token)[:, None]], dim=-1)
    samples = []
    for row in torch.stack(rows, dim=-1).tolist():
        stopped = eos in row
        row = row[: row.index(eos)] if stopped else row
        samples.append((tokenizer.decode(row, skip_special_tokens=True), stopped))
    return samples


def evaluate_code_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[CodeProblem],
    *,
    samples_per_problem: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """``format_rate``, ``syntax_rate``, ``exact_rate`` and a few ``samples`` (prompt, response).

    Sampling is seeded by ``seed`` alone, so the result is reproducible and the global RNG is
    untouched.
    """
    was_training = model.training
    model.eval()
    chosen = [p for p in problems for _ in range(samples_per_problem)]
    samples = sample_with_cache(
        model,
        tokenizer,
        [p.prompt for p in chosen],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )
    model.train(was_training)
    programs = [extract_program(text) for text, _ in samples]
    formats = [stopped and WELL_FORMED.fullmatch(text) is not None for text, stopped in samples]
    exact = [program == p.program for program, p in zip(programs, chosen, strict=True)]
    count = len(samples)
    shown = range(0, min(count, SHOWN_SAMPLES * samples_per_problem), samples_per_problem)
    return {
        "format_rate": sum(formats) / count,
        "syntax_rate": sum(parses(p) for p in programs) / count,
        "exact_rate": sum(exact) / count,
        "samples": [{"prompt": chosen[i].prompt, "response": samples[i][0]} for i in shown],
    }
