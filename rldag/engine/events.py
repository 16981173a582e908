"""Typed events of a run, for whoever watches it (the CLI's progress bar, benchmarks,
trackers). Both drivers emit the same events from the same loop (rldag.engine.driver)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Starting:
    """What a run is doing before its first iteration (validating, starting Ray, building
    workers...); `run_id` once its directory is claimed."""

    what: str
    run_id: str = ""
    uri: str = ""


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    uri: str
    first: int  # the first iteration this process runs (> 0 when resumed)
    iterations: int  # the run's total


@dataclass(frozen=True)
class NodeStarted:
    run_id: str
    iteration: int
    node: str


@dataclass(frozen=True)
class NodeFinished:
    run_id: str
    iteration: int
    node: str
    rows: int
    seconds: float
    chunks: int  # how many chunks it emitted (1 for a whole-table node)


@dataclass(frozen=True)
class IterationFinished:
    run_id: str
    iteration: int
    metrics: dict[str, float]
    in_flight: int  # iterations started but not finished, after this one


@dataclass(frozen=True)
class RunEnded:
    run_id: str
    uri: str
    failed: bool


Event = Starting | RunStarted | NodeStarted | NodeFinished | IterationFinished | RunEnded
Listener = Callable[[Event], None]
_LISTENERS: list[Listener] = []


def add_listener(listener: Listener) -> Callable[[], None]:
    """Call `listener(event)` for every event of every run in this process; returns a
    function that removes it."""
    _LISTENERS.append(listener)
    return lambda: _LISTENERS.remove(listener)


def emit(event: Event) -> None:
    """Tell the listeners. They watch the run: one that raises is logged and the run goes on
    (a progress display's bug must not fail a node)."""
    for listener in list(_LISTENERS):
        try:
            listener(event)
        except Exception as err:
            log.warning("a watcher of the run (%r) failed on %r: %r", listener, event, err)
