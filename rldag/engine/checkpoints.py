"""Run-level checkpoints and resume: which iteration is saved, where, and how a stopped run
continues. The operators (trainers) write their own state; this module decides when.

Layout under the run: `checkpoints/iter=<i>/<node>/` (sharded DCP + extras),
`checkpoints/iter=<i>/versions/v<version>.safetensors` (async: the policy versions the next k
generate steps still run on) and `checkpoints/latest.json`, written last, so a crash
mid-checkpoint keeps the previous one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rldag.compute.weights.wire import load_wire, save_wire
from rldag.config.errors import InputError
from rldag.config.spec import PipelineSpec
from rldag.graph.dag import Graph, Node
from rldag.storage.kill_points import kill_point
from rldag.storage.store import Storage

if TYPE_CHECKING:
    from rldag.engine.run import Run

LATEST = "checkpoints/latest.json"


def checkpointed_nodes(graph: Graph) -> list[Node]:
    """Nodes whose operator holds state a checkpoint must save (trainers)."""
    return [n for n in graph.nodes.values() if n.op.checkpointable]


def _node_dir(run: Run, iteration: int, node: str) -> str:
    """Relative to the storage root; trainers get a local path (Storage.local_dir/fetch_dir
    stage it when the storage is an object store)."""
    return f"{run.run_id}/checkpoints/iter={iteration}/{node}"


def due(spec: PipelineSpec, iteration: int) -> bool:
    """Whether a checkpoint is taken after `iteration`: every `checkpoint.every` iterations
    and after the last."""
    every = spec.checkpoint.every
    last = iteration == spec.iterations - 1
    return bool(every) and ((iteration + 1) % every == 0 or last)


def save_node(run: Run, iteration: int, node: Node) -> None:
    """Save a trainer's state right after its step of `iteration` (before its next step can
    start, so the state is exactly that iteration's); with k > 0 also the frozen policy
    versions iterations iteration+1..iteration+k generate on, so a resumed run samples the
    same rows."""
    with run.storage.local_dir(_node_dir(run, iteration, node.name)) as path:
        run.runner.save_checkpoint(node, path)
    kill_point("checkpoint", f"iter={iteration}/{node.name}")
    needed = {v for v in run.snapshots if 0 < v <= iteration}
    if not needed:
        return
    with run.storage.local_dir(f"{run.run_id}/checkpoints/iter={iteration}/versions") as path:
        for version in sorted(needed):
            wire = run.runner.snapshot_to_wire(run.snapshots[version])
            save_wire(str(Path(path) / f"v{version}.safetensors"), wire)


def commit_if_due(run: Run, iteration: int) -> bool:
    """Once `iteration` is complete and stored, make its checkpoint the one to resume from."""
    if not due(run.loaded.spec, iteration):
        return False
    run.storage.write_text(f"{run.run_id}/{LATEST}", json.dumps({"iteration": iteration}))
    return True


def latest(storage: Storage, run_id: str) -> int | None:
    """The last checkpointed iteration of a run, or None."""
    if not storage.exists(f"{run_id}/{LATEST}"):
        return None
    return int(json.loads(storage.read_text(f"{run_id}/{LATEST}"))["iteration"])


def resume(run: Run) -> int:
    """Load the run's last checkpoint into its operators and metrics; return the next
    iteration to run."""
    done = latest(run.storage, run.run_id)
    if done is None:
        raise InputError(
            f"run {run.run_id} has no checkpoint to resume from (set checkpoint.every)",
            path="--resume",
        )
    for node in checkpointed_nodes(run.graph):
        with run.storage.fetch_dir(_node_dir(run, done, node.name)) as path:
            run.runner.load_checkpoint(node, path)
        if run.max_staleness and run.graph.feeds_weights(node.name):
            snapshot = run.runner.snapshot_weights(node)  # the version its step made
            run.snapshots[snapshot.version] = snapshot
    versions = f"{run.run_id}/checkpoints/iter={done}/versions"
    if run.max_staleness and run.storage.exists(versions):
        with run.storage.fetch_dir(versions) as path:
            for file in sorted(Path(path).glob("v*.safetensors")):
                version = int(file.stem[1:])
                run.snapshots[version] = run.runner.snapshot_from_wire(
                    version, load_wire(str(file))
                )
    if run.storage.exists(f"{run.run_id}/metrics.parquet"):
        rows = run.storage.read_table(f"{run.run_id}/metrics.parquet").to_pylist()
        run.metrics = [
            {k: float(v) for k, v in row.items() if v is not None}
            for row in rows
            if row["iteration"] <= done
        ]
    return done + 1


def export_policy(run: Run) -> list[str]:
    """Save each trainer's policy as a plain Hugging Face directory under `<run>/hf/`."""
    out = []
    for node in checkpointed_nodes(run.graph):
        rel = f"{run.run_id}/hf/{node.name}"
        with run.storage.local_dir(rel) as path:
            run.runner.export_hf(node, path)
        out.append(run.storage.uri(rel))
    return out
