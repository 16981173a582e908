"""Policy losses by name (veRL's `policy_loss.loss_mode`): ppo (clip, low/high, dual clip),
gspo (sequence-level ratio) and cispo (clipped stop-gradient IS weight).

Every loss takes per-token log-probs of the policy being trained and of the policy the
ratio is taken against, per-token advantages, the loss mask and a PolicyLossConfig, plus
optional per-token importance weights (off-policy corrections) that scale each token's loss.
It returns (loss, clip fraction, approx KL old -> new as the mean of old - new log-probs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from operators.algorithms.aggregation import aggregate, masked_mean
from rldag import Registry


@dataclass(frozen=True)
class PolicyLossConfig:
    """The trainer params every policy loss reads."""

    clip_ratio_low: float = 0.2  # ratio (IS weight for cispo) bounded below by 1 - low
    clip_ratio_high: float = 0.2  # ... and above by 1 + high
    clip_ratio_c: float | None = None  # ppo's dual clip for negative advantages
    loss_agg_mode: str = "token-mean"


LossOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
PolicyLoss = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, PolicyLossConfig, torch.Tensor | None],
    LossOutput,
]
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")


def _finish(
    losses: torch.Tensor,
    clipped: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    loss_agg_mode: str,
    weights: torch.Tensor | None,
) -> LossOutput:
    """Weight, aggregate, and report the clip fraction and approx KL."""
    if weights is not None:
        losses = losses * weights.detach()
    clipfrac = masked_mean(clipped.float(), mask).detach()
    approx_kl = masked_mean(-log_ratio, mask).detach()
    return aggregate(losses, mask, loss_agg_mode), clipfrac, approx_kl


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
    weights: torch.Tensor | None = None,
) -> LossOutput:
    """PPO clipped surrogate with separate low/high ratios and optional dual clip.

    `advantages` is per token (a sequence advantage broadcast over its tokens); `weights`
    (per token, e.g. behaviour importance weights) scale each token's loss.
    Returns (loss, clip fraction, approx KL old->new as mean of old_logp - logp).
    """
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    losses = torch.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if clip_ratio_c is not None:
        dual = torch.minimum(losses, -advantages * clip_ratio_c)
        losses = torch.where(advantages < 0, dual, losses)
    return _finish(losses, was_clipped, log_ratio, mask, loss_agg_mode, weights)


@POLICY_LOSSES.register("ppo", "vanilla")
def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PolicyLossConfig,
    weights: torch.Tensor | None = None,
) -> LossOutput:
    """PPO's clipped surrogate per token (Schulman et al. 2017), dual clip (Ye et al. 2020)."""
    return ppo_clip_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_ratio_low=config.clip_ratio_low,
        clip_ratio_high=config.clip_ratio_high,
        clip_ratio_c=config.clip_ratio_c,
        loss_agg_mode=config.loss_agg_mode,
        weights=weights,
    )


@POLICY_LOSSES.register("gspo")
def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PolicyLossConfig,
    weights: torch.Tensor | None = None,
) -> LossOutput:
    """GSPO (Zheng et al. 2025), token form: every token's ratio has the value of its
    sequence's length-normalised ratio s_i = exp(mean_t log(pi/pi_old)) and the gradient of
    s_i * log pi(y_t); clipped like PPO. With per-sequence advantages and
    `loss_agg_mode: seq-mean-token-mean` this is the paper's sequence-level objective."""
    log_ratio = logp - old_logp
    seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    token_log_ratio = seq_log_ratio.detach().clamp(-20.0, 20.0).unsqueeze(-1) + (
        logp - logp.detach()
    )
    ratio = token_log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - config.clip_ratio_low, 1.0 + config.clip_ratio_high)
    losses = torch.maximum(unclipped, clipped)
    return _finish(losses, clipped > unclipped, log_ratio, mask, config.loss_agg_mode, weights)


@POLICY_LOSSES.register("cispo")
def cispo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PolicyLossConfig,
    weights: torch.Tensor | None = None,
) -> LossOutput:
    """CISPO (MiniMax-M1, 2025): -sg(clip(ratio, 1 - low, 1 + high)) * A * log pi per token.
    Every token keeps a gradient; the clip bounds only its importance weight. MiniMax-M1
    bounds it from above only (`clip_ratio_low: 1.0`)."""
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    low, high = 1.0 - config.clip_ratio_low, 1.0 + config.clip_ratio_high
    is_weight = ratio.clamp(low, high).detach()
    losses = -advantages * is_weight * logp
    return _finish(
        losses, (ratio < low) | (ratio > high), log_ratio, mask, config.loss_agg_mode, weights
    )
