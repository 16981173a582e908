"""The RL loop as Prefect flows: one flow per run, one `iteration-<i>` subflow per iteration,
one task run per node whose inputs are the handles of the edges it consumes, so each
subflow's graph is the pipeline's DAG. The loop itself is rldag.engine.driver's, the same as the
inline driver's: this module only launches its steps as Prefect task runs.

With async.max_staleness = k > 0 up to k+1 iterations are in flight: their subflows overlap
in the UI. Each subflow runs on one of k + 1 long-lived threads and is queued as soon as
the iteration before it opens, so that Prefect's bookkeeping overlaps the compute where
a thread is free.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Annotated

import pyarrow as pa
from prefect import Task, flow
from prefect.client.schemas.objects import TaskRunResult
from prefect.context import FlowRunContext
from prefect.exceptions import CancelledRun
from prefect.futures import PrefectFuture
from prefect.states import Cancelled, State
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote
from pydantic import Field

from flows.api_outage import best_effort, outage_message, unreachable, wait_for_api
from flows.artifacts import Progress, publish_iteration, publish_reward_curve
from flows.cancel_watch import stop_on_cancel
from flows.embedded_server import recycle_if_grown
from flows.pipeline_param import pipeline_file
from flows.prepared import Prepared, take
from flows.run_logs import forward_rldag_logs
from flows.settings import without_heartbeats
from flows.tracking import tracking
from rldag.compute.allocator import cap_malloc_arenas
from rldag.config.errors import RunError, RunStopped
from rldag.config.model_paths import hub_offline_by_default
from rldag.config.spec import load_pipeline
from rldag.engine import checkpoints
from rldag.engine.driver import drive
from rldag.engine.run import EdgeHandle, Run
from rldag.engine.scheduler import Step
from rldag.engine.stop import StopRequest
from rldag.graph.dag import build_graph
from rldag.report.reward_curve import store_reward_curve
from rldag.report.rollouts import sample_rollouts
from tasks.nodes import node_task

log = logging.getLogger("rldag.prefect")


@dataclass
class _Launch:
    step: Step
    inputs: Mapping[str, EdgeHandle]
    result: Future[EdgeHandle]


@dataclass
class _Close:
    metrics: dict[str, float] | None  # None: the run stopped before the iteration finished
    rollouts: Sequence[dict] = ()


@dataclass
class _Inbox:
    """What the driver sends an iteration's subflow, and how far the subflow got."""

    items: queue.Queue = field(default_factory=queue.Queue)
    serving: bool = False  # the subflow has started and takes steps
    closed: bool = False  # it has taken the iteration's _Close


