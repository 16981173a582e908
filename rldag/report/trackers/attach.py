"""attach_trackers(run): the run's trackers, fed from its events (rldag.engine.events):
the metrics row of every iteration, the train node's rows (one per optimizer step), a few
sample rollouts, and at the end the reward curve."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa
import yaml

from rldag.config.spec import NodeKind
from rldag.config.tracking import TrackerName, TrackingSpec
from rldag.engine.events import (
    Event,
    IterationFinished,
    NodeFinished,
    RunEnded,
    RunStarted,
    add_listener,
)
from rldag.engine.run import Run
from rldag.report.reward_curve import reward_curve_png
from rldag.report.rollouts import sample_rollouts
from rldag.report.trackers.base import RunInfo, Tracker
from rldag.report.trackers.fanout import TrackerSet


def _mlflow(spec: TrackingSpec) -> Tracker:
    from rldag.report.trackers.mlflow_tracker import MlflowTracker

    return MlflowTracker(spec.mlflow)


def _tensorboard(spec: TrackingSpec) -> Tracker:
    from rldag.report.trackers.tensorboard_tracker import TensorboardTracker

    return TensorboardTracker(spec.tensorboard)


def _wandb(spec: TrackingSpec) -> Tracker:
    from rldag.report.trackers.wandb_tracker import WandbTracker

    return WandbTracker(spec.wandb)


TRACKERS: dict[TrackerName, Callable[[TrackingSpec], Tracker]] = {
    TrackerName.mlflow: _mlflow,
    TrackerName.tensorboard: _tensorboard,
    TrackerName.wandb: _wandb,
}


class RunTracking:
    """Listens to one run's events and hands what they carry to its TrackerSet."""

    def __init__(self, run: Run, trackers: TrackerSet, flow_run_url: str | None) -> None:
        self.run = run
        self.trackers = trackers
        self.flow_run_url = flow_run_url
        self.train_step = 0  # optimizer steps logged so far (the train_step axis)
        self._tables: dict[int, dict[str, pa.Table]] = {}  # this iteration's, for rollouts
        self._lock = threading.Lock()
        self._closed = False
        self._detach = add_listener(self) if trackers else (lambda: None)

    def __call__(self, event: Event) -> None:
        if event.run_id != self.run.run_id:
            return
        match event:
            case RunStarted():
                self._start(event.first)
            case NodeFinished():
                self._node_done(event.iteration, event.node)
            case IterationFinished():
                with self._lock:
                    tables = self._tables.pop(event.iteration, {})
                rollouts = sample_rollouts(self.run.graph, tables)
                metrics, i = dict(event.metrics), event.iteration
                self.trackers.call(lambda tracker: tracker.log_iteration(i, metrics))
                self.trackers.call(lambda tracker: tracker.log_rollouts(i, rollouts))
            case RunEnded():
                self.close(ok=not event.failed)

    def _start(self, first: int) -> None:
        loaded = self.run.loaded
        info = RunInfo(
            run_id=self.run.run_id,
            pipeline_name=loaded.spec.name,
            run_uri=self.run.uri,
            pipeline_yaml=loaded.resolved_yaml,
            config=yaml.safe_load(loaded.resolved_yaml),
            flow_run_url=self.flow_run_url,
            first_iteration=first,
        )
        self.trackers.call(lambda tracker: tracker.start(info))

    def _node_done(self, iteration: int, name: str) -> None:
        table = self.run.table(iteration, name)
        with self._lock:
            self._tables.setdefault(iteration, {})[name] = table
            if self.run.graph.nodes[name].kind != NodeKind.train:
                return
            first, self.train_step = self.train_step, self.train_step + table.num_rows
        rows = table.to_pylist()
        self.trackers.call(lambda tracker: tracker.log_train_steps(first, rows))

    def close(self, ok: bool) -> None:
        """Log the reward curve, finish every tracker's run, stop listening (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._detach()
        metrics = self.run.metrics
        if metrics and self.trackers:
            png = reward_curve_png(metrics, f"{self.run.loaded.spec.name} · {self.run.run_id}")
            step = int(metrics[-1]["iteration"])
            self.trackers.call(lambda tracker: tracker.log_image("reward_curve", png, step))
        self.trackers.close(ok)


def attach_trackers(run: Run, flow_run_url: str | None = None) -> RunTracking:
    """Report `run` to the trackers its pipeline lists (`trackers: [...]`); call
    `.close(ok)` when the run ends (the "end" event closes it too)."""
    spec = run.loaded.spec
    trackers = TrackerSet([TRACKERS[name](spec.tracking) for name in spec.trackers], run.run_id)
    return RunTracking(run, trackers, flow_run_url)
