"""The weights edge between split pools over the broadcast group gives the same run as
through the object store: same responses, token ids, log-probs and policy versions, from a
sharded trainer (2 FSDP ranks gather, rank 0 sends) to 2 rollout workers."""

from __future__ import annotations

import logging
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.runs import run_pipeline

ITERATIONS = 2  # iteration 1 samples from the weights the first train step sent
COLUMNS = ["prompt_id", "sample_idx", "response", "response_ids", "response_logprobs"]


def generated(tiny_task: Path, storage: Path, transport: str) -> list[list[dict]]:
    """Each iteration's generated rows of a split-pool run with `weights.transport`."""
    run = run_pipeline(
        ROOT / "pipeline.yaml",
        f"storage.uri={storage}",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=4",
        "nodes.generate.params.n=2",
        "pools.colocate=[]",
        "pools.training.workers=2",
        "pools.rollout.workers=2",
        "checkpoint.export_hf=false",
        f"weights.transport={transport}",
        iterations=ITERATIONS,
    )
    out = []
    for i in range(ITERATIONS):
        table = run.table("generate", i)
        assert set(table["policy_version"].to_pylist()) == {i}  # both workers got weights
        rows = table.select(COLUMNS).to_pylist()
        out.append(sorted(rows, key=lambda r: (r["prompt_id"], r["sample_idx"])))
    return out


def test_broadcast_weights_generate_the_same_rows_as_the_object_store(
    ray_local, tiny_task, tmp_path, caplog
):
    with caplog.at_level(logging.INFO, logger="rldag.pools"):
        broadcast = generated(tiny_task, tmp_path / "collective", "collective")
    assert "gloo broadcast group of 3 formed" in caplog.text  # trainer + 2 rollout workers
    assert broadcast == generated(tiny_task, tmp_path / "object_store", "object_store")
