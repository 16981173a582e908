"""`rldag export`: a stopped run's last checkpoint loaded in this process and its policy
saved as a Hugging Face directory (`<run>/hf/<node>/`), without touching anything else."""

from __future__ import annotations

from rldag.compute.in_process import InProcessPools
from rldag.config.errors import InputError
from rldag.config.spec import LoadedPipeline
from rldag.engine.checkpoints import export_policy, latest, resume
from rldag.engine.run import Run
from rldag.graph.dag import Graph
from rldag.storage.store import open_storage


def export_checkpoint(loaded: LoadedPipeline, graph: Graph, run_id: str) -> list[str]:
    """Load run `run_id`'s last checkpoint in this process and export its policy; the
    exported directories' URIs."""
    storage = open_storage(loaded.spec.storage, loaded.spec.faults)
    if latest(storage, run_id) is None:
        raise InputError(f"run {run_id!r} under {storage.root} has no checkpoint", path="RUN")
    run = Run(loaded, graph, storage, run_id, InProcessPools())
    try:
        resume(run)
        return export_policy(run)
    finally:
        run.runner.close()