class PrefectLauncher:
    """Launches the driver's steps as task runs inside their iteration's subflow."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.tasks: dict[str, Task] = {
            name: node_task(run, node) for name, node in run.graph.nodes.items()
        }
        self.progress = Progress(run)
        self._inboxes: dict[int, _Inbox] = {}  # iterations whose subflow has not ended
        # Subflows run on k + 2 long-lived threads (a new thread per subflow cost ~2.2 s of
        # Prefect client start-up each): the k + 1 iterations in flight, and the next one,
        # whose subflow is created while they finish (~0.3 s a run would wait otherwise;
        # bench/run_vs_inline.py). Overlapping subflows made the server's SQLite refuse
        # writes as busy and the client back off ~2 s, before flows/busy_retry.py.
        self._subflows = ThreadPoolExecutor(run.max_staleness + 2, "rldag-iteration")
        self._running: list[Future] = []
        self._task_runs: dict[Step, PrefectFuture] = {}
        self._lock = threading.Lock()
        workers = len(run.graph.nodes) + 1  # every node of an iteration may run at once

        def iteration_flow(run_id: str, iteration: int, max_staleness: int) -> State | None:
            """Run the iteration's nodes as the run's scheduler starts them."""
            return self._serve(iteration, self._inboxes[iteration])

        self._flow = flow(
            iteration_flow,
            flow_run_name="iteration-{iteration}",
            task_runner=ThreadPoolTaskRunner(max_workers=workers),
            validate_parameters=False,
            persist_result=False,
        )

    def _inbox(self, iteration: int) -> _Inbox:
        """The iteration's subflow (started on first use, and the next one with it)."""
        for i in (iteration, iteration + 1):
            if i not in self._inboxes and i < self.run.loaded.spec.iterations:
                self._inboxes[i] = _Inbox()
                context = contextvars.copy_context()  # the run's flow: subflows are its children
                self._running = [f for f in self._running if not f.done()]
                self._running.append(self._subflows.submit(context.run, self._subflow, i))
        return self._inboxes[iteration]

    def _subflow(self, iteration: int) -> None:
        """Run the iteration's subflow. One that could not start because the Prefect API was
        unreachable is started again once the API answers (within faults.prefect_outage_s);
        one that cannot run fails the steps sent to it, naming the cause."""
        inbox = self._inboxes[iteration]
        deadline = time.monotonic() + self.run.loaded.spec.faults.prefect_outage_s
        try:
            while not self._run_subflow(iteration, inbox, deadline):
                log.warning("iteration %d: the Prefect API is back, its subflow starts", iteration)
        finally:
            self._inboxes.pop(iteration, None)

    def _run_subflow(self, iteration: int, inbox: _Inbox, deadline: float) -> bool:
        """One attempt at the subflow: False when it could not start and the API is back."""
        try:
            with without_heartbeats():
                self._flow(self.run.run_id, iteration, self.run.max_staleness)
        except (RunError, CancelledRun):  # the subflow is marked so; the driver says why
            pass
        except Exception as err:
            down = unreachable(err)
            if down and not inbox.serving:
                log.warning("iteration %d: %s; waiting for it", iteration, outage_message(err))
                if wait_for_api(deadline):
                    return False
            where = f"iteration {iteration}"
            error = self._failure(where, err)
            _refuse(inbox, error if down else RunError(f"{where}: its subflow failed: {err!r}"))
        return True

    def _failure(self, where: str, err: BaseException) -> BaseException:
        """The error a step gets when Prefect, not the node, failed."""
        if isinstance(err, RunError) or not unreachable(err):
            return err
        resume = f"rldag run --resume {self.run.run_id} continues from the last checkpoint"
        return RunError(f"{where}: {outage_message(err)}; {resume}")

    def _serve(self, iteration: int, inbox: _Inbox) -> State | None:
        inbox.serving = True
        runner = FlowRunContext.get().task_runner
        while not isinstance(item := inbox.items.get(), _Close):
            with self._lock:
                upstream = {
                    TaskRunResult(id=self._task_runs[h.step].task_run_id)
                    for h in item.inputs.values()
                    if h.step in self._task_runs
                }
            # quote: the edges are exactly `upstream` (Prefect would also link any task whose
            # result shares an object with these handles, such as the run id string)
            params = {"iteration": iteration, "inputs": quote(dict(item.inputs))}
            try:
                future = runner.submit(
                    self.tasks[item.step.node], params, dependencies={"inputs": upstream}
                )
            except BaseException as err:  # the driver waits for this step: tell it
                item.result.set_exception(err)
                raise
            with self._lock:
                self._task_runs[item.step] = future
            future.add_done_callback(lambda f, item=item: self._settle(f, item))
        inbox.closed = True
        if item.metrics is None and self.run.stop.requested:  # the subflow ends Cancelled
            why = f"the run was stopped by {self.run.stop.reason}"
            return Cancelled(message=f"iteration {iteration} did not finish: {why}")
        if item.metrics is None:
            raise RunError(f"iteration {iteration} did not finish: the run stopped")
        what = f"the artifacts of iteration {iteration}"
        best_effort(what, publish_iteration, self.run, iteration, item.metrics, item.rollouts)

    def _settle(self, future: PrefectFuture, item: _Launch) -> None:
        """Hand a task run's outcome to the driver; a task run lost with the Prefect API is a
        RunError naming the server (the run stops resumably)."""
        try:
            item.result.set_result(future.result())
        except BaseException as err:  # the step's RunError, as the inline driver raises it
            where = f"node '{item.step.node}' (iteration {item.step.iteration})"
            item.result.set_exception(self._failure(where, err))

    def launch(self, step: Step, inputs: Mapping[str, EdgeHandle]) -> Future[EdgeHandle]:
        result: Future[EdgeHandle] = Future()
        self._inbox(step.iteration).items.put(_Launch(step, inputs, result))
        return result

    def iteration_finished(
        self,
        iteration: int,
        metrics: dict[str, float],
        tables: Mapping[str, pa.Table],
        in_flight: int,
    ) -> None:
        if iteration + 1 < self.run.loaded.spec.iterations:  # before new steps launch
            recycle_if_grown(self.run.loaded.spec.faults.prefect_server_max_rss_mb)
        rollouts = sample_rollouts(self.run.graph, tables)
        self._inbox(iteration).items.put(_Close(metrics, rollouts))
        with self._lock:
            for step in [s for s in self._task_runs if s.iteration == iteration]:
                del self._task_runs[step]
        staleness = metrics.get("staleness/max", 0.0)
        best_effort("the progress", self.progress.update, iteration + 1, in_flight, staleness)

    def close(self, failed: bool) -> None:
        for inbox in list(self._inboxes.values()):
            inbox.items.put(_Close(None))  # ends subflows of iterations that never finished
        wait(self._running)
        self._subflows.shutdown()
        best_effort("the reward curve", publish_reward_curve, self.run)


