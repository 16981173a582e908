"""Estimators, losses and truncated importance sampling picked by name run end to end on the
default task (in-process): REINFORCE++ token advantages reach the trainer, TIS reports its
metrics, and ReMax's greedy baseline is a second generate node of the same DAG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import ROOT
from tests.support.runs import run_pipeline


def small(tiny_task: Path, tmp_path: Path) -> list[str]:
    return [
        "ray.enabled=false",
        f"storage.uri={tmp_path}",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
    ]


def test_reinforce_plus_plus_with_gspo_and_sequence_tis(tiny_task, tmp_path):
    run = run_pipeline(
        ROOT / "pipeline.yaml",
        *small(tiny_task, tmp_path),
        "nodes.advantage.op=advantage",
        "nodes.advantage.params.estimator=reinforce_plus_plus",
        "nodes.advantage.params.gamma=0.9",
        "nodes.train.params.policy_loss=gspo",
        "nodes.train.params.loss_agg_mode=seq-mean-token-mean",
        "nodes.train.params.tis=sequence",
        iterations=2,
    )
    adv = run.table("advantage", 0)
    rows = zip(
        adv["token_advantage"].to_pylist(),
        adv["response_ids"].to_pylist(),
        adv["reward"].to_pylist(),
        strict=True,
    )
    discounted = 0
    for tokens, ids, reward in rows:
        assert len(tokens) == len(ids)
        if len(tokens) > 1 and reward > 0:  # a rewarded answer: earlier tokens get less
            assert tokens[0] < tokens[-1]
            discounted += 1
    assert discounted > 0
    metrics = run.metrics()
    # iteration 0: the engine sampled with the weights the trainer holds -> no mismatch
    assert abs(metrics[0]["train/is_mismatch_kl"]) < 1e-4
    assert metrics[0]["train/is_capped_frac"] == 0.0
    assert metrics[0]["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    assert metrics[0]["train/grad_norm"] > 0 and metrics[1]["policy_version"] == 1


def test_remax_baseline_is_the_greedy_rollouts_reward(tiny_task, tmp_path):
    overrides = small(tiny_task, tmp_path) + ["nodes.train.params.lr=1e-2"]
    run = run_pipeline(ROOT / "examples" / "remax.yaml", *overrides, iterations=2)
    for it in (0, 1):
        greedy = run.table("greedy_score", it)
        assert greedy.num_rows == 8  # one greedy answer per prompt
        baseline = dict(
            zip(greedy["prompt_id"].to_pylist(), greedy["reward"].to_pylist(), strict=True)
        )
        adv = run.table("advantage", it)
        expected = adv["reward"].to_numpy() - np.array(
            [baseline[p] for p in adv["prompt_id"].to_pylist()]
        )
        np.testing.assert_allclose(adv["advantage"].to_numpy(), expected, atol=1e-6)
        policy = set(greedy["policy_version"].to_pylist())
        assert policy == set(adv["policy_version"].to_pylist()) == {it}
