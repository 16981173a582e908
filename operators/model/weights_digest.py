"""The digest of a policy's weights, so that a rollout worker can attest what it loaded.

A digest hashes a fixed sample of each tensor's values (SAMPLE evenly spaced elements, all of
a smaller tensor), by name, as float32: cheap on any model, and any change of a sampled value
changes it. The trainer digests the version it publishes; a rollout worker digests the
weights it actually serves, read back from its model after the load.

With LoRA the policy is `W0 + lora_B @ lora_A` for each adapted layer, and only those layers
change, so the digest covers them. The sampled merged values are computed the same way on both
sides (`merged_samples`, float64 on the CPU, from the base weights and the adapter); a
receiver hashes those only after checking that the weights it serves match them up to the
rounding of its own merge, and hashes what it serves otherwise (an adapter it did not merge
then shows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch

from operators.model.lora_weights import pairs

SAMPLE = 64  # elements sampled per tensor
EPS32 = float(torch.finfo(torch.float32).eps)


def positions(numel: int) -> torch.Tensor:
    """The sampled flat positions of a tensor of `numel` elements."""
    if numel <= SAMPLE:
        return torch.arange(numel)
    return torch.linspace(0, numel - 1, SAMPLE, dtype=torch.float64).round().long()


def samples(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's sampled values (float64, on the CPU)."""
    flat = tensor.detach().reshape(-1)
    return flat[positions(flat.numel()).to(flat.device)].cpu().double()


def digest(sampled: Mapping[str, torch.Tensor]) -> str:
    """16 hex digits of SHA-256 over the names and their sampled values as float32."""
    sha = hashlib.sha256()
    for name in sorted(sampled):
        sha.update(name.encode() + b"\0")
        sha.update(sampled[name].to(torch.float32).numpy().tobytes())
    return sha.hexdigest()[:16]


def weights_digest(weights: Mapping[str, object]) -> str:
    """The digest of full weights (a state dict; what is not a tensor is left out)."""
    return digest({n: samples(t) for n, t in weights.items() if isinstance(t, torch.Tensor)})


BaseSamples = dict[str, tuple[torch.Size, torch.Tensor]]  # name -> (shape, sampled values)


def base_samples(base: Mapping[str, torch.Tensor], names: object) -> BaseSamples:
    """What the digest needs of the base weights `names` (kept: they never change)."""
    return {name: (base[name].shape, samples(base[name])) for name in names}


def merged_samples(
    base: BaseSamples, adapter: Mapping[str, torch.Tensor]
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per adapted layer: the sampled values of `W0 + lora_B @ lora_A` (float64) and the
    bound of the rounding a merge in float32 may add to each (float32 eps x the magnitudes
    it sums, x the terms); `base` holds the layers' base weights W0 (`base_samples`)."""
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, a, b in pairs(adapter):
        shape, w = base[name]
        where = positions(shape.numel())
        rows, col = where // shape[1], where % shape[1]
        b_rows = b.detach()[rows.to(b.device)].cpu().double()  # (k, r)
        a_cols = a.detach()[:, col.to(a.device)].cpu().double().T  # (k, r)
        terms = b_rows * a_cols
        value = w + terms.sum(dim=1)
        bound = (a.shape[0] + 2) * EPS32 * (w.abs() + terms.abs().sum(dim=1))
        out[name] = (value, bound)
    return out


def adapted(adapter: Mapping[str, torch.Tensor]) -> list[str]:
    """The base weights an adapter changes."""
    return [name for name, _, _ in pairs(adapter)]


def adapter_digest(base: BaseSamples, adapter: Mapping[str, torch.Tensor]) -> str:
    """The trainer's digest of a LoRA policy: the merged adapted layers."""
    return digest({name: value for name, (value, _) in merged_samples(base, adapter).items()})


def served_adapter_digest(
    serving: Mapping[str, torch.Tensor], base: BaseSamples, adapter: Mapping[str, torch.Tensor]
) -> str:
    """A receiver's digest of the LoRA policy it serves: `serving` holds the weights its model
    uses now, `base` the base weights it merged the `adapter` into."""
    sampled: dict[str, torch.Tensor] = {}
    for name, (value, bound) in merged_samples(base, adapter).items():
        actual = samples(serving[name])
        sampled[name] = value if bool(((actual - value).abs() <= bound).all()) else actual
    return digest(sampled)
