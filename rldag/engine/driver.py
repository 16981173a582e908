"""The one loop that drives a run: it asks the scheduler what may start, hands each step to a
launcher (a thread here; a Prefect task run in flows.rl_loop), and when an iteration is
complete computes its metrics, commits its checkpoint and tells the launcher and the
listeners. At the end it exports the policy and runs the caller's closing hooks (the
composition roots store the reward curve there: rldag.report.reward_curve). It renders
nothing itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from functools import partial
from typing import Protocol

import pyarrow as pa

from rldag.config.errors import RunStopped
from rldag.engine import checkpoints
from rldag.engine.events import IterationFinished, RunEnded, RunStarted, emit
from rldag.engine.run import EdgeHandle, Run
from rldag.engine.scheduler import Scheduler, Step
from rldag.engine.streams import StreamFailed

log = logging.getLogger("rldag.driver")
SETTLE_S = 120  # after a failure, how long running steps may take to finish before closing
STOP_POLL_S = 0.25  # how often the loop looks for a stop request (rldag.engine.stop) meanwhile


class Launcher(Protocol):
    """Starts steps for the driver; the orchestrator-specific part of a run."""

    def launch(self, step: Step, inputs: Mapping[str, EdgeHandle]) -> Future[EdgeHandle]: ...

    def iteration_finished(
        self,
        iteration: int,
        metrics: dict[str, float],
        tables: Mapping[str, pa.Table],
        in_flight: int,
    ) -> None:
        """The iteration is complete: its metrics row and its nodes' tables by name."""

    def close(self, failed: bool) -> None: ...


