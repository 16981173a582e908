"""The torch rollout engine: Hugging Face causal LMs, sampled with continuous batching.

``TorchEngine.generate`` submits every prompt's group of ``n`` samples to a
``ContinuousBatcher`` (preallocated slot KV cache, one prefill per prompt, finished slots refilled
at once) and steps it until all groups are done. Llama-family models decode through
``LlamaFamilyDecoder`` (the model's own modules, no HF per-call overhead); others through the
model's forward (``HFDecoder``). The batcher, and so the cache, lives as long as the engine.
Sampling is per sequence and deterministic under ``SamplingParams.seed``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from transformers import AutoTokenizer

from operators.model.hf import load_causal_lm
from operators.model.lora_weights import is_adapter, merge_into, pairs
from operators.rollout.batcher import ContinuousBatcher
from operators.rollout.decoder import make_decoder
from operators.rollout.rng import random_seed
from operators.rollout.sampling import Completion, SamplingParams

__all__ = ["TorchEngine"]

_ENGINE_KWARGS = ("max_batch_size", "decoder")
_STATE_PREFIXES = ("module.", "_orig_mod.")


def _as_id_list(value: Any) -> list[int]:
    """Normalise an eos id field (None, int or list of ints) to a list."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


class TorchEngine:
    """Generate completions with a Hugging Face causal LM, batched, with a KV cache."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any = None,
        *,
        device: str = "cpu",
        max_batch_size: int = 256,
        decoder: str = "auto",
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.lora_base: dict[str, torch.Tensor] = {}  # base weights of LoRA-adapted layers
        self.batcher = ContinuousBatcher(
            make_decoder(self.model, decoder), max_batch_size=max_batch_size, tokenizer=tokenizer
        )

    @classmethod
    def from_pretrained(
        cls, path: str, *, device: str = "cpu", dtype: torch.dtype = torch.float32, **kw: Any
    ) -> TorchEngine:
        """Load model (and tokenizer, if ``path`` has one) from a local dir or hub id.

        ``max_batch_size`` and ``decoder`` (auto | fast | hf) in ``kw`` go to the engine; other
        keywords go to ``AutoModelForCausalLM.from_pretrained`` (e.g. ``attn_implementation``).
        """
        engine_kw = {k: kw.pop(k) for k in _ENGINE_KWARGS if k in kw}
        model = load_causal_lm(path, dtype=dtype, **kw)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError):  # a model without one: token ids in, token ids out
            tokenizer = None
        return cls(model, tokenizer, device=device, **engine_kw)

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end a sequence: the generation config's and the tokenizer's eos."""
        ids = _as_id_list(
            getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        )
        ids += _as_id_list(getattr(self.tokenizer, "eos_token_id", None))
        return sorted(set(ids))

    @property
    def pad_token_id(self) -> int:
        """Filler id for left padding (masked out, so any valid id works)."""
        for source in (self.tokenizer, getattr(self.model, "generation_config", None)):
            pad = getattr(source, "pad_token_id", None)
            if isinstance(pad, int):
                return pad
        return 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's state dict (tensors share storage with the live weights)."""
        return self.model.state_dict()

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy weights in place (any device/dtype); a subset of the keys updates only those.

        Keys may carry a ``module.`` (DDP) or ``_orig_mod.`` (torch.compile) prefix. A LoRA
        payload (operators.model.lora_weights) is merged: each adapted layer serves its base
        weight (kept from the first adapter load) plus the adapter's update.
        """
        own = self.model.state_dict()
        self.batcher.kept.clear()  # caches kept for later turns hold the old weights' values
        if is_adapter(state_dict):
            for key, a, b in pairs(state_dict):
                if key not in own:
                    raise KeyError(f"LoRA adapter for a layer the model lacks: {key!r}")
                if key not in self.lora_base:
                    self.lora_base[key] = own[key].clone()
                base = self.lora_base[key]
                merge_into(own[key], base, a, b)
            return
        for name, tensor in state_dict.items():
            key = name
            while key not in own and key.startswith(_STATE_PREFIXES):
                key = key.split(".", 1)[1]
            if key not in own:
                raise KeyError(f"unexpected key in state_dict: {name!r}")
            if own[key].shape != tensor.shape:
                raise ValueError(
                    f"shape mismatch for {name!r}: {tuple(tensor.shape)} vs model's "
                    f"{tuple(own[key].shape)}"
                )
            own[key].copy_(tensor)
            self.lora_base.pop(key, None)  # full weights replace the base

    def stop_ids(self, params: SamplingParams) -> list[int]:
        """Token ids that end a sequence under ``params``: eos (unless ignored) and stop ids."""
        eos = [] if params.ignore_eos else self.eos_token_ids
        return sorted(set(eos) | set(params.stop_token_ids))

    def generate(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Sample ``params.n`` completions per prompt; returns one list per prompt, in order.

        Sample ``j`` of prompt ``i`` depends only on the model, the prompt, ``params`` and
        ``(params.seed, i, j)``: not on batch size or the other prompts.
        """
        done = dict(self.generate_stream(prompt_ids, params))
        return [done[i] for i in range(len(prompt_ids))]

    def generate_stream(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> Iterator[tuple[int, list[Completion]]]:
        """Like ``generate``, yielding ``(prompt index, its completions)`` as each prompt's
        group finishes (the same samples, in completion order)."""
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        seed = random_seed() if params.seed is None else params.seed
        stop_ids = self.stop_ids(params)
        index = {
            self.batcher.submit(p, params, seed=seed, index=i, stop_ids=stop_ids): i
            for i, p in enumerate(prompt_ids)
        }
        remaining = len(index)
        was_training = self.model.training
        if was_training:  # train()/eval() walk every module: only when needed
            self.model.eval()
        try:
            while remaining:
                for ticket, completions in self.batcher.step():
                    remaining -= 1
                    yield index[ticket], completions
        except BaseException:
            self.batcher.abort_all()  # leave no half-done work in the shared batcher
            raise
        finally:
            if was_training:
                self.model.train()
