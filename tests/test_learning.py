"""The default pipeline learns with its pools on Ray, driven through the Run the flow uses:
mean reward of the last 3 iterations >= 0.8 from a first 3 <= 0.3 (the README's bar). Its
asynchronous version (examples/async.yaml: k = 1, split pools, 32 prompts x 8) keeps the
earlier bar: last 3 >= 0.5 and >= 2x the first 3."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rldag.graph import build_graph
from rldag.run import Run
from rldag.spec import load_pipeline

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def run_rewards(pipeline: Path, runs: Path, task: Path, *overrides: str) -> list[float]:
    """Every iteration's `reward/mean` of `pipeline` run inline on the tiny task in `task`."""
    model, prompts = task / "model", task / "train.parquet"
    paths = [f"storage.uri={runs}", f"model.path={model}", f"nodes.prompts.params.path={prompts}"]
    loaded = load_pipeline(pipeline, [*paths, *overrides])
    run = Run.start(loaded, build_graph(loaded))
    run.run_inline()
    return pq.read_table(Path(run.uri) / "metrics.parquet")["reward/mean"].to_pylist()


@pytest.mark.parametrize(
    ("pipeline", "bar"), [("pipeline.yaml", 0.8), ("examples/async.yaml", 0.5)]
)
def test_default_pipeline_learns_addition(ray_local, tiny_task, tmp_path, pipeline, bar):
    rewards = run_rewards(ROOT / pipeline, tmp_path, tiny_task)
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert first <= 0.3, rewards
    assert last >= bar and last >= 2 * first, rewards
