"""Weights on the wire between Ray workers: torch tensors travel as numpy arrays, which Ray's
object store holds zero-copy (pickled torch tensors are copied several times)."""

from __future__ import annotations

import warnings
from typing import Any

WIRE_DTYPES = {"torch.bfloat16": "int16", "torch.float8_e4m3fn": "uint8"}


def to_wire(weights: dict[str, Any]) -> dict[str, Any]:
    """Tensors -> (numpy array, dtype name); anything else passes unchanged."""
    import torch

    out: dict[str, Any] = {}
    for name, value in weights.items():
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            dtype = str(tensor.dtype)
            if dtype in WIRE_DTYPES:
                tensor = tensor.view(getattr(torch, WIRE_DTYPES[dtype]))
            out[name] = ("tensor", tensor.numpy(), dtype)
        else:
            out[name] = value
    return out


def from_wire(weights: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `to_wire` (tensors share the received buffers)."""
    import torch

    out: dict[str, Any] = {}
    for name, value in weights.items():
        if isinstance(value, tuple) and len(value) == 3 and value[0] == "tensor":
            _, array, dtype = value
            with warnings.catch_warnings():  # read-only store buffers: loading copies them
                warnings.filterwarnings("ignore", message="The given NumPy array is not writ")
                tensor = torch.from_numpy(array)
            if dtype in WIRE_DTYPES:
                tensor = tensor.view(getattr(torch, dtype.removeprefix("torch.")))
            out[name] = tensor
        else:
            out[name] = value
    return out


def save_wire(path: str, weights: dict[str, Any]) -> None:
    """Wire-form weights as one safetensors file (dtype names in its metadata)."""
    from safetensors.numpy import save_file

    arrays = {name: value[1] for name, value in weights.items()}
    dtypes = {name: value[2] for name, value in weights.items()}
    save_file(arrays, path, metadata=dtypes)


def load_wire(path: str) -> dict[str, Any]:
    """The inverse of `save_wire`."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    with safe_open(path, "np") as f:
        dtypes = f.metadata() or {}
    return {name: ("tensor", a, dtypes[name]) for name, a in load_file(path).items()}
