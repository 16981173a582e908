"""The generic decoder: the Hugging Face model's own forward over the engine's slot KV cache.

Works for any causal LM whose ``DynamicCache`` layers hold keys/values as
``(batch, kv_heads, length, head_dim)``. Each decode step hands the model a cache that views the
slots' past positions, with a 2-D attention mask that hides positions a slot has not reached;
the model appends the new token's key/value, which is then written back to its slot. Slower than
``LlamaFamilyDecoder`` (HF builds masks and concatenates the cache every call) but exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from operators.rollout.decoding import Prefill
from operators.rollout.kv_cache import SlotKVCache

__all__ = ["HFDecoder"]


def _rows(cache: DynamicCache) -> list[torch.Tensor]:
    """A filled ``DynamicCache`` as ``Prefill.kv``: per layer ``(batch, length, 2, kv_heads,
    head_dim)``."""
    return [
        torch.stack([layer.keys, layer.values], dim=2).transpose(1, 3) for layer in cache.layers
    ]


class HFDecoder:
    """Prefill and decode through ``model(...)`` with ``past_key_values``."""

    def __init__(self, model: torch.nn.Module) -> None:
        config = model.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.model = model
        self.layers = text.num_hidden_layers
        heads = text.num_attention_heads
        self.kv_heads = getattr(text, "num_key_value_heads", None) or heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device

    def _cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    def prefill(self, prompts: list[list[int]]) -> Prefill:
        """Right-padded prompts through the model; per-prompt logits at its last token."""
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
            mask[row, : len(prompt)] = 1
        cache = self._cache()
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            past_key_values=cache,
            use_cache=True,
        )
        last = torch.tensor(lengths, device=self.device) - 1
        logits = out.logits[torch.arange(len(prompts), device=self.device), last].float()
        return Prefill(_rows(cache), logits, lengths)

    def extend(self, pasts: list[list[torch.Tensor]], suffixes: list[list[int]]) -> Prefill:
        """Same contract as ``LlamaFamilyDecoder.extend``, one row at a time (each row's
        cached prefix is its own ``DynamicCache``)."""
        rows = []
        for past, suffix in zip(pasts, suffixes, strict=True):
            start = past[0].shape[0]
            cache = self._cache()
            for index, layer in enumerate(cache.layers):
                keys, values = (past[index][:, k].transpose(0, 1).unsqueeze(0) for k in (0, 1))
                layer.lazy_initialization(keys, values)
                layer.keys, layer.values = keys, values
            out = self.model(
                input_ids=torch.tensor([suffix], device=self.device),
                position_ids=torch.arange(start, start + len(suffix), device=self.device)[None],
                past_key_values=cache,
                use_cache=True,
            )
            rows.append((_rows(cache), out.logits[0, -1].float()))
        lengths = [kv[0].shape[1] for kv, _ in rows]
        width = max(lengths)
        kv = [
            torch.cat(
                [F.pad(r[layer], (0, 0, 0, 0, 0, 0, 0, width - r[layer].shape[1])) for r, _ in rows]
            )
            for layer in range(self.layers)
        ]
        return Prefill(kv, torch.stack([logits for _, logits in rows]), lengths)

    def decode(
        self,
        cache: SlotKVCache,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        unique: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Same contract as ``LlamaFamilyDecoder.decode`` (every row is computed: ``unique``
        is only a hint)."""
        rows = tokens.shape[0]
        span = int(positions.max())  # past positions the widest slot has
        hf_cache = self._cache()
        for index in range(self.layers):
            layer = hf_cache.layers[index]
            past_k, past_v = cache.slot_major(index, rows, span)
            layer.lazy_initialization(past_k, past_v)
            layer.keys, layer.values = past_k, past_v
        past = torch.arange(span, device=self.device).unsqueeze(0) < positions.unsqueeze(-1)
        mask = torch.cat([past, past.new_ones((rows, 1))], dim=-1).long()
        out = self.model(
            input_ids=tokens.unsqueeze(-1),
            attention_mask=mask,
            position_ids=positions.unsqueeze(-1),
            past_key_values=hf_cache,
            use_cache=True,
        )
        for index in range(self.layers):
            layer = hf_cache.layers[index]
            new = torch.stack([layer.keys[:, :, -1], layer.values[:, :, -1]], dim=1)
            cache.store(index, positions, new)
        return out.logits[:, -1].float()
