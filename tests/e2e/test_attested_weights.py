"""Attested weights: every generated row stores the digest of the weights that generated it,
and a rollout worker that does not serve the version it acknowledged stops the run in that
iteration with an error naming the node, the worker, the version and both digests. Faults
injected (tests/support/faulty_engines.py): a worker that keeps its old weights (in process
and on a Ray pool), an adapter left unmerged (LoRA), a broadcast bucket that arrives short
(split Ray pools, the collective transport)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rldag.config.errors import RunError, WeightsMismatch
from tests.support.paths import ROOT
from tests.support.runs import read_run, run_pipeline

FAULTY = "tests.support.faulty_engines"
IN_PROCESS = ("ray.enabled=false",)
SPLIT = ("pools.colocate=[]",)


def _stopped_by(tiny_task: Path, tmp_path: Path, pipeline: str, *extra: str) -> str:
    """Run 3 iterations that must stop at the first weights sync (iteration 1); what
    stopped it. Iteration 0's rows are stored, with their digest, and nothing after."""
    overrides = [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"storage.uri={tmp_path}/runs",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
        "nodes.train.params.lr=0.01",
        *extra,
    ]
    with pytest.raises(RunError) as stopped:
        run_pipeline(ROOT / pipeline, *overrides, iterations=3)
    assert isinstance(stopped.value.__cause__, WeightsMismatch)
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = read_run(run_dir)
    assert run.metric("iteration") == [0]  # stopped within the iteration it loaded
    assert run.iterations() == [0, 1]  # iteration 1's prompts, nothing it generated
    assert not (run_dir / "iter=1" / "generate.parquet").exists()
    (digest,) = set(run.table("generate", 0)["weights_digest"].to_pylist())
    assert re.fullmatch("[0-9a-f]{16}", digest)
    return str(stopped.value)


def _named(message: str, worker: str) -> tuple[str, str]:
    """The digests an error names for `worker` at version 1: (loaded, published)."""
    pattern = (
        r"node 'generate': rollout worker (\S+) loaded policy version 1 with weights digest "
        r"([0-9a-f]{16}), but the trainer published ([0-9a-f]{16}) for that version"
    )
    found = re.search(pattern, message)
    assert found, message
    assert found[1] == worker
    assert found[2] != found[3]
    return found[2], found[3]


@pytest.mark.parametrize(
    ("placement", "worker"),
    [(IN_PROCESS, "driver"), (SPLIT, "rollout[0]")],
    ids=["in-process", "ray"],
)
def test_a_worker_that_keeps_its_old_weights_stops_the_run(
    ray_local, tiny_task, tmp_path, placement, worker
):
    message = _stopped_by(
        tiny_task, tmp_path, "pipeline.yaml", f"nodes.generate.op={FAULTY}:STALE_ENGINE", *placement
    )
    loaded, _ = _named(message, worker)
    (run_dir,) = (tmp_path / "runs").iterdir()
    # what it serves is still version 0: the digest its iteration-0 rows carry
    assert {loaded} == set(read_run(run_dir).table("generate", 0)["weights_digest"].to_pylist())


def test_an_adapter_left_unmerged_stops_the_run(tiny_task, tmp_path):
    message = _stopped_by(
        tiny_task, tmp_path, "examples/lora.yaml", f"nodes.generate.op={FAULTY}:UNMERGED_ENGINE",
        *IN_PROCESS,
    )  # fmt: skip
    _named(message, "driver")


def test_a_broadcast_bucket_that_arrives_short_stops_the_run(ray_local, tiny_task, tmp_path):
    message = _stopped_by(
        tiny_task, tmp_path, "pipeline.yaml", f"nodes.generate.op={FAULTY}:TRUNCATED_ENGINE",
        *SPLIT, "weights.transport=collective",
    )  # fmt: skip
    _named(message, "rollout[0]")
