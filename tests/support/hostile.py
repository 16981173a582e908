"""Helpers for tests of bad user code and data: a pipeline whose score node calls a reward
module written by the test, run inline (no Prefect, no Ray) or through the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from rldag.compute.in_process import InProcessPools
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline
from tests.support.runs import StoredRunView, read_run, run_pipeline

# A reward that scores a response "k" as k, except on sample 2 of dataset row 5 (prompt_id
# 5 in iteration 1 with batch_size 4 and no shuffling; row 6 of that iteration's table),
# where it does {action}.
BAD_ON_ONE_ROW = """\
import math, os, time

def compute_score(data_source, solution_str, ground_truth, extra_info):
    if extra_info["index"] == 5 and solution_str == "2":
        {action}
    return float(solution_str)
"""


def reward_module(directory: Path, source: str) -> str:
    """Write `source` as a new module in `directory`; its `module:compute_score` op."""
    name = f"user_reward_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return f"{name}:compute_score"


def reward_pipeline(tmp_path: Path, dataset: Path, source: str, **score_params) -> dict:
    """prompts (4 per iteration, in file order) -> 4 samples each -> score (the reward
    module `source`) -> advantage, 2 iterations, everything in this process."""
    doc = scoring_pipeline(dataset, storage={"uri": str(tmp_path / "runs")}, ray={"enabled": False})
    doc["nodes"]["prompts"]["params"]["shuffle"] = False
    doc["nodes"]["answer"]["op"] = "tests.support.user_code:FOUR_SAMPLES"
    doc["nodes"]["score"]["op"] = reward_module(tmp_path, source)
    doc["nodes"]["score"]["params"] = score_params
    return doc


def bad_row_pipeline(tmp_path: Path, dataset: Path, action: str, **score_params) -> dict:
    """reward_pipeline with BAD_ON_ONE_ROW doing `action` on its row."""
    source = BAD_ON_ONE_ROW.format(action=action)
    return reward_pipeline(tmp_path, dataset, source, **score_params)


def run_in_process(path: Path) -> StoredRunView:
    """Run the pipeline in this process (the inline driver, every node in-process)."""
    return run_pipeline(path, runner=InProcessPools())


def only_run(tmp_path: Path) -> StoredRunView:
    """The one run under `tmp_path/runs`."""
    (run_dir,) = (tmp_path / "runs").iterdir()
    return read_run(run_dir)


def rldag(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m flows.cli ARGS` in `cwd` (user modules there are importable)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