def _refuse(inbox: _Inbox, error: RunError) -> None:
    """Fail every step sent to an iteration whose subflow cannot serve it, until the
    iteration is closed (at once if it already was)."""
    while not inbox.closed and not isinstance(item := inbox.items.get(), _Close):
        item.result.set_exception(error)


def run_iterations(run: Run, first: int = 0) -> str:
    """Drive `run` from iteration `first` with its steps as Prefect task runs; the calling
    flow gets a live progress artifact and, at the end, the reward curve (stored with the
    run before the launcher publishes it)."""
    drive(run, PrefectLauncher(run), first, on_close=(store_reward_curve,))
    return run.run_id


@flow(name="rldag", persist_result=False)
def rldag_run(
    pipeline: str,
    overrides: list[str] | None = None,
    iterations: Annotated[int | None, Field(ge=1)] = None,
    resume: str | None = None,
) -> str | State:
    """Run an rldag pipeline: one subflow per RL iteration, one task per pipeline node.

    Args:
        pipeline: Path to a pipeline.yaml, or the YAML text itself.
        overrides: OmegaConf dotlist overrides applied on top, e.g. `seed=1`.
        iterations: RL iterations to run; empty keeps the pipeline's `iterations`.
        resume: A run id under the pipeline's storage to continue from its last checkpoint.

    Returns the run id; everything the run stores is under `<storage.uri>/<run id>/`. A run
    stopped by a cancel (or, under `rldag run`, SIGTERM or SIGINT) ends Cancelled, resumable.
    """
    forward_rldag_logs()
    cap_malloc_arenas()  # a deployment's flow run starts here, not in the CLI
    hub_offline_by_default()  # so does its hub setting (docs/guides/bring-your-own-model.md)
    extra = [*(overrides or []), *([f"iterations={iterations}"] if iterations else [])]
    prepared = take(pipeline, extra)  # `rldag run` in this process loaded and placed it
    if prepared is None:
        loaded = load_pipeline(pipeline_file(pipeline), extra)
        prepared = Prepared(loaded, build_graph(loaded), None)
    stop = prepared.stop or StopRequest()
    # `rldag run` takes SIGTERM back from Prefect's engine (which raises wherever the main
    # thread is); a cancel in Prefect stops the run alike in every flow run.
    signals = stop.on_signals() if prepared.stop is not None else nullcontext()
    with signals, stop_on_cancel(FlowRunContext.get().flow_run.id, stop):
        run = Run.start(
            prepared.loaded,
            prepared.graph,
            run_id=resume,
            placement=prepared.placement,
            stop=stop,
        )
        try:
            with tracking(run):  # experiment trackers (trackers: [...]), fed from its events
                return run_iterations(run, checkpoints.resume(run) if resume else 0)
        except RunStopped as err:  # a signal or a cancel: the flow run ends Cancelled
            return Cancelled(message=str(err))
