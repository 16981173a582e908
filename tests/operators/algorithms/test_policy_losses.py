"""Policy losses (ppo, gspo, cispo) and truncated importance sampling: each against values
computed by hand, and against an independent implementation of the published formula
written here token by token (values and gradients)."""

from __future__ import annotations

import math

import pytest
import torch

from operators.algorithms.importance import ISConfig, ISLevel, ISMode, importance_weights
from operators.algorithms.policy_losses import POLICY_LOSSES, PolicyLossConfig


def loss_of(name: str, logp, old, adv, mask, weights=None, **config):
    return POLICY_LOSSES.get(name)(logp, old, adv, mask, PolicyLossConfig(**config), weights)


# ---- by hand ---------------------------------------------------------------------------


def test_gspo_by_hand():
    # row 0: log ratios 0.2, 0.4 -> s = e^0.3 = 1.35 > 1.2, A = +1: clipped, -1.2 per token
    # row 1: log ratios -0.1, 0.1 -> s = 1, A = -1: +1 per token; token-mean (-2.4 + 2) / 4
    old = torch.zeros(2, 2)
    logp = torch.tensor([[0.2, 0.4], [-0.1, 0.1]], requires_grad=True)
    adv, mask = torch.tensor([[1.0, 1.0], [-1.0, -1.0]]), torch.ones(2, 2)
    loss, clipfrac, approx_kl = loss_of("gspo", logp, old, adv, mask)
    assert loss.item() == pytest.approx(-0.1, abs=1e-6)
    assert clipfrac.item() == pytest.approx(0.5)
    assert approx_kl.item() == pytest.approx(-0.15, abs=1e-6)  # mean(old - new)
    loss.backward()
    # clipped row: no gradient; row 1: d/dlogp (-A * s) / 4 tokens = 1 * 1 / 4
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.0], [0.25, 0.25]]))


def test_cispo_by_hand():
    # token 0: ratio e^0.5 = 1.65 -> weight 1.2, A = 2: loss -2 * 1.2 * (-1) = 2.4
    # token 1: ratio 1 -> weight 1, A = -1: loss -(-1) * 1 * (-2) = -2; token-mean 0.2
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old, adv = torch.tensor([[-1.5, -2.0]]), torch.tensor([[2.0, -1.0]])
    loss, clipfrac, _ = loss_of("cispo", logp, old, adv, torch.ones(1, 2))
    assert loss.item() == pytest.approx(0.2, abs=1e-6)
    assert clipfrac.item() == pytest.approx(0.5)
    loss.backward()
    # every token keeps a gradient, -A * weight / 2: the clipped one too
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.2, 0.5]]))


def test_ppo_by_name_is_the_clip_loss():
    logp, old = torch.tensor([[0.5, -0.5]]), torch.zeros(1, 2)
    loss, clipfrac, _ = loss_of(
        "ppo", logp, old, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), clip_ratio_high=0.3
    )
    assert loss.item() == pytest.approx((-1.3 + 0.8) / 2, abs=1e-6)
    assert clipfrac.item() == 1.0


def test_truncated_importance_sampling_by_hand():
    # trainer / rollout ratios 0.5, 3, 1.5 on three tokens of one row; mismatch KL (k1 of
    # rollout || trainer) = -mean(log ratio) = -ln(2.25) / 3
    behaviour = torch.zeros(1, 3)
    trainer = torch.log(torch.tensor([[0.5, 3.0, 1.5]]))
    mask = torch.ones(1, 3)

    def weights(level, mode, **kw):
        return importance_weights(trainer, behaviour, mask, ISConfig(level, mode, **kw))

    w, stats = weights(ISLevel.token, ISMode.truncate, cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[0.5, 2.0, 1.5]]))
    assert stats["is_capped_frac"].item() == pytest.approx(1 / 3)
    assert stats["is_mismatch_kl"].item() == pytest.approx(-math.log(2.25) / 3, rel=1e-5)
    w, stats = weights(ISLevel.token, ISMode.mask, cap=2.0, low=0.6)
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0, 1.5]]))
    assert stats["is_capped_frac"].item() == pytest.approx(2 / 3)
    w, _ = weights(ISLevel.sequence, ISMode.truncate, cap=2.0)  # product 2.25 -> 2
    torch.testing.assert_close(w, torch.full((1, 3), 2.0))
    w, _ = weights(ISLevel.geometric, ISMode.truncate, cap=2.0)  # 2.25^(1/3)
    torch.testing.assert_close(w, torch.full((1, 3), 2.25 ** (1 / 3)))
    w, stats = weights(ISLevel.sequence, ISMode.mask, cap=2.0)  # the whole row is dropped
    torch.testing.assert_close(w, torch.zeros(1, 3))
    assert stats["is_capped_frac"].item() == 1.0


# ---- independent implementations of the published formulas ------------------------------


def batch(seed: int = 0, rows: int = 4, tokens: int = 5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, tokens, generator=g) * 3
    logp = (old + torch.randn(rows, tokens, generator=g) * 0.3).requires_grad_(True)
    adv = torch.randn(rows, 1, generator=g).expand(rows, tokens).clone()
    lens = torch.randint(1, tokens + 1, (rows,), generator=g)
    mask = (torch.arange(tokens)[None, :] < lens[:, None]).float()
    return logp, old, adv * mask, mask


def rows_tokens(mask):
    return [[t for t in range(mask.shape[1]) if mask[i, t]] for i in range(mask.shape[0])]


