"""A new user's pool sizes and command-line overrides (issue 28, items 6 and 9): a pool of 0 or
-1 workers is refused naming `pools.<name>.workers`; a bad value given on the command line
(or in an overrides file) is blamed on that `key=value`, not on pipeline.yaml."""

from __future__ import annotations

import pytest

from flows.cli import main
from tests.support.byo import (
    VERL_REWARD,
    assert_refused,
    jsonl,
    pipeline,
    rldag,
    sums,
    user_package,
)
from tests.support.byo import write_pipeline as write


def _path(tmp_path, user_root, **extra) -> str:
    user_package(user_root, {"reward.py": VERL_REWARD})
    doc = pipeline(tmp_path, "my-org/my-llama", jsonl(tmp_path / "train.jsonl", sums()))
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "answer"
    doc.update(extra)
    return str(write(tmp_path, doc))


@pytest.mark.parametrize("workers", [0, -1])
@pytest.mark.parametrize("command", ["validate", "plan", "run"])
def test_a_pool_without_workers_is_refused(command, workers, tmp_path, user_root, capsys):
    path = _path(tmp_path, user_root, pools={"rollout": {"workers": workers}})
    code = main([command, path])
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        f"{path}: pools.rollout.workers: must be >= 1, got {workers}",
    )


@pytest.mark.parametrize(
    ("override", "found"),
    [
        ("iterations=abc", "iterations: Value 'abc'"),
        ("pools.training.workers=0", "pools.training.workers: must be >= 1, got 0"),
        ("nodes.generate.params.n=-2", "nodes.generate.params.n: must be > 0, got -2"),
    ],
)
def test_a_bad_override_is_blamed_on_the_command_line(override, found, tmp_path, user_root, capsys):
    path = _path(tmp_path, user_root)
    for command in (["validate"], ["plan", "--auto", "--costs", "none"]):
        code = main([*command, path, override])
        err = capsys.readouterr().err
        blamed = f"command-line override '{override}': {found}"
        assert_refused(code, err, tmp_path / "runs", blamed)
        assert path not in err  # the file is not to blame


def test_a_bad_value_of_an_overrides_file_names_that_file(tmp_path, user_root, capsys):
    path = _path(tmp_path, user_root)
    overrides = tmp_path / "placement.yaml"
    overrides.write_text("pools:\n  rollout:\n    workers: 0\n")
    code = main(["validate", path, "-f", str(overrides)])
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        f"overrides file {overrides} override 'pools.rollout.workers=0': pools.rollout.workers",
    )


def test_the_real_run_command_exits_2_before_anything_starts(tmp_path, user_root):
    path = _path(tmp_path, user_root)
    result = rldag("run", path, "pools.rollout.workers=0", cwd=tmp_path, user_root=user_root)
    assert_refused(
        result.returncode,
        result.stderr,
        tmp_path / "runs",
        "command-line override 'pools.rollout.workers=0': pools.rollout.workers",
    )
    assert "validating" in result.stdout  # it said what it was doing
