"""The cost model: fits recover known coefficients, the table round-trips, calls scale with
workers; `rldag plan --profile N` measures a real run and stores costs.parquet next to it."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from flows.cli import main
from rldag.config.overrides import read_overrides_file
from rldag.planning.costs import COSTS_FILE, CostModel, NodeCost, fit_linear
from rldag.planning.profiling import count_params
from tests.support.paths import ROOT


def test_fit_recovers_per_row_and_per_token_costs() -> None:
    rows, tokens = [4, 4, 8, 8], [10, 30, 20, 60]
    seconds = [0.5 * r + 0.1 * t for r, t in zip(rows, tokens, strict=True)]
    per_row, per_token = fit_linear(seconds, rows, tokens, by_tokens=True)
    assert per_row == pytest.approx(0.5) and per_token == pytest.approx(0.1)


def test_fit_puts_everything_on_the_primary_term_when_it_cannot_tell_them_apart() -> None:
    # constant rows and tokens: 3 s per call is 3/30 s per token for a generate node
    assert fit_linear([3, 3, 3], [4, 4, 4], [30, 30, 30], by_tokens=True) == (0.0, 0.1)
    assert fit_linear([3, 3, 3], [4, 4, 4], [30, 30, 30], by_tokens=False) == (0.75, 0.0)


def test_a_call_costs_its_fixed_part_plus_its_work_shared_by_workers() -> None:
    cost = NodeCost("g", "generate", "rollout", 1.0, 0.5, 0.01, workers=2, rows=4, tokens=100)
    assert cost.seconds() == pytest.approx(1 + 2 + 1)
    assert cost.seconds(workers=4) == pytest.approx(1 + (2 + 1) / 2)
    assert cost.seconds(rows=8, tokens=0, workers=1) == pytest.approx(1 + 4 * 2)


def test_the_cost_table_round_trips() -> None:
    model = CostModel(
        {"train": NodeCost("train", "train", "training", 0.0, 0.0, 0.002, 1, 32, 900)},
        {"split": 1e-9},
        5000,
        0.04,
        32.0,
        4.0,
    )
    again = CostModel.from_table(model.to_table())
    assert again == model
    assert again.sync_s(split=True) == pytest.approx(5e-6)
    assert again.sync_s(split=False) == pytest.approx(5e-6)  # unmeasured: the measured route


def test_overrides_files_flatten_to_dotlists(tmp_path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("pools:\n  colocate: []\n  rollout: {workers: 2}\nasync:\n  max_staleness: 1\n")
    assert read_overrides_file(path) == [
        "pools.colocate=[]",
        "pools.rollout.workers=2",
        "async.max_staleness=1",
    ]


@pytest.mark.slow
def test_profile_measures_a_run_and_stores_its_costs(ray_local, tiny_task, tmp_path, capsys):
    runs = tmp_path / "runs"
    args = [
        "plan",
        str(ROOT / "pipeline.yaml"),
        f"storage.uri={runs}",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task}/train.parquet",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=8",
        "--profile",
        "3",
    ]
    assert main(args) == 0
    assert "cost model" in capsys.readouterr().out
    (run,) = list(runs.iterdir())
    model = CostModel.from_table(pq.read_table(run / COSTS_FILE))
    assert set(model.nodes) == {"prompts", "generate", "score", "advantage", "train"}
    assert model.nodes["generate"].rows == 8 and model.samples == 64 and model.groups == 8
    assert model.nodes["train"].seconds() > 0 and model.nodes["generate"].seconds() > 0
    assert model.params == count_params(str(tiny_task / "model")) > 0
    assert model.sync_per_param_s["colocated"] > 0  # the default pools share workers
