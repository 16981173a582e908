"""A new user's data (issue 28, items 3 and 8): a file without `ground_truth` (GSM8K-style
`answer`, veRL parquet without `reward_model`) is refused when the reward reads ground_truth,
naming the file and its columns; `ground_truth_key` names the answer column (a struct's field
too); a `batch_size` larger than the file is refused naming both numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from operators.source.dataset import DatasetParams, DatasetSource
from rldag.graph.operator import NodeContext
from tests.support.byo import (
    VERL_REWARD,
    assert_refused,
    chat_rows,
    jsonl,
    pipeline,
    sums,
    user_package,
    verl_parquet,
)
from tests.support.byo import write_pipeline as write

FORMAT_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip().isdigit())  # the answer's format, not its value
"""


def _doc(tmp_path: Path, user_root: Path, data: Path, reward: str = VERL_REWARD) -> dict:
    user_package(user_root, {"reward.py": reward})
    return pipeline(tmp_path, "my-org/my-llama", data)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_gsm8k_style_file_is_refused_naming_its_columns(command, tmp_path, user_root, capsys):
    data = jsonl(tmp_path / "gsm8k.jsonl", sums())
    code = main([command, str(write(tmp_path, _doc(tmp_path, user_root, data)))])
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        "nodes.score.inputs.rollouts: reward function mypkg.reward:compute_score reads "
        f"ground_truth, but its input has none: {data} has no answer column",
        "(columns: prompt, answer)",
        "params.ground_truth_key",
    )


def test_a_verl_parquet_without_reward_model_is_refused(tmp_path, user_root, byo_model, capsys):
    data = verl_parquet(tmp_path / "train.parquet", chat_rows(with_answer=False))
    doc = _doc(tmp_path, user_root, data)
    doc["model"]["path"] = str(byo_model)  # chat prompts: its chat template is checked too
    code = main(["validate", str(write(tmp_path, doc))])
    err = capsys.readouterr().err
    assert_refused(code, err, tmp_path / "runs", f"{data} has no answer column")
    assert "columns: data_source, prompt, ability" in " ".join(err.split())


def test_ground_truth_key_names_the_answer_column(tmp_path, user_root, capsys):
    data = jsonl(tmp_path / "gsm8k.jsonl", sums(4))
    doc = _doc(tmp_path, user_root, data)
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "answer"
    assert main(["validate", str(write(tmp_path, doc))]) == 0, capsys.readouterr().err
    source = DatasetSource(DatasetParams(path=str(data), batch_size=4, ground_truth_key="answer"))
    batch = source({}, NodeContext("prompts", 0, 0, ""))
    assert sorted(batch["ground_truth"].to_pylist()) == ["0", "2", "4", "6"]
    assert "answer" not in batch.column_names  # renamed, as the prompt column is


def test_ground_truth_key_reaches_into_a_struct(tmp_path):
    rows = [{**r, "meta": {"answer": str(2 * i), "level": 1}} for i, r in enumerate(chat_rows(4))]
    data = verl_parquet(tmp_path / "train.parquet", rows)
    params = DatasetParams(path=str(data), batch_size=4, ground_truth_key="meta.answer")
    batch = DatasetSource(params)({}, NodeContext("prompts", 0, 0, ""))
    assert sorted(batch["ground_truth"].to_pylist()) == ["0", "2", "4", "6"]


def test_a_ground_truth_key_the_file_lacks_is_refused(tmp_path, user_root, capsys):
    data = jsonl(tmp_path / "gsm8k.jsonl", sums())
    doc = _doc(tmp_path, user_root, data)
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "solution"
    code = main(["validate", str(write(tmp_path, doc))])
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        f"nodes.prompts.params.ground_truth_key: {data} has no column 'solution' "
        "(columns: prompt, answer)",
    )


def test_a_reward_that_ignores_ground_truth_needs_no_answers(tmp_path, user_root, capsys):
    data = jsonl(tmp_path / "prompts.jsonl", [{"prompt": f"{i}+{i}="} for i in range(4)])
    doc = _doc(tmp_path, user_root, data, FORMAT_REWARD)
    assert main(["validate", str(write(tmp_path, doc))]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_batch_larger_than_the_file_is_refused_naming_both_numbers(
    command, tmp_path, user_root, capsys
):
    data = jsonl(tmp_path / "gsm8k.jsonl", sums(3))
    doc = _doc(tmp_path, user_root, data)
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "answer"
    code = main([command, str(write(tmp_path, doc))])
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        f"nodes.prompts.params.batch_size: {data} has 3 rows, fewer than the 4 prompts an "
        "iteration takes",
        "set batch_size to at most 3",
    )
