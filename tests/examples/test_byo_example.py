"""examples/byo/pipeline.yaml works as its comments say: a new user's directory with their own
model (`./my-llama`), GSM8K-style JSONL (`data/gsm8k.jsonl`) and veRL reward package
(`my_rewards.gsm8k`) validates and runs with the real `rldag` command, unchanged."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.byo import VERL_REWARD, build_model, jsonl, rldag, sums, user_package
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "byo" / "pipeline.yaml"


def _user_directory(tmp_path: Path) -> Path:
    """What the example expects to find where `rldag` runs."""
    build_model(tmp_path / "my-llama")
    (tmp_path / "data").mkdir()
    jsonl(tmp_path / "data" / "gsm8k.jsonl", sums(8))
    user_package(tmp_path, {"gsm8k.py": VERL_REWARD}, name="my_rewards")
    return tmp_path


def test_the_example_validates_in_a_users_directory(tmp_path):
    home = _user_directory(tmp_path)
    result = rldag("validate", str(EXAMPLE), cwd=home, user_root=home)
    assert result.returncode == 0, result.stderr
    assert not (home / "runs").exists()  # validate writes nothing


@pytest.mark.slow
def test_the_example_runs_an_iteration_in_a_users_directory(tmp_path):
    home = _user_directory(tmp_path)
    result = rldag("run", str(EXAMPLE), "iterations=1", cwd=home, user_root=home)
    assert result.returncode == 0, result.stderr
    (run,) = (home / "runs").iterdir()
    scored = pq.read_table(run / "iter=0" / "score.parquet")
    assert scored.num_rows == 8 * 4  # batch_size 8 x n 4
    assert set(scored["ground_truth"].to_pylist()) <= {str(2 * i) for i in range(8)}
