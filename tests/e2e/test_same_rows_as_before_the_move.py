"""Behaviour unchanged by issue 29's floor-plan move: the default pipeline, run by the code of
the commit before the move and by this checkout on the same machine, stores the same rows and
metrics (measured times left out; scripts/compare_runs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

BEFORE_THE_MOVE = "384a0d7"  # main just before the floor-plan move (issue 29)
ITERATIONS = 4


def git(*args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, **kwargs)


def run_default(tree: Path, runs: Path) -> Path:
    """`rldag run pipeline.yaml` with `tree`'s code; the run's directory."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    overrides = [f"iterations={ITERATIONS}", f"storage.uri=file://{runs}"]
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "pipeline.yaml", *overrides],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    return run


def test_the_default_pipeline_stores_what_it_stored_before_the_move(tmp_path: Path) -> None:
    if git("cat-file", "-e", f"{BEFORE_THE_MOVE}^{{commit}}").returncode != 0:
        shallow = git("rev-parse", "--is-shallow-repository", text=True).stdout.strip()
        pytest.skip(f"commit {BEFORE_THE_MOVE} is not in this clone (shallow: {shallow})")
    before = tmp_path / "before"
    archive = git("archive", BEFORE_THE_MOVE, check=True).stdout
    before.mkdir()
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
    (before / ".cache").symlink_to(ROOT / ".cache")  # the same shipped models, installed
    old = run_default(before, tmp_path / "runs-before")
    new = run_default(ROOT, tmp_path / "runs-after")
    compare = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare_runs.py"), str(old), str(new)]
        + ["--added", "weights_digest"],  # issue 33: generated rows store it since
        capture_output=True,
        text=True,
    )
    assert compare.returncode == 0, compare.stdout
    assert f"{ITERATIONS * 5} tables" in compare.stdout
