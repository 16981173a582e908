"""Weights on the wire: tensors of every dtype round-trip exactly through numpy buffers."""

from __future__ import annotations

import pickle

import torch

from rldag.compute.weights.wire import from_wire, to_wire


def test_round_trip_keeps_values_and_dtypes():
    weights = {
        "w": torch.randn(3, 4),
        "half": torch.randn(5).to(torch.bfloat16),
        "ids": torch.arange(4, dtype=torch.int64),
        "step": 7,
    }
    back = from_wire(pickle.loads(pickle.dumps(to_wire(weights), protocol=5)))
    assert back["step"] == 7
    for name in ("w", "half", "ids"):
        assert back[name].dtype == weights[name].dtype
        assert torch.equal(back[name], weights[name])


def test_non_contiguous_tensors_are_sent_whole():
    t = torch.arange(12.0).reshape(3, 4).t()
    assert torch.equal(from_wire(to_wire({"t": t}))["t"], t)
