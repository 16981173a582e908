"""`rldag inspect`: a stored run's iterations, nodes and row counts, its metrics table, and
sample rows of one node's table; a run id or a URI; bad input exits 2 naming the option."""

from __future__ import annotations

import pyarrow as pa
import pytest

from flows.cli import main
from rldag.storage.store import Storage

RUN = "demo-20260101-000000-abcd"


@pytest.fixture
def runs(tmp_path):
    """A stored run of 2 iterations: nodes prompts (3 rows) and score (6 rows), metrics."""
    store = Storage(str(tmp_path / "runs"))
    store.write_text(
        f"{RUN}/pipeline.yaml", "name: demo\niterations: 3\nnodes: {prompts: {}, score: {}}\n"
    )
    for i in range(2):
        prompts = pa.table({"prompt_id": [3 * i, 3 * i + 1, 3 * i + 2], "prompt": ["a", "b", "c"]})
        store.write_table(f"{RUN}/iter={i}/prompts.parquet", prompts)
        score = pa.table({"response": ["x" * 100] * 6, "reward": [float(i)] * 6})
        store.write_table(f"{RUN}/iter={i}/score.parquet", score)
    metrics = pa.table({"iteration": [0, 1], "reward/mean": [0.25, 0.75], "timing_s/x": [1.0, 2.0]})
    store.write_table(f"{RUN}/metrics.parquet", metrics)
    return tmp_path / "runs"


def test_a_run_id_under_storage_shows_row_counts_and_metrics(runs, capsys):
    assert main(["inspect", RUN, "--storage", f"file://{runs}"]) == 0
    out = capsys.readouterr().out
    assert "2 of 3 iterations stored" in out
    assert out.index("prompts") < out.index("score")  # pipeline order
    lines = [line for line in out.splitlines() if line.startswith("│")]
    assert [line.split("│")[1:4] for line in lines[:2]] == [
        ["    0 ", "       3 ", "     6 "],
        ["    1 ", "       3 ", "     6 "],
    ]
    assert "reward/mean" in out and "0.75" in out and "timing_s/x" not in out


def test_a_run_uri_works_like_its_id(runs, capsys):
    assert main(["inspect", f"file://{runs}/{RUN}", "--metrics", "timing_s/x"]) == 0
    out = capsys.readouterr().out
    assert "timing_s/x" in out and "reward/mean" not in out


def test_sample_rows_of_a_node(runs, capsys):
    args = ["inspect", str(runs / RUN), "--node", "score", "--iter", "0", "--rows", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "score, iteration 0: 2 of 6 rows" in out
    assert "x" * 59 + "…" in out  # long cells are cut


def test_sample_rows_default_to_the_last_iteration(runs, capsys):
    assert main(["inspect", str(runs / RUN), "--node", "prompts", "--columns", "prompt_id"]) == 0
    out = capsys.readouterr().out
    assert "prompts, iteration 1: 3 of 3 rows" in out and "│ 5 " in out and "prompt " not in out


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--node", "train"], "--node"),
        (["--node", "score", "--iter", "7"], "--iter"),
        (["--node", "score", "--columns", "nope"], "--columns"),
        (["--metrics", "nope"], "--metrics"),
    ],
)
def test_bad_options_exit_2_naming_the_option(runs, capsys, args, option):
    assert main(["inspect", str(runs / RUN), *args]) == 2
    assert f"error: {option}:" in capsys.readouterr().err


def test_an_unknown_run_exits_2(runs, capsys):
    assert main(["inspect", "nope", "--storage", str(runs)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
