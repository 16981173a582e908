"""The RL loop as Prefect flows: one flow per run, one `iteration-<i>` subflow per iteration,
one task run per node wired by futures so the flow-run graph is the pipeline's DAG."""

from __future__ import annotations

import time
from typing import Annotated

from prefect import flow
from pydantic import Field

from flows.artifacts import (
    Progress,
    iteration_rollouts,
    publish_iteration,
    publish_reward_curve,
)
from flows.pipeline_param import pipeline_file
from flows.run_logs import forward_rldag_logs
from flows.settings import without_heartbeats
from flows.tracking import tracking
from rldag import checkpoints
from rldag.graph import build_graph
from rldag.run import Run, get_run, notify
from rldag.spec import load_pipeline
from rldag.storage import TableHandle
from tasks.nodes import node_task


@flow(flow_run_name="iteration-{iteration}", validate_parameters=False, persist_result=False)
def iteration_flow(run_id: str, iteration: int, weights: TableHandle | None) -> TableHandle | None:
    """Submit every node of the iteration in order; return the train node's handle."""
    run = get_run(run_id)
    start = time.perf_counter()
    futures = {}
    for name, node in run.graph.nodes.items():
        upstream = {port: futures[up] for port, up in node.inputs.items()}
        if node.weights_from is not None:
            upstream["weights"] = weights
        futures[name] = node_task(node).submit(run_id, iteration, name, upstream)
    handles = {name: future.result() for name, future in futures.items()}
    rollouts = iteration_rollouts(run, iteration)
    metrics = run.finish_iteration(iteration, time.perf_counter() - start)
    publish_iteration(run, iteration, metrics, rollouts)
    notify("iteration", run, iteration, metrics)
    trainers = [n for n in run.graph.order if run.graph.nodes[n].kind == "train"]
    return handles[trainers[-1]] if trainers else None


def run_iterations(run: Run, first: int = 0) -> str:
    """Run iterations `first`.. of `run` as subflows; the weights handle links them. The
    calling flow gets a live progress artifact and, at the end, the reward curve."""
    notify("start", run, first)
    progress = Progress(run)  # the run's progress bar artifact
    weights = None
    try:
        with without_heartbeats():
            for i in range(first, run.loaded.spec.iterations):
                weights = iteration_flow(run.run_id, i, weights)
                checkpoints.save_if_due(run, i)
                progress.update(i + 1)
        if run.loaded.spec.checkpoint.export_hf:
            checkpoints.export_policy(run)
    finally:
        publish_reward_curve(run)  # also for a failed run: the iterations it finished
        run.close()
    notify("end", run)
    return run.run_id


@flow(name="rldag", persist_result=False)
def rldag_run(
    pipeline: str,
    overrides: list[str] | None = None,
    iterations: Annotated[int | None, Field(ge=1)] = None,
    resume: str | None = None,
) -> str:
    """Run an rldag pipeline: one subflow per RL iteration, one task per pipeline node.

    Args:
        pipeline: Path to a pipeline.yaml, or the YAML text itself.
        overrides: OmegaConf dotlist overrides applied on top, e.g. `seed=1`.
        iterations: RL iterations to run; empty keeps the pipeline's `iterations`.
        resume: A run id under the pipeline's storage to continue from its last checkpoint.

    Returns the run id; everything the run stores is under `<storage.uri>/<run id>/`.
    """
    forward_rldag_logs()
    extra = [*(overrides or []), *([f"iterations={iterations}"] if iterations else [])]
    loaded = load_pipeline(pipeline_file(pipeline), extra)
    run = Run.start(loaded, build_graph(loaded), run_id=resume)
    with tracking(run):  # experiment trackers (trackers: [...]), fed from the run's events
        return run_iterations(run, checkpoints.resume(run) if resume else 0)
