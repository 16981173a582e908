"""The rollout pool: the torch engine (slot KV cache, continuous batching) and, as services,
an SGLang-protocol rollout server, its client (load balancing, failover) and launchers."""

from operators.rollout.sampling import Completion, SamplingParams
from operators.rollout.torch_engine import TorchEngine

__all__ = ["Completion", "SamplingParams", "TorchEngine"]
