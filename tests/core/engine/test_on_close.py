"""The driver's closing hooks (`drive(..., on_close=...)`): they run once the run ends, before
it is closed; a hook's error fails a good run and is only a warning in a failed one. The
reward curve is stored by such a hook, so an inline run without it stores none."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rldag.compute.in_process import InProcessPools
from rldag.config.errors import RunError
from rldag.config.spec import load_pipeline
from rldag.engine.driver import run_inline
from rldag.engine.run import Run
from rldag.graph.dag import build_graph
from rldag.report.reward_curve import REWARD_CURVE, store_reward_curve
from tests.support.pipelines import scoring_pipeline


def _start(write_yaml, dataset: Path, tmp_path: Path, failing: bool = False) -> Run:
    doc = scoring_pipeline(dataset, storage={"uri": str(tmp_path / "runs")}, iterations=2)
    if failing:
        doc["nodes"]["boom"] = {
            "kind": "transform",
            "op": "tests.support.user_code:FAIL_AT_ITERATION_1",
            "inputs": {"rows": "advantage"},
        }
    loaded = load_pipeline(write_yaml(doc))
    return Run.start(loaded, build_graph(loaded), runner=InProcessPools())


def test_hooks_see_the_finished_run_before_it_closes(write_yaml, dataset, tmp_path):
    run = _start(write_yaml, dataset, tmp_path)
    seen = []

    def hook(ended: Run) -> None:
        seen.append((ended is run, len(ended.metrics), ended.lock.current()[1].released))

    run_inline(run, on_close=(hook, store_reward_curve))
    assert seen == [(True, 2, False)]  # both iterations done, the run's lock still held
    assert run.lock.current()[1].released
    assert (Path(run.uri) / REWARD_CURVE).read_bytes()[:4] == b"\x89PNG"


def test_without_the_hook_an_inline_run_stores_no_curve(write_yaml, dataset, tmp_path):
    run = _start(write_yaml, dataset, tmp_path)
    run_inline(run)
    assert not (Path(run.uri) / REWARD_CURVE).exists()
    assert (Path(run.uri) / "metrics.parquet").is_file()


def test_a_failing_hook_fails_a_good_run(write_yaml, dataset, tmp_path):
    def hook(run: Run) -> None:
        raise OSError("storage gone")

    with pytest.raises(OSError, match="storage gone"):
        run_inline(_start(write_yaml, dataset, tmp_path), on_close=(hook,))


def test_in_a_failed_run_a_failing_hook_is_a_warning(write_yaml, dataset, tmp_path, caplog):
    def hook(run: Run) -> None:
        raise OSError("storage gone")

    run = _start(write_yaml, dataset, tmp_path, failing=True)
    with caplog.at_level(logging.WARNING, "rldag.driver"):
        with pytest.raises(RunError, match=r"node 'boom' \(iteration 1\) failed"):
            run_inline(run, on_close=(hook, store_reward_curve))
    assert "closing hook hook of run" in caplog.text and "storage gone" in caplog.text
    assert (Path(run.uri) / REWARD_CURVE).is_file()  # the next hook still ran: iteration 0's
