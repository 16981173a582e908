"""The tiny causal LM: a 3-layer Qwen2 built from a config with a seeded, fp32 init."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase, Qwen2Config

from examples.tiny_task.params import ModelParams


def model_config(params: ModelParams, tokenizer: PreTrainedTokenizerBase) -> Qwen2Config:
    """The Qwen2 config for ``params`` with ``tokenizer``'s vocabulary and special ids."""
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=params.hidden_size,
        intermediate_size=params.intermediate_size,
        num_hidden_layers=params.num_hidden_layers,
        num_attention_heads=params.num_attention_heads,
        num_key_value_heads=params.num_key_value_heads,
        max_position_embeddings=params.max_position_embeddings,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def build_model(params: ModelParams, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A freshly initialised fp32 model; the same ``params`` always give the same weights.

    The global torch RNG is forked, so building does not disturb the caller's random state.
    """
    config = model_config(params, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.init_seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    generation = model.generation_config
    generation.bos_token_id = tokenizer.bos_token_id
    generation.eos_token_id = tokenizer.eos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    return model.float()
