"""LoRA adapters on the weights edge: what the trainer sends and how a receiver merges it.

The payload holds two tensors per adapted linear layer, named after the layer in the plain
Hugging Face model: ``<module>.lora_A`` (rank x in) and ``<module>.lora_B`` (out x rank,
already multiplied by the scaling alpha / rank). A receiver keeps its base weight ``W0`` and
serves ``W0 + lora_B @ lora_A``; the names match no base weight, so a receiver that does not
know adapters refuses them instead of loading them as weights.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

A, B = ".lora_A", ".lora_B"
PEFT_PREFIX = "base_model.model."  # what PeftModel puts before the HF model's names


def is_adapter_key(name: str) -> bool:
    """Whether a state-dict key (peft's or the payload's) names a LoRA tensor."""
    return ".lora_A." in name or ".lora_B." in name or name.endswith((A, B))


def is_adapter(weights: Mapping[str, object]) -> bool:
    """Whether weights on the edge are a LoRA payload (not full weights)."""
    return bool(weights) and all(name.endswith((A, B)) for name in weights)


def payload(peft_state: Mapping[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """The edge payload from a peft state dict (its other keys are ignored)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in peft_state.items():
        for part in (A, B):
            if f"{part}." in name:
                module = name.removeprefix(PEFT_PREFIX).split(f"{part}.")[0]
                out[module + part] = tensor * scaling if part == B else tensor
    return out


def to_peft_names(adapter: Mapping[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """The inverse of `payload`: peft's names (adapter `default`), lora_B unscaled."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in adapter.items():
        part = A if name.endswith(A) else B
        key = f"{PEFT_PREFIX}{name.removesuffix(part)}{part}.default.weight"
        out[key] = tensor / scaling if part == B else tensor
    return out


def base_weights(peft_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The frozen base model's tensors of a peft state dict, under the HF model's names."""
    return {
        name.removeprefix(PEFT_PREFIX).replace(".base_layer.", "."): tensor
        for name, tensor in peft_state.items()
        if not is_adapter_key(name)
    }


def pairs(adapter: Mapping[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(base weight name, lora_A, scaled lora_B) per adapted layer of a payload."""
    for name, a in adapter.items():
        if name.endswith(A):
            module = name.removesuffix(A)
            yield f"{module}.weight", a, adapter[module + B]


def merged_weight(base: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``base + b @ a`` computed in float32, in `base`'s dtype and device."""
    delta = b.to(base.device, torch.float32) @ a.to(base.device, torch.float32)
    return (base.float() + delta).to(base.dtype)


def merge_into(target: torch.Tensor, base: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``target = base + b @ a`` in place, in `target`'s dtype (one pass over the weight)."""
    torch.addmm(base, b.to(base.device, base.dtype), a.to(base.device, base.dtype), out=target)


def merge(
    base: Mapping[str, torch.Tensor], adapter: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Full weights with the adapter merged in (`base` is left unchanged)."""
    out = dict(base)
    for key, a, b in pairs(adapter):
        out[key] = merged_weight(base[key], a, b)
    return out


def nbytes(weights: Mapping[str, object]) -> int:
    """Bytes of the tensors in a weights dict (what the edge carries)."""
    return sum(t.nbytes for t in weights.values() if isinstance(t, torch.Tensor))
