"""Advantage estimators: each against values computed by hand, and against an independent
implementation of the published formula written here in plain Python (not our code)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from operators.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    MissingInputError,
)

EPS = 1e-6


def estimate(name: str, rewards, groups, mask=None, baseline=None, **config) -> np.ndarray:
    inputs = AdvantageInputs(
        np.asarray(rewards, dtype=np.float32),
        np.asarray(groups),
        None if mask is None else np.asarray(mask, dtype=np.float64),
        None if baseline is None else np.asarray(baseline, dtype=np.float64),
    )
    return ADVANTAGE_ESTIMATORS.get(name)(inputs, AdvantageConfig(**config))


# A batch of two prompts: group 3 with 3 samples, group 8 with 2; interleaved rows, and
# responses of 3, 1, 2, 3 and 2 tokens, row 0's second token from a tool (mask 0).
REWARDS = [1.0, 0.0, 0.5, 1.0, 0.0]
GROUPS = [3, 8, 3, 3, 8]
MASK = [[1, 0, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 0]]


def counted(mask_row) -> list[int]:
    return [t for t, m in enumerate(mask_row) if m]


# ---- by hand ---------------------------------------------------------------------------


def test_grpo_and_dr_grpo_by_hand():
    # group 3: rewards 1, 0.5, 1 -> mean 5/6, sample std sqrt(1/12); group 8: 0, 0 -> 0
    std = math.sqrt(((1 / 6) ** 2 * 2 + (1 / 3) ** 2) / 2)
    assert std == pytest.approx(math.sqrt(1 / 12))
    np.testing.assert_allclose(
        estimate("grpo", REWARDS, GROUPS),
        [(1 / 6) / (std + EPS), 0, (-1 / 3) / (std + EPS), (1 / 6) / (std + EPS), 0],
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        estimate("dr_grpo", REWARDS, GROUPS), [1 / 6, 0, -1 / 3, 1 / 6, 0], rtol=1e-6
    )


def test_rloo_by_hand():
    # row 0: 1 - mean(0.5, 1) = 0.25; row 2: 0.5 - mean(1, 1) = -0.5; row 3 like row 0
    np.testing.assert_allclose(
        estimate("rloo", REWARDS, GROUPS), [0.25, 0.0, -0.5, 0.25, 0.0], rtol=1e-6
    )
    assert estimate("rloo", [0.7], [1]).tolist() == [0.0]  # no other sample: no baseline


def test_remax_by_hand_and_without_its_baseline():
    np.testing.assert_allclose(
        estimate("remax", [1.0, 0.0, 1.0], [0, 0, 1], baseline=[1.0, 1.0, 0.0]), [0.0, -1.0, 1.0]
    )
    with pytest.raises(MissingInputError, match="baseline"):
        estimate("remax", [1.0], [0])


def test_reinforce_plus_plus_by_hand():
    # Two rows of 2 tokens, gamma 0.5: returns [0.5, 1] (reward 1) and [0, 0] (reward 0);
    # over the 4 tokens: mean 0.375, sample std sqrt((0.015625 + 0.390625 + 2 * 0.140625) / 3)
    adv = estimate("reinforce_plus_plus", [1.0, 0.0], [0, 0], [[1, 1], [1, 1]], gamma=0.5)
    std = math.sqrt((0.125**2 + 0.625**2 + 2 * 0.375**2) / 3)
    np.testing.assert_allclose(
        adv, np.array([[0.125, 0.625], [-0.375, -0.375]]) / (std + EPS), rtol=1e-6
    )
    # a tool token (mask 0) is not a step: no discount across it, advantage 0 on it
    adv = estimate("reinforce_plus_plus", [1.0, 0.0], [0, 0], [[1, 0, 1], [1, 1, 0]], gamma=0.5)
    assert adv[0, 1] == 0 and adv[1, 2] == 0
    assert adv[0, 0] < adv[0, 2]  # 0.5 then 1.0 before whitening


def test_reinforce_plus_plus_baseline_by_hand():
    # group means: 0.5 for rows 0-1; row 2 alone -> 0. Centred: 0.5, -0.5, 0.
    # tokens: 2, 1, 1 -> token values 0.5, 0.5, -0.5, 0 : mean 0.125, std sqrt(0.6875 / 3)
    adv = estimate(
        "reinforce_plus_plus_baseline", [1.0, 0.0, 3.0], [0, 0, 1], [[1, 1], [1, 0], [1, 0]]
    )
    std = math.sqrt((2 * 0.375**2 + 0.625**2 + 0.125**2) / 3)
    np.testing.assert_allclose(adv, np.array([0.375, -0.625, -0.125]) / (std + EPS), rtol=1e-6)


def test_token_level_estimators_need_the_tokens():
    with pytest.raises(MissingInputError, match="response_ids"):
        estimate("reinforce_plus_plus", [1.0], [0])


# ---- independent implementations of the published formulas ------------------------------


def paper_grpo(rewards, groups, normalise=True):
    """DeepSeekMath (Shao et al. 2024) outcome supervision: (r_i - mean(r)) / std(r) within
    the prompt's group (std with Bessel's correction; a lone sample has no signal)."""
    out = []
    for r, g in zip(rewards, groups, strict=True):
        group = [x for x, h in zip(rewards, groups, strict=True) if h == g]
        if len(group) < 2:
            out.append(0.0)
        elif normalise:
            out.append((r - statistics.mean(group)) / (statistics.stdev(group) + EPS))
        else:
            out.append(r - statistics.mean(group))
    return out


def paper_rloo(rewards, groups):
    """Ahmadian et al. 2024 eq. (leave-one-out): r_i - 1/(k-1) * sum_{j != i} r_j."""
    out = []
    for i, (r, g) in enumerate(zip(rewards, groups, strict=True)):
        others = [
            x for j, (x, h) in enumerate(zip(rewards, groups, strict=True)) if h == g and j != i
        ]
        out.append(r - sum(others) / len(others) if others else 0.0)
    return out


def paper_normalise(values):
    """REINFORCE++ (Hu et al. 2025): (A - mean(A)) / std(A) over the global batch."""
    mean, std = statistics.mean(values), statistics.stdev(values)
    return [(v - mean) / (std + EPS) for v in values]


def paper_reinforce_plus_plus(rewards, mask, gamma):
    """r_t = 1[t is the last step] * r(x, y); G_t = sum_{i >= t} gamma^(i - t) r_i, over the
    policy's own tokens; advantages are the returns normalised over the batch's tokens."""
    returns = []
    for reward, row in zip(rewards, mask, strict=True):
        steps = counted(row)
        g, row_returns = 0.0, []
        for k in reversed(range(len(steps))):
            g = (reward if k == len(steps) - 1 else 0.0) + gamma * g
            row_returns.append(g)
        returns.append(list(reversed(row_returns)))
    flat = paper_normalise([g for row in returns for g in row])
    out, at = np.zeros((len(mask), len(mask[0]))), 0
    for i, row in enumerate(mask):
        for t in counted(row):
            out[i, t], at = flat[at], at + 1
    return out


def paper_reinforce_plus_plus_baseline(rewards, groups, mask):
    """REINFORCE++-baseline: A = r - mean_group(r) on every token, normalised over the
    batch's tokens."""
    centred = [
        r - statistics.mean([x for x, h in zip(rewards, groups, strict=True) if h == g])
        for r, g in zip(rewards, groups, strict=True)
    ]
    tokens = [c for c, row in zip(centred, mask, strict=True) for _ in counted(row)]
    mean, std = statistics.mean(tokens), statistics.stdev(tokens)
    return [(c - mean) / (std + EPS) for c in centred]


