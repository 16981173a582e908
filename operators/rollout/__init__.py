"""Rollout engines for the ``generate`` node: sampling parameters and a torch KV-cache engine."""

from operators.rollout.sampling import Completion, SamplingParams
from operators.rollout.torch_engine import TorchEngine

__all__ = ["Completion", "SamplingParams", "TorchEngine"]
