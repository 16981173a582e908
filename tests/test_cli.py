"""The `rldag` command: bad input exits 2 with the key path and no traceback, nothing is
written; validate and plan describe a good pipeline without running it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from rldag.cli import main
from tests.conftest import scoring_pipeline

ROOT = Path(__file__).resolve().parents[1]


def _rldag(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rldag.cli", *args], cwd=cwd, capture_output=True, text=True
    )


def test_validate_and_plan_describe_a_good_pipeline(write_yaml, dataset, capsys):
    path = write_yaml(scoring_pipeline(dataset))
    assert main(["validate", str(path)]) == 0
    assert "4 nodes, 3 edges" in capsys.readouterr().out
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    order = [out.index(f" {name}  kind=") for name in ("prompts", "answer", "score", "advantage")]
    assert order == sorted(order)
    assert "rollouts <- answer  (needs response, data_source, ground_truth, extra_info)" in out
    assert "out  reward, reward_info" in out and "pool=driver" in out


def test_bad_input_exits_2_naming_the_key_path_without_traceback(write_yaml, dataset, tmp_path):
    doc = scoring_pipeline(dataset, storage={"uri": str(tmp_path / "runs")})
    doc["nodes"]["advantage"]["params"] = {"norm_by_std": "sometimes"}
    path = write_yaml(doc)
    for command in ("validate", "plan", "run"):
        result = _rldag(command, str(path))
        assert result.returncode == 2, result.stderr
        assert "nodes.advantage.params.norm_by_std" in result.stderr
        assert str(path) in result.stderr
        assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "runs").exists()  # nothing written


def test_bad_override_exits_2(write_yaml, dataset):
    path = write_yaml(scoring_pipeline(dataset))
    result = _rldag("run", str(path), "iterations=lots")
    assert result.returncode == 2
    assert "command line" not in result.stderr or "iterations" in result.stderr
    assert "iterations" in result.stderr and "Traceback" not in result.stderr


def test_the_default_pipeline_is_valid_yaml_with_the_documented_nodes():
    doc = yaml.safe_load((ROOT / "pipeline.yaml").read_text())
    kinds = {name: node["kind"] for name, node in doc["nodes"].items()}
    assert set(kinds.values()) == {"source", "generate", "score", "transform", "train"}
    assert doc["nodes"]["generate"]["inputs"]["weights"] == "train"
