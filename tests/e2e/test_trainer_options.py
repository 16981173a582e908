"""The trainer's options end to end on the default pipeline (in-process): a reference node
adding ref_logprobs, KL in the reward and in the loss, decoupled PPO, bf16 autocast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from rldag.config.spec import load_pipeline
from rldag.engine.run import Run
from rldag.graph.dag import build_graph
from tests.support.paths import ROOT


def test_reference_kl_and_decoupled_ppo(tiny_task, tmp_path):
    model = tiny_task / "model"
    loaded = load_pipeline(
        ROOT / "pipeline.yaml",
        [
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
        ],
    )
    graph = build_graph(loaded)
    assert graph.nodes["ref"].pool == "training"  # the operator's pool
    run = Run.start(loaded, graph)
    run.run_inline(2)
    it0 = pq.read_table(Path(run.uri) / "iter=0" / "klr.parquet")
    for behav, ref in zip(
        it0["response_logprobs"].to_pylist(), it0["ref_logprobs"].to_pylist(), strict=True
    ):
        np.testing.assert_allclose(ref, behav, atol=1e-4)  # version 0 is the reference
    np.testing.assert_allclose(it0["kl"].to_numpy(), 0.0, atol=1e-3)
    it1 = pq.read_table(Path(run.uri) / "iter=1" / "klr.parquet")
    assert np.abs(it1["kl"].to_numpy()).max() > 1e-3  # the policy moved away
    scored = pq.read_table(Path(run.uri) / "iter=1" / "score.parquet")
    np.testing.assert_allclose(
        it1["reward"].to_numpy(),
        scored["reward"].to_numpy() - 0.1 * it1["kl"].to_numpy(),
        atol=1e-6,
    )
    metrics = pq.read_table(Path(run.uri) / "metrics.parquet").to_pylist()
    assert metrics[1]["train/kl"] > 0 and metrics[1]["policy_version"] == 1
