"""async.max_staleness: k = 0 stores what the synchronous loop stored before the scheduler
existed; for k > 0 the bound holds on every stored row; score starts on generate's first
chunk; impossible placements are refused; an async run learns."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.cli import main
from rldag.events import NodeFinished, NodeStarted, add_listener
from rldag.graph import build_graph
from rldag.pools import InProcessPools
from rldag.run import Run
from rldag.spec import load_pipeline

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "sync_reference.yaml"  # recorded before the scheduler


def run_reference(tmp_path: Path, *overrides: str, in_process: bool = False) -> Path:
    loaded = load_pipeline(REFERENCE, [f"storage.uri=file://{tmp_path}/runs", *overrides])
    run = Run.start(loaded, build_graph(loaded), InProcessPools() if in_process else None)
    run.run_inline()
    return Path(run.uri)


def stored_rows(run_dir: Path, node: str, iterations: int = 4) -> dict[tuple, dict]:
    return {
        (i, r["prompt_id"], r["sample_idx"]): r
        for i in range(iterations)
        for r in pq.read_table(run_dir / f"iter={i}" / f"{node}.parquet").to_pylist()
    }


@pytest.mark.parametrize("where", ["ray", "in-process"])
def test_k0_stores_the_rows_and_metrics_of_the_synchronous_loop(ray_local, tmp_path, where):
    run_dir = run_reference(tmp_path, "async.chunk_groups=3", in_process=where == "in-process")
    got = stored_rows(run_dir, "advantage")
    reference = pq.read_table(ROOT / "tests" / "data" / "sync_reference.parquet").to_pylist()
    assert len(got) == len(reference) == 4 * 8 * 4
    for ref in reference:
        row = got[(ref["iteration"], ref["prompt_id"], ref["sample_idx"])]
        for key in ("response", "reward", "policy_version"):
            assert row[key] == ref[key], (ref, key)
        assert row["advantage"] == pytest.approx(ref["advantage"], abs=1e-6)
    metrics = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    expected = json.loads((ROOT / "tests" / "data" / "sync_reference_metrics.json").read_text())
    for row, ref in zip(metrics, expected, strict=True):
        for key, value in ref.items():
            assert row[key] == pytest.approx(value, abs=1e-5), key
        assert row["staleness/max"] == 0.0


@pytest.mark.parametrize("k", [1, 2])
def test_the_staleness_bound_holds_on_every_stored_row(ray_local, tmp_path, k):
    iterations = 5
    run_dir = run_reference(
        tmp_path, f"async.max_staleness={k}", "pools.colocate=[]", f"iterations={iterations}"
    )
    for i in range(iterations):
        generated = pq.read_table(run_dir / f"iter={i}" / "generate.parquet")
        assert set(generated["policy_version"].to_pylist()) == {max(0, i - k)}
        trained = pq.read_table(run_dir / f"iter={i}" / "advantage.parquet")
        # Train step i runs policy version i: every row it trains on is at most k behind.
        lags = {i - v for v in trained["policy_version"].to_pylist()}
        assert lags == {min(i, k)} and max(lags) <= k
        assert (
            pq.read_table(run_dir / f"iter={i}" / "train.parquet")["policy_version"][0].as_py()
            == i + 1
        )
    metrics = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    assert [m["staleness/max"] for m in metrics] == [float(min(i, k)) for i in range(iterations)]


def test_score_starts_on_the_first_chunk_before_generate_finishes(tiny_task, tmp_path, monkeypatch):
    times: dict[tuple[str, str], float] = {}

    def listen(event: object) -> None:
        if isinstance(event, NodeStarted):
            times[(event.node, "start")] = time.perf_counter()
        elif isinstance(event, NodeFinished):
            times[(event.node, "end")] = time.perf_counter()
            times[(event.node, "chunks")] = event.chunks

    scored_at = tmp_path / "scored_at.txt"
    monkeypatch.setenv("SCORED_AT", str(scored_at))
    remove = add_listener(listen)
    try:
        run_dir = run_reference(
            tmp_path,
            "iterations=1",
            "async.chunk_groups=2",
            "nodes.score.op=tests.user_code:timed_score",
            "nodes.generate.params.max_batch_size=8",  # 2 groups decode at a time: 4 waves
            "nodes.generate.params.max_new_tokens=8",
            in_process=True,
        )
    finally:
        remove()
    assert times[("generate", "chunks")] == 4 and times[("score", "chunks")] == 4
    assert times[("score", "start")] < times[("generate", "end")]
    scored = [float(line) for line in scored_at.read_text().split()]
    assert times[("generate", "start")] < min(scored) < times[("generate", "end")]
    assert len(scored) == 8 * 4
    # Streaming reorders nothing that is stored: rows in prompt order.
    stored = pq.read_table(run_dir / "iter=0" / "score.parquet")
    keys = list(zip(stored["prompt_id"].to_pylist(), stored["sample_idx"].to_pylist(), strict=True))
    assert keys == sorted(keys)


def test_validate_refuses_async_on_colocated_training_and_rollout(capsys):
    code = main(["validate", str(REFERENCE), "async.max_staleness=1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "async.max_staleness" in err and "share workers" in err
    assert "pools.colocate=[]" in err and "Traceback" not in err
    assert main(["validate", str(REFERENCE), "async.max_staleness=1", "pools.colocate=[]"]) == 0
