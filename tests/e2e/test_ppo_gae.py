"""PPO with a critic (examples/ppo_gae.yaml) learns the default task, the policy waits for
the critic's warm-up, and a stopped run resumes from its checkpoint (policy and critic)
into exactly the run that never stopped (SIGKILL and `--resume` through the CLI are the same
checkpoint path: tests/e2e/test_resume.py)."""

from __future__ import annotations

from pathlib import Path

from rldag.config.spec import load_pipeline
from rldag.engine import checkpoints
from rldag.engine.driver import InlineLauncher, drive
from rldag.engine.run import Run
from rldag.graph.dag import build_graph
from tests.support import learning_runs
from tests.support.paths import ROOT
from tests.support.runs import read_run, run_pipeline

EXAMPLE = ROOT / "examples" / "ppo_gae.yaml"


def overrides(tiny_task: Path, storage: Path, *extra: str) -> list[str]:
    return [
        "ray.enabled=false",
        f"storage.uri={storage}",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        *extra,
    ]


def iterate(run: Run, start: int, stop: int) -> None:
    """Iterations [start, stop) through the driver both drivers share (checkpoints when
    due), then the run is closed."""
    drive(run, InlineLauncher(run), start, stop)


def test_ppo_with_gae_learns_the_default_task(tmp_path):
    """Last 3 iterations >= 0.35 and >= 2x the first 3. Measured from the shipped policy
    (bench/learning_spread.py --scenarios ppo_gae, seeds 0-4 under AVX-512 and AVX2 kernels,
    seeds 0-2 under scalar ones, 13 runs, 2026-12): first 3 0.130-0.159, last 3 0.406-0.465,
    2.63-3.31x; the critic's mean value at the end 0.35-0.46."""
    curve = learning_runs.ppo_gae(tmp_path)
    first, last = curve.first(), curve.last()
    assert last >= 0.35 and last >= 2 * first, curve.values
    run = read_run(curve.run_dir)
    versions = [set(run.table("generate", i)["policy_version"].to_pylist()) for i in range(4)]
    assert versions == [{0}, {0}, {0}, {1}]  # critic_warmup: 2 -> the policy first trains at 2
    assert curve.extra["critic_value"] > 0.2  # the critic learned


def test_a_stopped_ppo_run_resumes_identically(tiny_task, tmp_path):
    extra = ("iterations=4", "checkpoint.every=2", "nodes.prompts.params.batch_size=8")
    extra += ("nodes.generate.params.n=4", "nodes.train.params.critic_warmup=1")
    loaded = load_pipeline(EXAMPLE, overrides(tiny_task, tmp_path / "stopped", *extra))
    graph = build_graph(loaded)
    first = Run.start(loaded, graph)
    iterate(first, 0, 3)  # checkpoints after iteration 1; iteration 2 is lost
    resumed = Run.start(loaded, graph, run_id=first.run_id)
    start = checkpoints.resume(resumed)
    assert start == 2
    iterate(resumed, start, 4)

    whole = run_pipeline(EXAMPLE, *overrides(tiny_task, tmp_path / "ref", *extra))  # 0..3
    stored = read_run(resumed.uri)
    for i in range(4):
        for node in ("values", "advantage", "critic", "train"):
            got = stored.table(node, i)
            want = whole.table(node, i)
            keep = [c for c in want.column_names if not c.endswith("tokens_per_s")]
            assert got.select(keep).equals(want.select(keep)), (i, node)
    assert (Path(resumed.uri) / "hf" / "critic" / "value_head.pt").is_file()  # exported too
