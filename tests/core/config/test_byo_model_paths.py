"""A new user's model path mistakes (issue 28, item 1): a local directory that is not there, or
is not a model directory, is refused by `rldag validate` and `rldag run` naming the key that
gave it; at run time a model that cannot be found fails at once (the hub is offline unless
HF_HUB_OFFLINE=0), naming the node, the path and the cause."""

from __future__ import annotations

import time

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


@pytest.mark.parametrize(
    ("key", "override"),
    [
        ("model.path", "model.path=./models/my-llama"),
        ("nodes.generate.params.model_path", "nodes.generate.params.model_path=../my-llama"),
        ("nodes.train.params.model_path", "nodes.train.params.model_path=/data/ckpt/my-llama"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_missing_model_directory_is_refused_naming_its_key(
    command, key, override, tmp_path, user_root, byo_model, capsys
):
    user_package(user_root, {"reward.py": VERL_REWARD})
    doc = pipeline(tmp_path, str(byo_model), jsonl(tmp_path / "train.jsonl", sums()))
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "answer"
    path = write(tmp_path, doc)
    code = main([command, str(path), override])
    wrong = override.partition("=")[2]
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        f"command-line override '{override}': {key}: model directory not found: '{wrong}'",
        "config.json",
    )


def test_a_directory_that_is_no_model_is_refused(tmp_path, user_root, byo_model, capsys):
    user_package(user_root, {"reward.py": VERL_REWARD})
    weights_only = tmp_path / "my-llama"
    weights_only.mkdir()
    (weights_only / "model.safetensors").write_bytes((byo_model / "model.safetensors").read_bytes())
    doc = pipeline(tmp_path, str(weights_only), jsonl(tmp_path / "train.jsonl", sums()))
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "answer"
    code = main(["validate", str(write(tmp_path, doc))])
    err = capsys.readouterr().err
    assert_refused(code, err, tmp_path / "runs", "model.path:", "has no config.json")


@pytest.mark.slow
def test_a_model_that_cannot_be_found_fails_at_once_naming_node_path_and_cause(tmp_path, user_root):
    """A hub id cannot be checked at validate; the hub is offline, so the run fails within
    seconds of starting its workers instead of retrying the hub for minutes."""
    user_package(user_root, {"reward.py": VERL_REWARD})
    doc = pipeline(tmp_path, "my-org/my-llama", jsonl(tmp_path / "train.jsonl", sums()))
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "answer"
    path = write(tmp_path, doc)
    start = time.monotonic()
    result = rldag("run", str(path), cwd=tmp_path, user_root=user_root, timeout=240)
    out, err = result.stdout, " ".join(result.stderr.split())
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - start < 180
    assert (
        "node 'generate' (iteration 0) failed: cannot load the model from 'my-org/my-llama'" in err
    )
    assert "HF_HUB_OFFLINE=0" in err  # how to let it download
    assert "Traceback" not in result.stderr and "RayTaskError" not in err
    # what it did before: said so, with the run id
    for step in ("validating", "starting the flow run", "starting Ray", "run id:"):
        assert step in out, out
    # the suite's Prefect server, once an earlier test of this worker started it, or its own
    assert "starting Prefect's server" in out or "using the Prefect server at" in out, out