class InlineLauncher:
    """Runs each step in a thread of this process (tests, benches, debugging)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        workers = len(run.graph.nodes) * (run.max_staleness + 1) + 1
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rldag-step")

    def launch(self, step: Step, inputs: Mapping[str, EdgeHandle]) -> Future[EdgeHandle]:
        return self._pool.submit(self.run.execute, step, inputs)

    def iteration_finished(
        self,
        iteration: int,
        metrics: dict[str, float],
        tables: Mapping[str, pa.Table],
        in_flight: int,
    ) -> None:
        return None

    def close(self, failed: bool) -> None:
        self._pool.shutdown(wait=True)


OnClose = Callable[[Run], object]  # a closing hook: gets the run, before it is closed


def run_inline(run: Run, iterations: int | None = None, on_close: Sequence[OnClose] = ()) -> None:
    """Run iterations 0.. of `run` in this process without an orchestrator (debugging, tests,
    benchmarks), through the same scheduler and loop as `rldag run`; closes the run."""
    drive(run, InlineLauncher(run), last=iterations, on_close=on_close)


def drive(
    run: Run,
    launcher: Launcher,
    first: int = 0,
    last: int | None = None,
    on_close: Sequence[OnClose] = (),
) -> None:
    """Run iterations `first`..`last - 1` (default: to the pipeline's `iterations`) of
    `run`, then close it. A failed step stops the run with its RunError once the steps
    still running have settled; finished iterations stay stored.

    Each `on_close` hook runs with the run once it ends, also after a failure (on what it
    finished), before the launcher and the run are closed: in a good run a hook's error is
    the run's, in a failed one it is a warning."""
    spec = run.loaded.spec
    last = spec.iterations if last is None else last
    streaming = spec.async_.chunk_groups > 0
    scheduler = Scheduler(run.graph, first, last, run.max_staleness, streaming, run.continuous)
    emit(RunStarted(run.run_id, run.uri, first, spec.iterations))
    pending: dict[Future[EdgeHandle], Step] = {}
    handles: dict[Step, EdgeHandle] = {}
    started: dict[int, float] = {}
    closing = first
    failed = True
    try:
        while not scheduler.done:
            while not run.stop.requested and (steps := scheduler.ready()):
                for step in steps:
                    scheduler.start(step)
                    started.setdefault(step.iteration, time.perf_counter())
                    handles[step] = run.open_step(step)
                    node = run.graph.nodes[step.node]
                    ports = node.inputs.items()
                    inputs = {p: handles[Step(step.iteration, up)] for p, up in ports}
                    pending[launcher.launch(step, inputs)] = step
            if run.stop.requested and not _finishing(run, scheduler, pending.values()):
                break
            done, _ = wait(pending, timeout=STOP_POLL_S, return_when=FIRST_COMPLETED)
            if any(f.exception() is not None for f in done):
                run.stop_streams()  # no reader waits for a producer that did not start
                _raise_root_cause(pending)
            for future in sorted(done, key=lambda f: pending[f]):
                step = pending.pop(future)
                handles[step] = future.result()
                scheduler.finish(step)
            while closing < last and scheduler.iteration_finished(closing):
                in_flight = len({s.iteration for s in pending.values()})
                seconds = time.perf_counter() - started.pop(closing)
                _close_iteration(run, launcher, closing, seconds, in_flight)
                emit(IterationFinished(run.run_id, closing, run.metrics[-1], in_flight))
                for name in run.graph.order:
                    handles.pop(Step(closing, name), None)
                closing += 1
        if not scheduler.done:
            raise _stopped(run, closing)
        if spec.checkpoint.export_hf:
            checkpoints.export_policy(run)
        failed = False
    finally:
        if failed:
            run.stop_streams()
        if failed and run.stop.requested:
            run.runner.abandon()  # what still runs on the pools (its iteration runs again)
        wait(pending, timeout=SETTLE_S)
        with ExitStack() as closing_steps:  # each runs even when one before it raises
            closing_steps.callback(emit, RunEnded(run.run_id, run.uri, failed))
            closing_steps.callback(_closing, run, failed, "closing", run.close)
            launched = partial(launcher.close, failed)
            closing_steps.callback(_closing, run, failed, "closing the launcher of", launched)
            for hook in on_close:
                name = getattr(hook, "__name__", repr(hook))
                _closing(run, failed, f"the closing hook {name} of", partial(hook, run))


def _closing(run: Run, failed: bool, what: str, step: Callable[[], object]) -> None:
    """One closing step; in a failed run its own failure (storage gone, say) is a warning, so
    the run's error is the one reported."""
    try:
        step()
    except Exception as err:
        if not failed:
            raise
        log.warning("%s run %s failed too: %s", what, run.run_id, err)


def _finishing(run: Run, scheduler: Scheduler, running: Iterable[Step]) -> bool:
    """Whether a stopping run waits on: a running step's iteration can still finish (no step
    of it waits to start) and the grace period has not passed."""
    grace_s = run.loaded.spec.faults.stop_grace_s
    return run.stop.finishing(grace_s) and any(scheduler.all_started(s.iteration) for s in running)


def _stopped(run: Run, next_iteration: int) -> RunStopped:
    """The error of a run that stopped on request before `next_iteration`."""
    saved = checkpoints.latest(run.storage, run.run_id)
    where = f"after iteration {next_iteration - 1}" if next_iteration else "before iteration 0"
    resume = (
        f"rldag run --resume {run.run_id} continues from its checkpoint of iteration {saved}"
        if saved is not None
        else "it has no checkpoint to resume from"
    )
    stop = run.stop
    return RunStopped(f"stopped by {stop.reason} {where}; {resume}", stop.exit_code)


def _raise_root_cause(pending: Mapping[Future[EdgeHandle], Step]) -> None:
    """Once the running steps have settled, raise the failure that is not a reader of a
    failed stream (the producer's own error names the node that broke)."""
    wait(pending, timeout=SETTLE_S)
    failed = [f.exception() for f in pending if f.done() and f.exception() is not None]
    root = next((e for e in failed if not _read_a_failed_stream(e)), failed[0])
    raise root


def _read_a_failed_stream(err: BaseException | None) -> bool:
    """Whether `err` came from reading a stream that failed or that the stopping run ended."""
    while err is not None:
        if isinstance(err, StreamFailed):
            return True
        err = err.__cause__
    return False


def _close_iteration(
    run: Run, launcher: Launcher, iteration: int, seconds: float, in_flight: int
) -> None:
    tables = {name: run.table(iteration, name) for name in run.graph.order}
    metrics = run.finish_iteration(iteration, seconds)
    checkpoints.commit_if_due(run, iteration)
    launcher.iteration_finished(iteration, metrics, tables, in_flight)
