"""KL estimators per token between the policy and a reference, from their log-probs
(Schulman's k1, k2, k3; veRL's names kl/abs/mse/low_var_kl as aliases)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rldag import Registry

KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator")


@KL_ESTIMATORS.register("k1", "kl")
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """log p - log q: unbiased, high variance, can be negative."""
    return logp - ref_logp


@KL_ESTIMATORS.register("abs")
def kl_abs(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """|log p - log q|."""
    return (logp - ref_logp).abs()


@KL_ESTIMATORS.register("k2", "mse")
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """(log p - log q)^2 / 2."""
    return 0.5 * (logp - ref_logp).square()


@KL_ESTIMATORS.register("k3", "low_var_kl")
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """q/p - log(q/p) - 1: unbiased, non-negative, low variance (clamped for stability)."""
    neg = (-(logp - ref_logp)).clamp(-20.0, 20.0)
    return (neg.exp() - neg - 1.0).clamp(-10.0, 10.0)
