"""The RL math of the trainer as pure tensor functions (masks are 1 on response tokens).

Shapes: [batch, tokens] for per-token values. Names follow veRL: clip_ratio_low/high,
clip_ratio_c (dual clip), loss_agg_mode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from operators.algorithms.aggregation import LOSS_AGGREGATIONS, masked_mean
from operators.algorithms.kl import KL_ESTIMATORS


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0):
    """log p(token) under softmax(logits / temperature), gathered at `tokens`."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-token entropy of softmax(logits / temperature)."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def aggregate(losses: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Reduce per-token losses to a scalar with a registered `loss_agg_mode`
    (operators.algorithms.aggregation): token-mean, seq-mean-token-sum, seq-mean-token-mean."""
    return LOSS_AGGREGATIONS.get(mode)(losses, mask)


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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
    clipfrac = masked_mean((clipped > unclipped).float(), mask)
    if clip_ratio_c is not None:
        dual = torch.minimum(losses, -advantages * clip_ratio_c)
        losses = torch.where(advantages < 0, dual, losses)
    approx_kl = masked_mean(-log_ratio, mask)
    if weights is not None:
        losses = losses * weights.detach()
    return aggregate(losses, mask, loss_agg_mode), clipfrac.detach(), approx_kl.detach()


def behaviour_weights(
    proximal_logp: torch.Tensor, behaviour_logp: torch.Tensor, cap: float
) -> torch.Tensor:
    """Decoupled PPO's truncated importance weights pi_prox / pi_behav per token (AReaL):
    correct for rows sampled by an older policy version; capped at `cap` (the token level,
    truncate mode of operators.algorithms.importance)."""
    return capped_ratio(proximal_logp - behaviour_logp, cap)


def capped_ratio(log_ratio: torch.Tensor, cap: float) -> torch.Tensor:
    """exp(log_ratio), truncated at `cap` (the log ratio is clamped at 20 first)."""
    return log_ratio.clamp(max=20.0).exp().clamp(max=cap)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL(policy || reference) estimate by a registered estimator name
    (operators.algorithms.kl): k1, abs, k2 (mse) or k3 (low_var_kl)."""
    return KL_ESTIMATORS.get(kind)(logp, ref_logp)
