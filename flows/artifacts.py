"""The Prefect artifacts of a run: a live progress bar, per-iteration metrics and sample
rollouts, and the reward curve (stored with the run as a PNG and shown inline in the UI).

Thin: the content comes from `rldag.report.reward_curve` and `rldag.report.rollouts`; this
module only publishes it.
"""

from __future__ import annotations

import time

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from rldag.engine.run import Run
from rldag.report.reward_curve import REWARD_CURVE, markdown_image
from rldag.report.rollouts import rollouts_markdown

PROGRESS_EVERY_S = 1.0  # the progress bar is refreshed at most this often (and at the end)


class Progress:
    """The run's progress artifact (iterations done / total). Each update is an API round trip,
    so it is refreshed at most every PROGRESS_EVERY_S seconds, and always at the last
    iteration."""

    def __init__(self, run: Run) -> None:
        self.total = run.loaded.spec.iterations
        self.run_id = run.run_id
        self.artifact = create_progress_artifact(
            progress=0.0, description=f"Iterations done of run {run.run_id} ({run.uri})"
        )
        self._last = float("-inf")

    def update(self, done: int, in_flight: int = 0, staleness: float = 0.0) -> None:
        """Record `done` iterations, how many more are in flight and the last iteration's
        largest staleness (skipped when the last refresh is too recent)."""
        now = time.monotonic()
        if done < self.total and now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        update_progress_artifact(
            self.artifact,
            100.0 * done / self.total,
            description=f"{done}/{self.total} iterations of {self.run_id}, {in_flight} more in "
            f"flight, staleness {staleness:g}",
        )


def publish_iteration(run: Run, iteration: int, metrics: dict[str, float], rollouts: list) -> None:
    """The iteration's metrics table and a few of its rollouts, on its subflow."""
    create_table_artifact(
        table=[{"metric": k, "value": round(v, 6)} for k, v in metrics.items()],
        description=f"Metrics of iteration {iteration} of run {run.run_id}",
    )
    create_markdown_artifact(
        markdown=rollouts_markdown(rollouts, iteration),
        description=f"Sample rollouts of iteration {iteration} of run {run.run_id}",
    )


def publish_reward_curve(run: Run) -> str | None:
    """Show the reward curve the run stored (rldag.engine.driver) on the run's flow; its URI."""
    rel = f"{run.run_id}/{REWARD_CURVE}"
    if not run.storage.exists(rel):
        return None
    png = run.storage.read_bytes(rel)
    uri = run.storage.uri(rel)
    create_markdown_artifact(
        markdown=f"# Reward curve\n\n{markdown_image(png, 'reward curve')}\n\nStored at `{uri}`",
        description=f"Reward per iteration of run {run.run_id}",
    )
    return uri
