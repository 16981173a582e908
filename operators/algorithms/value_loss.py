"""PPO's clipped value loss (the critic's objective, as in OpenAI baselines' ppo2):
0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2) per token."""

from __future__ import annotations

import torch

from operators.algorithms.aggregation import LossAggregation, masked_mean


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float,
    aggregation: LossAggregation,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, fraction of tokens where the clipped error was the larger one)."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    unclipped_error = (values - returns).square()
    clipped_error = (clipped - returns).square()
    losses = 0.5 * torch.maximum(unclipped_error, clipped_error)
    clipfrac = masked_mean((clipped_error > unclipped_error).float(), mask)
    return aggregation(losses, mask), clipfrac.detach()
