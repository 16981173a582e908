"""Overrides for short runs of the default pipeline."""

from __future__ import annotations

from pathlib import Path


def small_grpo(tiny_task: Path, tmp_path: Path, iterations: int) -> list[str]:
    """Overrides for a short GRPO run of 8 prompts x 4 samples on the tiny task."""
    return [
        f"iterations={iterations}",
        f"storage.uri={tmp_path}/runs",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
    ]
