"""Bad reward functions under the real product path: `rldag run` (Prefect, the CLI's
error handling) exits 1 naming the row without a traceback, or finishes with the failures
counted in the stored metrics; and GRPO groups with dropped samples train."""

from __future__ import annotations

import pytest

from rldag.compute.in_process import InProcessPools
from tests.support.hostile import bad_row_pipeline, only_run, reward_module, rldag
from tests.support.paths import ROOT
from tests.support.runs import run_pipeline

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
    assert only_run(tmp_path).metric("iteration") == [0]  # iteration 0 kept


@REPORTING
def test_rldag_run_with_a_hanging_reward_finishes_and_counts_it(write_yaml, tmp_path, dataset):
    doc = bad_row_pipeline(tmp_path, dataset, "while True: pass", on_error="zero", timeout_s=1)
    result = rldag("run", str(write_yaml(doc)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = only_run(tmp_path)
    assert run.metric("score/score/errors") == [0.0, 1.0]
    assert run.table("score", 1)["reward_error"][6].as_py().startswith("timed out after 1 s")


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
    run = run_pipeline(ROOT / "pipeline.yaml", *overrides, runner=InProcessPools())
    for i in range(2):
        advantage = run.table("advantage", i)
        assert advantage.num_rows == 24
        assert set(advantage["sample_idx"].to_pylist()) == {0, 2, 3}
        train = run.table("train", i)
        assert train["policy_version"].to_pylist() == [i + 1]
        assert all(loss == loss for loss in train["loss"].to_pylist())  # finite, not NaN
    assert run.metric("score/score/dropped") == [8.0, 8.0]
    assert run.metric("score/score/errors") == [8.0, 8.0]
