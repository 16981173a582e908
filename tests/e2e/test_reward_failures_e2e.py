"""Bad reward functions under the real product path: `rldag run` (Prefect, the CLI's
error handling) exits 1 naming the row without a traceback, or finishes with the failures
counted in the stored metrics; and GRPO groups with dropped samples train."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rldag.compute.in_process import InProcessPools
from rldag.config.spec import load_pipeline
from rldag.engine.run import Run
from rldag.graph.dag import build_graph
from tests.support.hostile import (
    bad_row_pipeline,
    metrics,
    only_run_dir,
    reward_module,
    rldag,
    table,
)
from tests.support.paths import ROOT

REPORTING = pytest.mark.usefixtures("prefect_api")  # `rldag run` reports to the session server


@REPORTING
def test_rldag_run_with_a_raising_reward_exits_1_naming_the_row(write_yaml, tmp_path, dataset):
    doc = bad_row_pipeline(tmp_path, dataset, 'raise ZeroDivisionError("no")')
    result = rldag("run", str(write_yaml(doc)), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    err = result.stderr.replace("\n", "")
    assert "run failed: node 'score' (iteration 1) failed" in err
    assert "row 6 (prompt_id 5, sample_idx 2): reward function user_reward_" in err
    assert "raised ZeroDivisionError: no" in err
    assert "Traceback" not in result.stdout + result.stderr
    assert metrics(only_run_dir(tmp_path), "iteration") == [0]  # iteration 0 kept


@REPORTING
def test_rldag_run_with_a_hanging_reward_finishes_and_counts_it(write_yaml, tmp_path, dataset):
    doc = bad_row_pipeline(tmp_path, dataset, "while True: pass", on_error="zero", timeout_s=1)
    result = rldag("run", str(write_yaml(doc)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    assert metrics(run_dir, "score/score/errors") == [0.0, 1.0]
    assert table(run_dir, 1, "score")["reward_error"][6].as_py().startswith("timed out after 1 s")


COUNTING_REWARD = """
import itertools

from operators.score.rewards.arithmetic import compute_score as arithmetic

_calls = itertools.count()


def compute_score(data_source, solution_str, ground_truth, extra_info):
    # Rows come in groups of 4 samples: every group loses its sample 1.
    if next(_calls) % 4 == 1:
        raise RuntimeError("flaky judge")
    return arithmetic(data_source, solution_str, ground_truth, extra_info)
"""


def test_grpo_groups_with_dropped_samples_train(tiny_task, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = [
        "iterations=2",
        "ray.enabled=false",
        f"storage.uri={tmp_path}/runs",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
        f"nodes.score.op={reward_module(tmp_path, COUNTING_REWARD)}",
        "nodes.score.params.on_error=drop",
    ]
    loaded = load_pipeline(ROOT / "pipeline.yaml", overrides)
    run = Run.start(loaded, build_graph(loaded), runner=InProcessPools())
    run.run_inline()
    run_dir = tmp_path / "runs" / run.run_id
    for i in range(2):
        advantage = table(run_dir, i, "advantage")
        assert advantage.num_rows == 24
        assert set(advantage["sample_idx"].to_pylist()) == {0, 2, 3}
        train = pq.read_table(run_dir / f"iter={i}" / "train.parquet")
        assert train["policy_version"].to_pylist() == [i + 1]
        assert all(loss == loss for loss in train["loss"].to_pylist())  # finite, not NaN
    assert metrics(run_dir, "score/score/dropped") == [8.0, 8.0]
    assert metrics(run_dir, "score/score/errors") == [8.0, 8.0]
