"""The RL loop as Prefect flows: one flow per run, one `iteration-<i>` subflow per iteration,
one task run per node whose inputs are the handles of the edges it consumes, so each
subflow's graph is the pipeline's DAG. The loop itself is rldag.driver's, the same as the
inline driver's: this module only launches its steps as Prefect task runs.

With async.max_staleness = k > 0 up to k+1 iterations are in flight: their subflows overlap
in the UI. Each subflow runs on one of k + 1 long-lived threads and is queued as soon as
the iteration before it opens, so that Prefect's bookkeeping overlaps the compute where
a thread is free.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Annotated

from prefect import Task, flow
from prefect.client.schemas.objects import TaskRunResult
from prefect.context import FlowRunContext
from prefect.futures import PrefectFuture
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote
from pydantic import Field

from flows.artifacts import Progress, publish_iteration, publish_reward_curve
from flows.pipeline_param import pipeline_file
from flows.run_logs import forward_rldag_logs
from flows.settings import without_heartbeats
from flows.tracking import tracking
from rldag import checkpoints
from rldag.driver import drive
from rldag.errors import RunError
from rldag.graph import build_graph
from rldag.run import EdgeHandle, Run
from rldag.scheduler import Step
from rldag.spec import load_pipeline
from tasks.nodes import node_task


@dataclass
class _Launch:
    step: Step
    inputs: Mapping[str, EdgeHandle]
    result: Future[EdgeHandle]


@dataclass
class _Close:
    metrics: dict[str, float] | None  # None: the run stopped before the iteration finished
    rollouts: Sequence[dict] = ()


class PrefectLauncher:
    """Launches the driver's steps as task runs inside their iteration's subflow."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.tasks: dict[str, Task] = {
            name: node_task(run, node) for name, node in run.graph.nodes.items()
        }
        self.progress = Progress(run)
        self._inboxes: dict[int, queue.Queue] = {}
        # Subflows run on k + 1 long-lived threads (a new thread per subflow cost ~2.2 s of
        # Prefect client start-up each; two threads for k = 0 stalled ~2 s more often).
        self._subflows = ThreadPoolExecutor(run.max_staleness + 1, "rldag-iteration")
        self._running: list[Future] = []
        self._task_runs: dict[Step, PrefectFuture] = {}
        self._lock = threading.Lock()
        workers = len(run.graph.nodes) + 1  # every node of an iteration may run at once

        def iteration_flow(run_id: str, iteration: int, max_staleness: int) -> int:
            """Run the iteration's nodes as the run's scheduler starts them."""
            return self._serve(iteration)

        self._flow = flow(
            iteration_flow,
            flow_run_name="iteration-{iteration}",
            task_runner=ThreadPoolTaskRunner(max_workers=workers),
            validate_parameters=False,
            persist_result=False,
        )

    def _inbox(self, iteration: int) -> queue.Queue:
        """The iteration's subflow (started on first use, and the next one with it)."""
        for i in (iteration, iteration + 1):
            if i not in self._inboxes and i < self.run.loaded.spec.iterations:
                self._inboxes[i] = queue.Queue()
                context = contextvars.copy_context()  # the run's flow: subflows are its children
                self._running.append(self._subflows.submit(context.run, self._subflow, i))
        return self._inboxes[iteration]

    def _subflow(self, iteration: int) -> None:
        with without_heartbeats():
            try:
                self._flow(self.run.run_id, iteration, self.run.max_staleness)
            except RunError:  # the subflow is marked failed; the driver reports the cause
                pass

    def _serve(self, iteration: int) -> int:
        inbox = self._inboxes[iteration]
        runner = FlowRunContext.get().task_runner
        while not isinstance(item := inbox.get(), _Close):
            with self._lock:
                upstream = {
                    TaskRunResult(id=self._task_runs[h.step].task_run_id)
                    for h in item.inputs.values()
                    if h.step in self._task_runs
                }
            # quote: the edges are exactly `upstream` (Prefect would also link any task whose
            # result shares an object with these handles, such as the run id string)
            params = {"iteration": iteration, "inputs": quote(dict(item.inputs))}
            future = runner.submit(
                self.tasks[item.step.node], params, dependencies={"inputs": upstream}
            )
            with self._lock:
                self._task_runs[item.step] = future
            future.add_done_callback(lambda f, result=item.result: _settle(f, result))
        if item.metrics is None:
            raise RunError(f"iteration {iteration} did not finish: the run stopped")
        publish_iteration(self.run, iteration, item.metrics, item.rollouts)
        return iteration

    def launch(self, step: Step, inputs: Mapping[str, EdgeHandle]) -> Future[EdgeHandle]:
        result: Future[EdgeHandle] = Future()
        self._inbox(step.iteration).put(_Launch(step, inputs, result))
        return result

    def iteration_finished(
        self, iteration: int, metrics: dict[str, float], rollouts: Sequence[dict], in_flight: int
    ) -> None:
        self._inbox(iteration).put(_Close(metrics, rollouts))
        with self._lock:
            for step in [s for s in self._task_runs if s.iteration == iteration]:
                del self._task_runs[step]
        self.progress.update(iteration + 1, in_flight, metrics.get("staleness/max", 0.0))

    def close(self, failed: bool) -> None:
        for inbox in self._inboxes.values():
            inbox.put(_Close(None))  # ends subflows of iterations that never finished
        wait(self._running)
        self._subflows.shutdown()
        publish_reward_curve(self.run)


def _settle(future: PrefectFuture, result: Future[EdgeHandle]) -> None:
    """Hand a task run's outcome to the driver."""
    try:
        result.set_result(future.result())
    except BaseException as err:  # the step's RunError, as the inline driver raises it
        result.set_exception(err)


def run_iterations(run: Run, first: int = 0) -> str:
    """Drive `run` from iteration `first` with its steps as Prefect task runs; the calling
    flow gets a live progress artifact and, at the end, the reward curve."""
    drive(run, PrefectLauncher(run), first)
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
