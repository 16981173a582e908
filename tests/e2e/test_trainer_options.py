"""The trainer's options end to end on the default pipeline (in-process): a reference node
adding ref_logprobs, KL in the reward and in the loss, decoupled PPO, bf16 autocast."""

from __future__ import annotations

import numpy as np

from tests.support.paths import ROOT
from tests.support.runs import drive_inline, start_run


def test_reference_kl_and_decoupled_ppo(tiny_task, tmp_path):
    model = tiny_task / "model"
    overrides = [
        "ray.enabled=false",
        f"storage.uri={tmp_path}",
        f"model.path={model}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
        "nodes.ref.kind=transform",
        "nodes.ref.op=reference_logprobs",
        "nodes.ref.inputs.rollouts=generate",
        f"nodes.ref.params.model_path={model}",
        "nodes.score.inputs.rollouts=ref",
        "nodes.klr.kind=transform",
        "nodes.klr.op=kl_reward",
        "nodes.klr.inputs.scored=score",
        "nodes.klr.params.kl_coef=0.1",
        "nodes.advantage.inputs.scored=klr",
        "nodes.train.params.kl_coef=0.05",
        "nodes.train.params.off_policy=decoupled",
        "nodes.train.params.precision=bf16",
        "nodes.train.params.lr=1e-2",
        "nodes.train.params.max_staleness=0",
    ]
    run = start_run(ROOT / "pipeline.yaml", *overrides)
    assert run.graph.nodes["ref"].pool == "training"  # the operator's pool
    stored = drive_inline(run, 2)
    it0 = stored.table("klr", 0)
    for behav, ref in zip(
        it0["response_logprobs"].to_pylist(), it0["ref_logprobs"].to_pylist(), strict=True
    ):
        np.testing.assert_allclose(ref, behav, atol=1e-4)  # version 0 is the reference
    np.testing.assert_allclose(it0["kl"].to_numpy(), 0.0, atol=1e-3)
    it1 = stored.table("klr", 1)
    assert np.abs(it1["kl"].to_numpy()).max() > 1e-3  # the policy moved away
    scored = stored.table("score", 1)
    np.testing.assert_allclose(
        it1["reward"].to_numpy(),
        scored["reward"].to_numpy() - 0.1 * it1["kl"].to_numpy(),
        atol=1e-6,
    )
    metrics = stored.metrics()
    assert metrics[1]["train/kl"] > 0 and metrics[1]["policy_version"] == 1
