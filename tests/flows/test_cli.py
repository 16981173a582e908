"""The `rldag` command: bad input exits 2 with the key path and no traceback, nothing is
written; validate and plan describe a good pipeline without running it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.cli import main
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline


def _rldag(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=cwd, capture_output=True, text=True
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


def test_bad_input_exits_2_naming_the_key_path_without_traceback(
    write_yaml, dataset, tmp_path, capsys
):
    doc = scoring_pipeline(dataset, storage={"uri": str(tmp_path / "runs")})
    doc["nodes"]["advantage"]["params"] = {"norm_by_std": "sometimes"}
    path = write_yaml(doc)

    def check(code: int, out: str, err: str) -> None:
        assert code == 2, err
        assert "nodes.advantage.params.norm_by_std" in err and str(path) in err
        assert "Traceback" not in err + out

    for command in ("validate", "plan"):  # the CLI's entry point, in this process
        code = main([command, str(path)])
        check(code, *capsys.readouterr())
    result = _rldag("run", str(path))  # and the real process's exit status
    check(result.returncode, result.stdout, result.stderr)
    assert not (tmp_path / "runs").exists()  # nothing written


def test_bad_override_exits_2(write_yaml, dataset, tmp_path):
    path = write_yaml(scoring_pipeline(dataset, storage={"uri": f"file://{tmp_path}/runs"}))
    result = _rldag("run", str(path), "iterations=lots")
    assert result.returncode == 2
    # names the override, the key and the bad value; nothing written
    assert re.search(r"override 'iterations=lots': iterations: .*'lots'", result.stderr)
    assert "Traceback" not in result.stderr and not (tmp_path / "runs").exists()


def test_the_default_pipeline_is_valid_yaml_with_the_documented_nodes():
    doc = yaml.safe_load((ROOT / "pipeline.yaml").read_text())
    kinds = {name: node["kind"] for name, node in doc["nodes"].items()}
    assert set(kinds.values()) == {"source", "generate", "score", "transform", "train"}
    assert doc["nodes"]["generate"]["inputs"]["weights"] == "train"


@pytest.mark.usefixtures("prefect_api")  # the run reports to the session's Prefect server
def test_a_failing_node_exits_1_naming_it_and_keeps_finished_iterations(
    write_yaml, dataset, tmp_path, read_run
):
    doc = scoring_pipeline(dataset, storage={"uri": str(tmp_path / "runs")}, iterations=3)
    doc["nodes"]["boom"] = {
        "kind": "transform",
        "op": "tests.support.user_code:FAIL_AT_ITERATION_1",
        "inputs": {"rows": "advantage"},
    }
    result = _rldag("run", str(write_yaml(doc)))
    assert result.returncode == 1
    assert "node 'boom' (iteration 1) failed" in result.stderr
    assert "scorer exploded on purpose" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "iter=0" / "boom.parquet").is_file()
    assert not (run_dir / "iter=1" / "boom.parquet").exists()
    assert read_run(run_dir).metric("iteration") == [0]
