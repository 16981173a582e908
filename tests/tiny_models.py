"""Small random causal LMs for engine and server tests (built from a config, no download)."""

from __future__ import annotations

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
