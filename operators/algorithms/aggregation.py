"""Loss aggregation modes (veRL's `loss_agg_mode`): per-token losses -> one scalar.

Each mode says whether it averages over tokens or over sequences, so the trainer can weight
micro-batches by their share of the step's tokens or rows. Masks are 1 on the tokens that
count (response tokens the model produced); everything else contributes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import torch

from rldag.graph.registry import Registry, instance_of


class Unit(StrEnum):
    """What a mode averages over."""

    token = "token"
    sequence = "sequence"


@dataclass(frozen=True)
class LossAggregation:
    """A reduction of [batch, tokens] losses under a mask, and the unit it averages over."""

    reduce: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    unit: Unit

    def __call__(self, losses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.reduce(losses, mask)


LOSS_AGGREGATIONS: Registry[LossAggregation] = Registry(
    "loss aggregation mode", accept=instance_of(LossAggregation)
)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the positions where mask is 1 (0 when the mask is empty)."""
    return (values * mask).sum() / mask.sum().clamp_min(1)


def seq_mean_token_sum(losses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over each sequence's tokens, mean over sequences."""
    return (losses * mask).sum(-1).mean()


def seq_mean_token_mean(losses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's tokens, then over sequences."""
    return ((losses * mask).sum(-1) / mask.sum(-1).clamp_min(1)).mean()


LOSS_AGGREGATIONS.add("token-mean", LossAggregation(masked_mean, Unit.token))
LOSS_AGGREGATIONS.add("seq-mean-token-sum", LossAggregation(seq_mean_token_sum, Unit.sequence))
LOSS_AGGREGATIONS.add("seq-mean-token-mean", LossAggregation(seq_mean_token_mean, Unit.sequence))


def aggregate(losses: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Reduce per-token losses to a scalar with a registered `loss_agg_mode`: token-mean,
    seq-mean-token-sum, seq-mean-token-mean."""
    return LOSS_AGGREGATIONS.get(mode)(losses, mask)
