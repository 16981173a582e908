"""The RL loop as Prefect flows: one flow per run, one `iteration-<i>` subflow per iteration,
one task run per node wired by futures so the flow-run graph is the pipeline's DAG."""

from __future__ import annotations

import time

from prefect import flow
from prefect.artifacts import create_table_artifact

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
    metrics = run.finish_iteration(iteration, time.perf_counter() - start)
    create_table_artifact(
        table=[{"metric": k, "value": round(v, 6)} for k, v in metrics.items()],
        description=f"Metrics of iteration {iteration} of run {run_id}",
    )
    notify("iteration", run, iteration, metrics)
    trainers = [n for n in run.graph.order if run.graph.nodes[n].kind == "train"]
    return handles[trainers[-1]] if trainers else None


def run_iterations(run: Run) -> str:
    """Run every iteration of `run` as a subflow; the weights handle links them."""
    notify("start", run)
    weights = None
    try:
        for i in range(run.loaded.spec.iterations):
            weights = iteration_flow(run.run_id, i, weights)
    finally:
        run.close()
    notify("end", run)
    return run.run_id


@flow(name="rldag", persist_result=False)
def rldag_run(pipeline: str, overrides: list[str] | None = None) -> str:
    """Run a pipeline.yaml (with OmegaConf dotlist overrides); returns the run id."""
    loaded = load_pipeline(pipeline, overrides or [])
    return run_iterations(Run.start(loaded, build_graph(loaded)))