def paper_ppo(logp, old, adv, mask, low, high, dual):
    """Schulman et al. 2017 eq. 7, asymmetric clip (DAPO), dual clip (Ye et al. 2020):
    per token L = -min(r A, clip(r, 1 - low, 1 + high) A), for A < 0 at most -c A; the mean
    over the batch's tokens."""
    total, count = 0.0, 0
    for i, ts in enumerate(rows_tokens(mask)):
        for t in ts:
            r, a = torch.exp(logp[i, t] - old[i, t]), adv[i, t]
            objective = torch.min(r * a, torch.clamp(r, 1 - low, 1 + high) * a)
            if dual is not None and a < 0:
                objective = torch.max(objective, dual * a)
            total, count = total - objective, count + 1
    return total / count


def paper_gspo(logp, old, adv, mask, low, high):
    """Zheng et al. 2025 eq. 5-7: s_i = (pi(y_i) / pi_old(y_i))^(1 / |y_i|);
    J = 1/G sum_i min(s_i A_i, clip(s_i, 1 - low, 1 + high) A_i)."""
    objective = 0.0
    groups = rows_tokens(mask)
    for i, ts in enumerate(groups):
        s = torch.exp(sum(logp[i, t] - old[i, t] for t in ts) / len(ts))
        a = adv[i, ts[0]]
        objective = objective + torch.min(s * a, torch.clamp(s, 1 - low, 1 + high) * a)
    return -objective / len(groups)


def paper_cispo(logp, old, adv, mask, low, high):
    """MiniMax-M1 eq. 4: J = 1 / sum_i |o_i| * sum_i sum_t sg(r_hat) A log pi, with
    r_hat = clip(pi / pi_old, 1 - low, 1 + high)."""
    objective, count = 0.0, 0
    for i, ts in enumerate(rows_tokens(mask)):
        for t in ts:
            r_hat = torch.clamp(torch.exp(logp[i, t] - old[i, t]), 1 - low, 1 + high).detach()
            objective, count = objective + r_hat * adv[i, t] * logp[i, t], count + 1
    return -objective / count


def value_and_grad(fn, logp, *args):
    logp.grad = None
    value = fn(logp, *args)
    value.backward()
    return value.detach(), logp.grad.clone()


def ours(name, mode, **config):
    def fn(logp, old, adv, mask):
        return loss_of(name, logp, old, adv, mask, loss_agg_mode=mode, **config)[0]

    return fn


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dual", [None, 3.0])
def test_ppo_matches_the_paper(seed, dual):
    logp, old, adv, mask = batch(seed)
    got = value_and_grad(
        ours("ppo", "token-mean", clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=dual),
        logp,
        old,
        adv,
        mask,
    )
    want = value_and_grad(paper_ppo, logp, old, adv, mask, 0.2, 0.28, dual)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert want[1].abs().max() > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_matches_the_paper(seed):
    logp, old, adv, mask = batch(seed)
    config = dict(clip_ratio_low=0.05, clip_ratio_high=0.08)
    got = value_and_grad(ours("gspo", "seq-mean-token-mean", **config), logp, old, adv, mask)
    want = value_and_grad(paper_gspo, logp, old, adv, mask, 0.05, 0.08)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert want[1].abs().max() > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cispo_matches_the_paper(seed):
    logp, old, adv, mask = batch(seed)
    config = dict(clip_ratio_low=1.0, clip_ratio_high=0.1)  # MiniMax-M1: no lower bound
    got = value_and_grad(ours("cispo", "token-mean", **config), logp, old, adv, mask)
    want = value_and_grad(paper_cispo, logp, old, adv, mask, 1.0, 0.1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def paper_tis(trainer, behaviour, mask, level, mode, cap, low):
    """Yao et al. 2025 (TIS): w = min(pi_trainer / pi_rollout, C) per token, or of the
    sequence's product (veRL's sequence level) or geometric mean; the masking variants
    (IcePop, seq-mask-tis) keep the ratio inside [low, C] and drop it outside."""
    out = torch.zeros_like(trainer)
    for i, ts in enumerate(rows_tokens(mask)):
        ratios = [math.exp(float(trainer[i, t] - behaviour[i, t])) for t in ts]
        if level == ISLevel.sequence:
            ratios = [math.prod(ratios)] * len(ts)
        elif level == ISLevel.geometric:
            ratios = [math.prod(ratios) ** (1 / len(ts))] * len(ts)
        for t, r in zip(ts, ratios, strict=True):
            if mode == ISMode.truncate:
                out[i, t] = min(r, cap)
            else:
                out[i, t] = r if low <= r <= cap else 0.0
    return out


@pytest.mark.parametrize("level", [ISLevel.token, ISLevel.sequence, ISLevel.geometric])
@pytest.mark.parametrize("mode", [ISMode.truncate, ISMode.mask])
def test_tis_matches_the_paper(level, mode):
    trainer, behaviour, _, mask = batch(3)
    trainer = trainer.detach()
    config = ISConfig(level, mode, cap=1.3, low=0.8)
    weights, stats = importance_weights(trainer, behaviour, mask, config)
    expected = paper_tis(trainer, behaviour, mask, level, mode, 1.3, 0.8)
    torch.testing.assert_close(weights * mask, expected, rtol=1e-5, atol=1e-6)
    if level == ISLevel.token:  # the batch has ratios on both sides of the bound
        assert 0 < stats["is_capped_frac"].item() < 1
    kl = sum(
        float(behaviour[i, t] - trainer[i, t]) for i, ts in enumerate(rows_tokens(mask)) for t in ts
    )
    assert stats["is_mismatch_kl"].item() == pytest.approx(kl / mask.sum().item(), rel=1e-5)
