"""Weights & Biases: one W&B run per rldag run (online, or offline run files to sync later).
Metrics on an `iteration` axis and per optimizer step on a `train_step` axis, the pipeline
as config and as pipeline.yaml, the reward curve as an image, sample rollouts as a table."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from rldag.config.tracking import WandbSpec
from rldag.report.trackers.base import RunInfo, numeric, rollout_table


class WandbTracker:
    name = "wandb"

    def __init__(self, spec: WandbSpec) -> None:
        self.spec = spec
        self.run = None

    def start(self, info: RunInfo) -> None:
        import wandb

        notes = f"rldag run {info.run_id}, stored at {info.run_uri}"
        if info.flow_run_url:
            notes += f"; Prefect flow run: {info.flow_run_url}"
        config = dict(info.config) | {
            "rldag": {"run_id": info.run_id, "run_uri": info.run_uri},
            "prefect_flow_run_url": info.flow_run_url,
        }
        if self.spec.dir:
            Path(self.spec.dir).mkdir(parents=True, exist_ok=True)
        self.run = run = wandb.init(
            project=self.spec.project or info.pipeline_name,
            entity=self.spec.entity,
            name=info.run_id,
            notes=notes,
            tags=list(self.spec.tags),
            config=config,
            mode=self.spec.mode.value,
            dir=self.spec.dir,
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )
        run.define_metric("iteration")
        run.define_metric("train_step")
        run.define_metric("train_step/*", step_metric="train_step")
        run.define_metric("*", step_metric="iteration")
        path = Path(run.dir) / "pipeline.yaml"
        path.write_text(info.pipeline_yaml)
        run.save(str(path), base_path=run.dir, policy="now")

    def log_iteration(self, iteration: int, metrics: Mapping[str, float]) -> None:
        self.run.log(numeric(metrics) | {"iteration": iteration})

    def log_train_steps(self, first_step: int, rows: Sequence[Mapping[str, float]]) -> None:
        for step, row in enumerate(rows, start=first_step):
            values = {f"train_step/{k}": v for k, v in numeric(row).items()}
            self.run.log(values | {"train_step": step})

    def log_rollouts(self, iteration: int, rows: Sequence[Mapping[str, object]]) -> None:
        import wandb

        if not rows:
            return
        columns, data = rollout_table(iteration, rows)
        self.run.log({"rollouts": wandb.Table(columns=columns, data=data), "iteration": iteration})

    def log_image(self, name: str, png: bytes, iteration: int) -> None:
        import wandb
        from PIL import Image

        image = wandb.Image(Image.open(io.BytesIO(png)).convert("RGB"), caption=name)
        self.run.log({name: image, "iteration": iteration})

    def finish(self, ok: bool) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if ok else 1)
            self.run = None