@pytest.fixture
def batch():
    rng = np.random.default_rng(7)
    groups = np.repeat(np.arange(6), 4)[rng.permutation(24)]
    rewards = rng.choice([0.0, 0.25, 1.0], size=24).tolist()
    lens = rng.integers(1, 7, size=24)
    mask = [[int(t < n and rng.random() > 0.2) or int(t == 0) for t in range(7)] for n in lens]
    return rewards, groups.tolist(), mask


def test_grpo_and_dr_grpo_match_the_paper(batch):
    rewards, groups, _ = batch
    np.testing.assert_allclose(
        estimate("grpo", rewards, groups), paper_grpo(rewards, groups), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        estimate("dr_grpo", rewards, groups), paper_grpo(rewards, groups, False), atol=1e-6
    )


def test_rloo_matches_the_paper(batch):
    rewards, groups, _ = batch
    np.testing.assert_allclose(
        estimate("rloo", rewards, groups), paper_rloo(rewards, groups), atol=1e-6
    )


def test_remax_matches_the_paper(batch):
    """Li et al. 2024: r(x, y) - r(x, greedy(x))."""
    rewards, groups, _ = batch
    greedy = {g: float(g % 2) for g in groups}
    baseline = [greedy[g] for g in groups]
    expected = [r - b for r, b in zip(rewards, baseline, strict=True)]
    np.testing.assert_allclose(
        estimate("remax", rewards, groups, baseline=baseline), expected, atol=1e-6
    )


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.5])
def test_reinforce_plus_plus_matches_the_paper(batch, gamma):
    rewards, groups, mask = batch
    got = estimate("reinforce_plus_plus", rewards, groups, mask, gamma=gamma)
    np.testing.assert_allclose(
        got, paper_reinforce_plus_plus(rewards, mask, gamma), rtol=1e-5, atol=1e-5
    )


def test_reinforce_plus_plus_baseline_matches_the_paper(batch):
    rewards, groups, mask = batch
    got = estimate("reinforce_plus_plus_baseline", rewards, groups, mask)
    expected = paper_reinforce_plus_plus_baseline(rewards, groups, mask)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
