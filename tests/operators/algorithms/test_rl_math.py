"""The RL math against hand-computed values: GRPO advantages, PPO clip, aggregation, KL."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from operators.algorithms.aggregation import aggregate
from operators.algorithms.importance import capped_ratio
from operators.algorithms.kl import KL_ESTIMATORS
from operators.algorithms.logprobs import token_logprobs
from operators.algorithms.policy_losses import ppo_clip_loss
from operators.transform.advantage import grpo_advantages


def test_grpo_advantage_std_normalised_by_hand():
    # Group 7: rewards 1, 0, 0, 1 -> mean 0.5, sample std sqrt(1/3).
    adv = grpo_advantages(np.array([1.0, 0.0, 0.0, 1.0]), np.array([7, 7, 7, 7]))
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(adv, [expected, -expected, -expected, expected], rtol=1e-6)


def test_grpo_advantage_groups_are_independent_and_order_free():
    rewards = np.array([1.0, 3.0, 10.0, 10.0, 2.0])
    groups = np.array([5, 9, 5, 9, 5])  # interleaved
    adv = grpo_advantages(rewards, groups, norm_by_std=False)
    # group 5: rewards 1, 10, 2 (mean 13/3); group 9: 3, 10 (mean 6.5)
    np.testing.assert_allclose(adv, [1 - 13 / 3, 3 - 6.5, 10 - 13 / 3, 10 - 6.5, 2 - 13 / 3])


def test_grpo_advantage_constant_and_singleton_groups_are_zero():
    adv = grpo_advantages(np.array([1.0, 1.0, 0.3]), np.array([0, 0, 1]))
    np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0])
    assert adv.dtype == np.float32


def test_token_logprobs_match_log_softmax_with_temperature():
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]]])
    tokens = torch.tensor([[0, 2]])
    got = token_logprobs(logits, tokens, temperature=2.0)
    z0 = math.exp(1.0) + 1 + math.exp(-0.5)
    z1 = 2 * math.exp(0.25) + 1
    torch.testing.assert_close(got, torch.tensor([[1.0 - math.log(z0), -math.log(z1)]]))


def test_ppo_clip_by_hand():
    # Two tokens of one sequence; advantage +1 and -1; ratios e^{0.5} and e^{-0.5}.
    logp = torch.tensor([[0.5, -0.5]])
    old = torch.zeros(1, 2)
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    loss, clipfrac, approx_kl = ppo_clip_loss(
        logp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.3
    )
    # token 0: max(-1*1.6487, -1*1.3) = -1.3 (clipped); token 1: max(0.6065, 0.8) = 0.8 (clipped)
    assert loss.item() == pytest.approx((-1.3 + 0.8) / 2, abs=1e-6)
    assert clipfrac.item() == pytest.approx(1.0)
    assert approx_kl.item() == pytest.approx(0.0)


def test_ppo_unclipped_inside_the_trust_region():
    logp = torch.tensor([[0.1]])
    loss, clipfrac, _ = ppo_clip_loss(
        logp, torch.zeros(1, 1), torch.tensor([[2.0]]), torch.ones(1, 1)
    )
    assert loss.item() == pytest.approx(-2.0 * math.exp(0.1), rel=1e-6)
    assert clipfrac.item() == 0.0


def test_dual_clip_bounds_negative_advantage_losses():
    logp = torch.tensor([[3.0]])  # ratio e^3 ~ 20
    adv = torch.tensor([[-1.0]])
    plain, _, _ = ppo_clip_loss(logp, torch.zeros(1, 1), adv, torch.ones(1, 1))
    dual, _, _ = ppo_clip_loss(logp, torch.zeros(1, 1), adv, torch.ones(1, 1), clip_ratio_c=3.0)
    assert plain.item() == pytest.approx(math.exp(3.0), rel=1e-5)
    assert dual.item() == pytest.approx(3.0)


def test_token_mean_ignores_padding_and_weights_tokens_equally():
    losses = torch.tensor([[1.0, 3.0, 99.0], [5.0, 99.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert aggregate(losses, mask, "token-mean").item() == pytest.approx(3.0)
    assert aggregate(losses, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 5) / 2)
    assert aggregate(losses, mask, "seq-mean-token-sum").item() == pytest.approx((4 + 5) / 2)
    with pytest.raises(ValueError):
        aggregate(losses, mask, "token-sum")


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([0.0, math.log(2.0)]), torch.tensor([math.log(2.0), 0.0])
    torch.testing.assert_close(
        KL_ESTIMATORS.get("k1")(logp, ref), torch.tensor([-math.log(2), math.log(2)])
    )
    torch.testing.assert_close(KL_ESTIMATORS.get("abs")(logp, ref), torch.tensor([math.log(2)] * 2))
    torch.testing.assert_close(
        KL_ESTIMATORS.get("k2")(logp, ref), torch.tensor([0.5 * math.log(2) ** 2] * 2)
    )
    # k3 = r - log r - 1 with r = ref/p: r=2 -> 1 - ln2 ; r=1/2 -> ln2 - 0.5
    torch.testing.assert_close(
        KL_ESTIMATORS.get("k3")(logp, ref), torch.tensor([1 - math.log(2), math.log(2) - 0.5])
    )
    assert KL_ESTIMATORS.get("k3")(logp, logp).abs().max().item() == 0.0


def test_capped_ratios_truncate_at_the_cap():
    prox = torch.tensor([[0.0, 0.0, math.log(10.0)]])
    behav = torch.tensor([[0.0, math.log(2.0), 0.0]])
    got = capped_ratio(prox - behav, cap=5.0)
    torch.testing.assert_close(got, torch.tensor([[1.0, 0.5, 5.0]]))


def test_ppo_token_weights_scale_each_tokens_loss():
    logp, old = torch.zeros(1, 2), torch.zeros(1, 2)
    adv, mask = torch.tensor([[1.0, 1.0]]), torch.ones(1, 2)
    loss, _, _ = ppo_clip_loss(logp, old, adv, mask, weights=torch.tensor([[0.5, 2.0]]))
    assert loss.item() == pytest.approx(-(0.5 + 2.0) / 2)


def test_sequence_kl_sums_token_estimates():
    from operators.transform.kl_reward import sequence_kl

    kl = sequence_kl([[0.0, -1.0], [-0.5]], [[0.0, -2.0], [-0.5]], "k1")
    np.testing.assert_allclose(kl, [1.0, 0.0])
