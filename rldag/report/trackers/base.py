"""What every experiment tracker implements, and what it is told about the run."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class RunInfo:
    """The rldag run a tracker run stands for."""

    run_id: str
    pipeline_name: str
    run_uri: str  # where the run's tables, metrics and checkpoints are stored
    pipeline_yaml: str  # the resolved pipeline.yaml, as stored with the run
    config: Mapping[str, Any]  # the same, parsed (trackers show it as params/config)
    flow_run_url: str | None  # the Prefect UI page of the run, when there is a UI
    first_iteration: int = 0  # > 0 when the run resumes from a checkpoint


class Tracker(Protocol):
    """One experiment tracker. Calls come from one thread, in order; any exception switches
    the tracker off for the rest of the run (the TrackerSet warns once)."""

    name: str

    def start(self, info: RunInfo) -> None:
        """Open the tracker's run; attach the run id, pipeline.yaml and flow-run URL."""

    def log_iteration(self, iteration: int, metrics: Mapping[str, float]) -> None:
        """The iteration's metrics row, at step `iteration`."""

    def log_train_steps(self, first_step: int, rows: Sequence[Mapping[str, float]]) -> None:
        """One row per optimizer step, at steps first_step, first_step + 1, ..."""

    def log_rollouts(self, iteration: int, rows: Sequence[Mapping[str, object]]) -> None:
        """A few sample rollouts (prompt, response, reward, ...) of the iteration."""

    def log_image(self, name: str, png: bytes, iteration: int) -> None:
        """A PNG (the reward curve) at step `iteration`."""

    def finish(self, ok: bool) -> None:
        """Close the tracker's run: finished, or failed when `ok` is false."""


def numeric(row: Mapping[str, object]) -> dict[str, float]:
    """The row's numeric values as floats (bools, strings and None left out)."""
    return {
        k: float(v)
        for k, v in row.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> {"nodes.train.params.lr": "0.0003", ...} (for param-style trackers)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out |= flatten(value, path)
        else:
            out[path] = str(value)
    return out


def _cell(value: object) -> object:
    if value is None or isinstance(value, str | int | float):
        return value
    return json.dumps(value, default=str)  # chat messages, structs


def rollout_table(
    iteration: int, rows: Sequence[Mapping[str, object]]
) -> tuple[list[str], list[list[object]]]:
    """Sample rollouts as (columns, rows) of a tracker table, with an `iteration` column;
    scalars stay as they are, the rest (chat messages, structs) becomes JSON text."""
    columns = ["iteration", *rows[0]] if rows else ["iteration"]
    return columns, [[iteration, *(_cell(r.get(k)) for k in columns[1:])] for r in rows]
