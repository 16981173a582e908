"""Rich progress for `rldag run`: the run id, a bar over iterations with the node running
now and the last node's rows/s, and a line per finished iteration."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rldag.run import Run, add_listener

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

    def __enter__(self) -> RunProgress:
        self._remove = add_listener(self.on_event)
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
        self._remove()

    def on_event(self, event: str, run: Run, *args: object) -> None:
        if event == "start":
            self.console.print(f"run id: [bold]{run.run_id}[/bold]  ({run.uri})")
            total, done = run.loaded.spec.iterations, args[0] if args else 0  # resumed: done > 0
            self.task = self.progress.add_task(
                "iterations", total=total, completed=done, status="", node=""
            )
        elif event == "node" and self.task is not None:
            i, name = args
            self.progress.update(self.task, node=f"iteration {i}: {name} …")
        elif event == "node_done" and self.task is not None:
            i, name, rows, seconds = args
            rate = f"{rows / seconds:,.0f} rows/s" if seconds > 0 else "-"
            self.progress.update(self.task, node=f"iteration {i}: {name} {rows} rows, {rate}")
        elif event == "iteration":
            i, metrics = args
            parts = [f"{k}={metrics[k]:.3g}" for k in SHOWN if k in metrics]
            line = f"iteration {i:>3}  " + "  ".join(parts)
            line += f"  {metrics['timing_s/iteration']:.2f}s"
            self.progress.console.print(line, highlight=False)
            self.progress.update(self.task, advance=1, status=parts[0] if parts else "")
        elif event == "end":
            self.console.print(f"done: [bold]{run.run_id}[/bold] -> {run.uri}/metrics.parquet")
