"""Counter-based random numbers: one uniform per (sequence key, step), independent of batching.

A sequence's randomness is a pure function of its key (from the request seed, the prompt's
index in the request and the sample's index in its group) and of how many tokens it has
generated, so a sequence samples the same tokens whether it is decoded alone, in a full batch, or
refilled into a slot mid-flight. The mixer is a 32-bit integer hash evaluated with int64 tensor
ops (no overflow: every product stays below 2**59); the same function works on Python ints.
"""

from __future__ import annotations

import os
from typing import TypeVar

import torch

__all__ = ["group_key", "mix32", "random_seed", "sample_keys", "sequence_key", "uniforms"]

MASK32 = 0xFFFFFFFF
_MUL = 0x45D9F3B  # odd multiplier < 2**27 (avalanches well in two rounds)
_GOLDEN = 0x9E3779B1

IntLike = TypeVar("IntLike", int, torch.Tensor)


def mix32(x: IntLike) -> IntLike:
    """A 32-bit avalanche hash of ``x`` (Python int or int64 tensor holding values < 2**32)."""
    x = x & MASK32
    x = (((x >> 16) ^ x) * _MUL) & MASK32
    x = (((x >> 16) ^ x) * _MUL) & MASK32
    return (x >> 16) ^ x


def group_key(seed: int, index: int) -> int:
    """The key of prompt ``index`` in a request seeded with ``seed`` (any Python int)."""
    h = mix32(seed & MASK32) ^ mix32(((seed >> 32) & MASK32) ^ _GOLDEN)
    return mix32(h ^ mix32(index & MASK32))


def sample_keys(groups: IntLike, samples: IntLike) -> IntLike:
    """Keys of samples ``samples`` of the groups keyed ``groups`` (ints or int64 tensors)."""
    return mix32(groups ^ mix32((samples * _GOLDEN + 1) & MASK32))


def sequence_key(seed: int, index: int, sample: int) -> int:
    """The key of sample ``sample`` of prompt ``index`` in a request seeded with ``seed``."""
    return sample_keys(group_key(seed, index), sample)


def uniforms(keys: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One float32 in (0, 1) per row for int64 ``keys`` at int64 ``steps`` (24-bit resolution)."""
    x = mix32(keys ^ mix32((steps * _GOLDEN + 0x7F4A7C15) & MASK32))
    return ((x >> 8).to(torch.float32) + 0.5) / float(1 << 24)


def random_seed() -> int:
    """A fresh 63-bit seed from the OS (for requests that give none)."""
    return int.from_bytes(os.urandom(8), "little") >> 1
