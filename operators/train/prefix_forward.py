"""Response logits of a PackedBatch through a Hugging Face causal LM's own forward.

Two equivalent routes (same logits up to float rounding):
- plain: each row's prompt + response as one right-padded sequence;
- shared prefix: each distinct prompt of the micro-batch (a GRPO group's) runs once with
  `use_cache=True`; every row then forwards its response against its prompt's keys/values
  (indexed out of that cache, so gradients flow back into the prompt forward), with
  explicit positions prompt_len + t and a [prompt padding ; response] attention mask.
Both call the model itself, so FSDP2's hooks on it and its decoder layers run as usual.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from operators.train.batch import PackedBatch


def supports_shared_prefix(model: torch.nn.Module) -> bool:
    """Whether the model's attention makes the shared-prefix route exact: full causal
    attention in every layer (a sliding window counts cache slots, padding included)."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return False
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ())


def _sequences(mb: PackedBatch, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt + response of each row as right-padded input ids and attention mask."""
    lens = mb.prompt_lens + mb.response_lens
    width, prompt, response = int(lens.max()), mb.prompt_ids.shape[1], mb.response_ids.shape[1]
    ids = torch.full((mb.rows, prompt + response), pad_id, dtype=torch.long, device=lens.device)
    ids[:, :prompt] = mb.prompt_ids
    steps = torch.arange(response, device=lens.device)
    ids.scatter_(1, mb.prompt_lens[:, None] + steps, mb.response_ids)
    ids = ids[:, :width]
    return ids, (torch.arange(width, device=lens.device) < lens[:, None]).long()


def _plain(model: torch.nn.Module, mb: PackedBatch, pad_id: int) -> torch.Tensor:
    ids, attention = _sequences(mb, pad_id)
    steps = torch.arange(mb.response_ids.shape[1], device=ids.device)
    keep = (mb.prompt_lens[:, None] - 1 + steps).clamp(max=ids.shape[1] - 1)
    out = model(input_ids=ids, attention_mask=attention, use_cache=False, logits_to_keep=keep)
    return out.logits


def _shared(model: torch.nn.Module, mb: PackedBatch, pad_id: int) -> torch.Tensor:
    device = mb.group.device
    rows = torch.arange(mb.rows, device=device)
    first = torch.full((mb.groups,), mb.rows, dtype=torch.long, device=device)
    first = first.scatter_reduce(0, mb.group, rows, "amin")  # a row of each distinct prompt
    prompt_lens = mb.prompt_lens[first]
    prompt_mask = torch.arange(mb.prompt_ids.shape[1], device=device) < prompt_lens[:, None]
    prompt = model(
        input_ids=mb.prompt_ids[first],
        attention_mask=prompt_mask.long(),
        use_cache=True,
        logits_to_keep=(prompt_lens - 1)[:, None],
    )
    cache = DynamicCache(
        ddp_cache_data=[
            (layer.keys[mb.group], layer.values[mb.group])
            for layer in prompt.past_key_values.layers
        ]
    )
    width = max(mb.response_ids.shape[1] - 1, 1)  # the last response token predicts nothing
    steps = torch.arange(width, device=device)
    response_ids = torch.nn.functional.pad(mb.response_ids, (0, 1), value=pad_id)[:, :width]
    completion = model(
        input_ids=response_ids,
        attention_mask=torch.cat(
            [prompt_mask[mb.group], steps < mb.response_lens[:, None]], dim=1
        ).long(),
        position_ids=mb.prompt_lens[:, None] + steps,
        past_key_values=cache,
        use_cache=True,
    )
    logits = torch.cat([prompt.logits[mb.group], completion.logits], dim=1)
    return logits[:, : mb.response_ids.shape[1]]


def response_logits(
    model: torch.nn.Module, mb: PackedBatch, pad_id: int, shared: bool = False
) -> torch.Tensor:
    """[B, R, vocab] logits: position t predicts response token t of each row. `shared`
    runs each distinct prompt once (see the module docstring)."""
    return (_shared if shared else _plain)(model, mb, pad_id)
