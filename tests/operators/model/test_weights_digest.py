"""The digest of a policy's weights (operators/model/weights_digest.py): equal for equal
weights, changed by any sampled value, and for LoRA equal between the trainer's merged policy
and a receiver that merged the adapter, but not one that left it unmerged."""

from __future__ import annotations

import torch

from operators.model import weights_digest as digests
from operators.model.lora_weights import merge_into, pairs


def _weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"layer.weight": torch.randn(96, 80), "norm.weight": torch.randn(80)}


def _adapter(rank: int = 4) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {"layer.lora_A": torch.randn(rank, 80), "layer.lora_B": torch.randn(96, rank) * 0.01}


def test_equal_weights_have_equal_digests_of_16_hex_digits():
    a, b = _weights(), {k: v.clone() for k, v in _weights().items()}
    assert digests.weights_digest(a) == digests.weights_digest(b)
    assert len(digests.weights_digest(a)) == 16
    int(digests.weights_digest(a), 16)


def test_a_changed_sampled_value_or_a_renamed_tensor_changes_the_digest():
    before = digests.weights_digest(_weights())
    changed = _weights()
    position = int(digests.positions(changed["layer.weight"].numel())[7])
    changed["layer.weight"].view(-1)[position] += 1e-6
    renamed = {"other.weight" if k == "layer.weight" else k: v for k, v in _weights().items()}
    assert digests.weights_digest(changed) != before
    assert digests.weights_digest(renamed) != before


def test_a_small_tensor_is_hashed_whole_and_a_large_one_sampled():
    assert digests.positions(10).tolist() == list(range(10))
    sampled = digests.positions(96 * 80)
    assert len(sampled) == digests.SAMPLE and sampled[0] == 0 and sampled[-1] == 96 * 80 - 1


def test_a_receiver_that_merged_the_adapter_attests_the_trainers_digest():
    base, adapter = _weights(), _adapter()
    samples = digests.base_samples(base, digests.adapted(adapter))
    serving = dict(base)
    for key, a, b in pairs(adapter):  # what the torch engine does on load
        serving[key] = torch.empty_like(base[key])
        merge_into(serving[key], base[key], a, b)

    published = digests.adapter_digest(samples, adapter)
    assert digests.served_adapter_digest(serving, samples, adapter) == published
    # left unmerged, it serves the base: its digest says so
    assert digests.served_adapter_digest(base, samples, adapter) != published
