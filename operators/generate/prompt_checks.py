"""Prompts that do not fit the model's context window, found before generating.

Whether a prompt fits is known only after tokenizing, so the generate operator checks its
token ids: a prompt of P tokens sampled for up to N new tokens needs P + N positions, and a
model has `max_position_embeddings` of them (past that, RoPE models extrapolate silently and
learned positions fail). `model_context` reads the window from the model's config.json.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rldag import RowError

# config.json keys that hold the context window, by model family (first found wins).
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def model_context(model_path: str | Path) -> int | None:
    """The model's context window from `model_path`/config.json (None if it states none)."""
    path = Path(model_path) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    configs = [config, config.get("text_config") or {}]  # multimodal configs nest it
    for key in CONTEXT_KEYS:
        for part in configs:
            if isinstance(part.get(key), int) and part[key] > 0:
                return part[key]
    return None


def check_prompt_lengths(
    prompt_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
    context: int | None,
    node: str,
    iteration: int,
    prompt_id_column: Sequence[int],
) -> None:
    """Raise RowError naming the first prompt (by `prompt_id`) whose tokens plus
    `max_new_tokens` do not fit `context` positions, and how many such prompts the batch has.
    `context` None checks nothing."""
    if context is None:
        return
    budget = context - max_new_tokens
    too_long = [i for i, ids in enumerate(prompt_ids) if len(ids) > budget]
    if not too_long:
        return
    first = too_long[0]
    raise RowError(
        f"node '{node}' iteration {iteration}, prompt_id {prompt_id_column[first]}: the prompt "
        f"has {len(prompt_ids[first])} tokens, and with max_new_tokens {max_new_tokens} it "
        f"needs {len(prompt_ids[first]) + max_new_tokens} positions; the model's context is "
        f"{context} ({len(too_long)} of {len(prompt_ids)} prompts of this batch are too long): "
        f"shorten or filter the prompts, or lower nodes.{node}.params.max_new_tokens"
    )
