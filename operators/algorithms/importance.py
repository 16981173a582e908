"""Truncated importance sampling between the policy that sampled a row (the rollout engine's
`response_logprobs`) and the trainer's own log-probs of the same tokens, before the update.

The engine and the trainer disagree even on the same weights (kernels, precision, a stale
policy version), so the trainer's PPO ratio is taken against its own log-probs and each
token's loss is weighted by w = pi_trainer / pi_rollout (Yao et al. 2025, "Your efficient RL
framework secretly brings you off-policy RL training"):

- level `token`: one ratio per token; `sequence`: the product over the sequence's tokens;
  `geometric`: their geometric mean (the product to the power 1 / length);
- mode `truncate`: w = min(ratio, cap); `mask`: w = ratio inside [low, cap], 0 outside
  (the token or sequence is dropped from the gradient; it still counts in the normaliser).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import torch

from operators.algorithms.aggregation import masked_mean


class ISLevel(StrEnum):
    """Where the importance ratio is taken (`none`: no correction)."""

    none = "none"
    token = "token"
    sequence = "sequence"
    geometric = "geometric"


class ISMode(StrEnum):
    """What happens to a ratio outside the bound."""

    truncate = "truncate"
    mask = "mask"


@dataclass(frozen=True)
class ISConfig:
    """Truncated importance sampling settings (the trainer's `tis*` params)."""

    level: ISLevel = ISLevel.token
    mode: ISMode = ISMode.truncate
    cap: float = 2.0  # upper bound of the weight
    low: float = 0.0  # mask mode: ratios below this are dropped too


def capped_ratio(log_ratio: torch.Tensor, cap: float) -> torch.Tensor:
    """exp(log_ratio), truncated at `cap` (the log ratio is clamped at 20 first)."""
    return log_ratio.clamp(max=20.0).exp().clamp(max=cap)


def _log_ratio(
    trainer_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, level: ISLevel
) -> torch.Tensor:
    """log(pi_trainer / pi_rollout) per token, or per sequence broadcast over its tokens."""
    token = trainer_logp - behaviour_logp
    if level == ISLevel.token:
        return token
    total = (token * mask).sum(-1, keepdim=True)
    if level == ISLevel.geometric:
        total = total / mask.sum(-1, keepdim=True).clamp_min(1)
    return total.expand_as(token)


def importance_weights(
    trainer_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    config: ISConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token weights (no gradient) and the metrics users watch: `is_mismatch_kl`
    (KL(rollout || trainer), k1, on the rollout's samples), `is_mismatch_k3` (its
    non-negative k3 estimate), `is_capped_frac` (share of tokens truncated or masked) and
    `is_weight_mean`."""
    trainer_logp, behaviour_logp = trainer_logp.detach(), behaviour_logp.detach()
    log_ratio = _log_ratio(trainer_logp, behaviour_logp, mask, config.level)
    if config.mode == ISMode.truncate:
        weights = capped_ratio(log_ratio, config.cap)
        outside = log_ratio > math.log(config.cap)
    else:
        ratio = log_ratio.clamp(max=20.0).exp()
        outside = (ratio > config.cap) | (ratio < config.low)
        weights = torch.where(outside, torch.zeros_like(ratio), ratio)
    diff = behaviour_logp - trainer_logp
    stats = {
        "is_mismatch_kl": masked_mean(diff, mask),
        "is_mismatch_k3": masked_mean(diff.clamp(-20.0, 20.0).neg().exp() - 1.0 + diff, mask),
        "is_capped_frac": masked_mean(outside.float(), mask),
        "is_weight_mean": masked_mean(weights, mask),
    }
    return weights, stats
