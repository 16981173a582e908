"""Small random causal LMs for engine and server tests (built from a config, no download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

VOCAB = 64


def random_causal_lm(seed: int = 0, config_cls: type = transformers.Qwen2Config) -> torch.nn.Module:
    """A 2-layer, 64-wide model; a large init range gives varied (non-degenerate) outputs."""
    config = config_cls(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        initializer_range=0.2,
    )
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def save_with_random_lm(
    path: Path,
    tokenizer: Any,
    config_cls: type = transformers.Qwen2Config,
    seed: int = 0,
    **kw: Any,
) -> Path:
    """`tokenizer` saved in `path` beside a random 2-layer, 32-wide causal LM sized to its
    vocabulary, with its eos and pad ids (`kw` overrides config fields): a user's own model
    directory, as `save_pretrained` writes it."""
    fields = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 512,
        **kw,
    }
    config = config_cls(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **fields,
    )
    torch.manual_seed(seed)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
