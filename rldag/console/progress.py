"""Rich progress for `rldag run`: what it is doing before the first iteration (validating,
starting the Prefect server and Ray, building workers) and for how long, the run id as soon as
its directory is claimed, a bar over iterations with the steps running
now (several iterations at once when async) and the last node's rows/s, and a line per
finished iteration."""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rldag.engine.events import (
    Event,
    IterationFinished,
    NodeFinished,
    NodeStarted,
    RunEnded,
    RunStarted,
    Starting,
    add_listener,
)

SHOWN = ("reward/mean", "response_length/mean", "train/loss", "perf/tokens_per_s")


class RunProgress:
    """Context manager that listens to run events and renders them."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            TextColumn("[cyan]{task.fields[node]}"),
            console=console,
        )
        self.task = None
        self.startup = None  # the bar of the steps before the first iteration
        self.started = time.monotonic()
        self.run_id = ""  # printed once known
        self.running: dict[tuple[int, str], None] = {}
        self._lock = threading.Lock()  # steps start and finish on the launcher's threads

    def __enter__(self) -> RunProgress:
        self._remove = add_listener(self.on_event)
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
        self._remove()

    def _show(self, last: str = "") -> None:
        now = ", ".join(f"{i}:{name}" for i, name in self.running)
        self.progress.update(self.task, node=(f"running {now}  " if now else "") + last)

    def starting(self, what: str) -> None:
        """Show a step before the first iteration (events from the run add theirs)."""
        self.on_event(Starting(what))

    def _starting(self, event: Starting) -> None:
        if event.run_id and event.run_id != self.run_id:
            self.run_id = event.run_id
            self.console.print(f"run id: [bold]{event.run_id}[/bold]  ({event.uri})")
            return
        elapsed = time.monotonic() - self.started
        self.console.print(f"[dim]{elapsed:5.1f}s[/dim] {event.what}", highlight=False)
        if self.startup is None:
            self.startup = self.progress.add_task("starting", total=None, status="", node="")
        self.progress.update(self.startup, status=event.what)

    def on_event(self, event: Event) -> None:
        with self._lock:
            self._on_event(event)

    def _on_event(self, event: Event) -> None:
        match event:
            case Starting():
                self._starting(event)
            case RunStarted():
                if event.run_id != self.run_id:
                    self.console.print(f"run id: [bold]{event.run_id}[/bold]  ({event.uri})")
                if self.startup is not None:
                    self.progress.remove_task(self.startup)
                    self.startup = None
                self.task = self.progress.add_task(
                    "iterations",
                    total=event.iterations,
                    completed=event.first,
                    status="",
                    node="",
                )
            case NodeStarted() if self.task is not None:
                self.running[(event.iteration, event.node)] = None
                self._show()
            case NodeFinished() if self.task is not None:
                self.running.pop((event.iteration, event.node), None)
                rate = f"{event.rows / event.seconds:,.0f} rows/s" if event.seconds > 0 else "-"
                self._show(f"{event.iteration}:{event.node} {event.rows} rows, {rate}")
            case IterationFinished():
                metrics = event.metrics
                parts = [f"{k}={metrics[k]:.3g}" for k in SHOWN if k in metrics]
                line = f"iteration {event.iteration:>3}  " + "  ".join(parts)
                line += f"  {metrics['timing_s/iteration']:.2f}s"
                if event.in_flight:
                    line += f"  ({event.in_flight} more in flight)"
                self.progress.console.print(line, highlight=False)
                self.progress.update(self.task, advance=1, status=parts[0] if parts else "")
            case RunEnded(failed=False):
                self.console.print(
                    f"done: [bold]{event.run_id}[/bold] -> {event.uri}/metrics.parquet"
                )
