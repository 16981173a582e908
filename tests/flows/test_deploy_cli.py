"""`rldag deploy` checks its input before it touches Prefect (exit 2, nothing registered),
and the flow's `pipeline` parameter accepts a path or the YAML text itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flows.pipeline_param import pipeline_file, pipeline_parameter
from rldag.config.spec import load_pipeline
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline


def _deploy(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(home)  # an empty profile: no API URL configured
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", "deploy", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )


def test_deploy_without_a_prefect_server_exits_2(write_yaml, dataset, tmp_path):
    result = _deploy(str(write_yaml(scoring_pipeline(dataset))), home=tmp_path / "home")
    assert result.returncode == 2, result.stderr
    assert "PREFECT_API_URL" in result.stderr and "Traceback" not in result.stderr


def test_deploy_with_a_bad_pipeline_exits_2_naming_the_key(write_yaml, dataset, tmp_path):
    path = write_yaml(scoring_pipeline(dataset))
    result = _deploy(str(path), "iterations=0", home=tmp_path / "home")
    assert result.returncode == 2 and "iterations" in result.stderr


def test_the_pipeline_parameter_is_a_path_or_the_resolved_text(write_yaml, dataset):
    path = write_yaml(scoring_pipeline(dataset))
    loaded = load_pipeline(path, ["seed=7"])
    assert pipeline_parameter(path, loaded, embed=False) == str(path.resolve())
    text = pipeline_parameter(path, loaded, embed=True)
    assert pipeline_file(str(path)) == path
    again = load_pipeline(pipeline_file(text))
    assert again.spec == loaded.spec and again.resolved_yaml == loaded.resolved_yaml
