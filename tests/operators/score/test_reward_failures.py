"""A reward function that raises, hangs or returns something that is not a number never
ends a run with a bare traceback: `on_error: fail` names the node, iteration, row, function
and what went wrong; `zero` keeps the row at reward 0; `drop` removes it and GRPO uses the
rest of its group; the counts reach the metrics. Run by the inline driver (no Prefect)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from rldag.config.errors import RunError
from tests.support.hostile import bad_row_pipeline, only_run, reward_pipeline, run_in_process

ROW = "row 6 (prompt_id 5, sample_idx 2)"


@pytest.fixture(autouse=True)
def _reward_modules_importable(tmp_path, monkeypatch):
    """User code (`module:function`) is imported from the working directory."""
    monkeypatch.chdir(tmp_path)


def _fails(write_yaml, tmp_path, dataset, action: str, **params) -> str:
    doc = bad_row_pipeline(tmp_path, dataset, action, **params)
    with pytest.raises(RunError) as info:
        run_in_process(write_yaml(doc))
    return str(info.value)


def test_a_raising_reward_fails_the_run_naming_node_iteration_row_and_function(
    write_yaml, tmp_path, dataset
):
    message = _fails(write_yaml, tmp_path, dataset, 'raise ValueError("bad row")')
    assert f"node 'score' iteration 1, {ROW}: reward function user_reward_" in message
    assert ":compute_score raised ValueError: bad row (at " in message
    assert ".py:5 in compute_score)" in message  # the line that raised
    assert "nodes.score.params.on_error: zero or drop" in message
    run = only_run(tmp_path)
    assert (run.run_dir / "iter=0" / "advantage.parquet").is_file()  # iteration 0 is kept
    assert not (run.run_dir / "iter=1" / "score.parquet").exists()
    assert run.metric("score/score/errors") == [0.0]


@pytest.mark.parametrize(
    ("action", "said"),
    [
        ('return float("nan")', "returned nan (expected a finite number"),
        ("return -math.inf", "returned -inf (expected a finite number"),
        ("return None", "returned None (expected a finite number"),
        ('return "1.0"', "returned a str '1.0' (expected a finite number"),
        ('return {"acc": 1.0}', "returned a dict without 'score' (keys: acc)"),
        ('return {"score": "high"}', "returned a dict whose 'score' is a str 'high'"),
    ],
)
def test_a_reward_that_returns_no_number_fails_saying_what_it_returned(
    write_yaml, tmp_path, dataset, action, said
):
    message = _fails(write_yaml, tmp_path, dataset, action)
    assert f"node 'score' iteration 1, {ROW}: reward function user_reward_" in message
    assert f":compute_score {said}" in message


def test_on_error_zero_gives_the_row_reward_0_and_counts_it(write_yaml, tmp_path, dataset):
    doc = bad_row_pipeline(tmp_path, dataset, "return None", on_error="zero")
    run = run_in_process(write_yaml(doc))
    scored = run.table("score", 1)
    expected = [0.0, 1.0, 2.0, 3.0] * 4
    expected[6] = 0.0
    assert scored["reward"].to_pylist() == expected
    errors = scored["reward_error"].to_pylist()
    assert errors[6].startswith("returned None") and errors[:6] + errors[7:] == [""] * 15
    assert run.table("score", 0)["reward_error"].to_pylist() == [""] * 16
    assert run.metric("score/score/errors") == [0.0, 1.0]
    assert run.metric("score/score/dropped") == [0.0, 0.0]
    assert run.metric("reward/mean") == [1.5, np.mean(expected)]


def _grpo(rewards: list[float]) -> list[float]:
    """GRPO by the published formula: (r - mean) / (std with Bessel's correction + 1e-6)."""
    r = np.array(rewards)
    return list((r - r.mean()) / (r.std(ddof=1) + 1e-6))


def test_on_error_drop_removes_the_row_and_grpo_uses_the_rest_of_its_group(
    write_yaml, tmp_path, dataset
):
    doc = bad_row_pipeline(tmp_path, dataset, 'raise KeyError("x")', on_error="drop")
    run = run_in_process(write_yaml(doc))
    advantage = run.table("advantage", 1)
    assert advantage.num_rows == 15
    ids, samples = advantage["prompt_id"].to_pylist(), advantage["sample_idx"].to_pylist()
    pairs = list(zip(ids, samples, strict=True))
    assert (5, 2) not in pairs and pairs.count((5, 0)) == 1
    group = [i for i, (p, _) in enumerate(pairs) if p == 5]
    assert [advantage["reward"][i].as_py() for i in group] == [0.0, 1.0, 3.0]
    got = [advantage["advantage"][i].as_py() for i in group]
    assert got == pytest.approx(_grpo([0.0, 1.0, 3.0]), abs=1e-6)
    full = [i for i, (p, _) in enumerate(pairs) if p == 4]
    assert [advantage["advantage"][i].as_py() for i in full] == pytest.approx(
        _grpo([0.0, 1.0, 2.0, 3.0]), abs=1e-6
    )
    assert run.metric("score/score/errors") == [0.0, 1.0]
    assert run.metric("score/score/dropped") == [0.0, 1.0]


def test_on_error_drop_fails_when_no_row_is_left(write_yaml, tmp_path, dataset):
    source = """
        def compute_score(data_source, solution_str, ground_truth, extra_info):
            raise RuntimeError("judge is down")
    """
    doc = reward_pipeline(tmp_path, dataset, source, on_error="drop")
    with pytest.raises(RunError) as info:
        run_in_process(write_yaml(doc))
    message = str(info.value)
    assert "node 'score' iteration 0: reward function user_reward_" in message
    assert "failed on all 16 rows, none is left" in message
    assert "row 0 (prompt_id 0, sample_idx 0): raised RuntimeError: judge is down" in message


def test_a_hanging_reward_is_stopped_after_timeout_s_and_the_run_goes_on(
    write_yaml, tmp_path, dataset
):
    doc = bad_row_pipeline(tmp_path, dataset, "while True: pass", on_error="zero", timeout_s=0.5)
    start = time.monotonic()
    run = run_in_process(write_yaml(doc))
    assert time.monotonic() - start < 30
    scored = run.table("score", 1)
    assert scored["reward_error"][6].as_py() == "timed out after 0.5 s (the call was stopped)"
    assert scored["reward"].to_pylist()[5:8] == [1.0, 0.0, 3.0]
    assert run.metric("score/score/errors") == [0.0, 1.0]


def test_a_hanging_reward_fails_the_run_naming_the_row(write_yaml, tmp_path, dataset):
    message = _fails(write_yaml, tmp_path, dataset, "time.sleep(3600)", timeout_s=0.5)
    assert f"node 'score' iteration 1, {ROW}: reward function user_reward_" in message
    assert ":compute_score timed out after 0.5 s (the call was stopped)" in message


def test_timeout_s_0_calls_the_reward_in_the_node_process(write_yaml, tmp_path, dataset):
    pids = {}
    for timeout in (0, 60):
        action = 'return {"score": 1.0, "pid": os.getpid()}'
        doc = bad_row_pipeline(tmp_path, dataset, action, timeout_s=timeout)
        doc["storage"]["uri"] = str(tmp_path / f"runs-{timeout}")
        run = run_in_process(write_yaml(doc))
        infos = run.table("score", 1)["reward_info"].to_pylist()
        pids[timeout] = int(infos[6].split('"pid": ')[1].rstrip("}"))
    assert pids[0] == os.getpid()
    assert pids[60] != os.getpid()
