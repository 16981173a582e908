"""TensorBoard: event files under <log_dir>/<run id>/ (torch's SummaryWriter). Scalars per
iteration and per optimizer step, the reward curve as an image, the pipeline, the run's
links and sample rollouts as text."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from rldag.config.tracking import TensorboardSpec
from rldag.report.rollouts import rollouts_markdown
from rldag.report.trackers.base import RunInfo, numeric


class TensorboardTracker:
    name = "tensorboard"

    def __init__(self, spec: TensorboardSpec) -> None:
        self.spec = spec
        self.writer = None

    def start(self, info: RunInfo) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(self.spec.log_dir) / info.run_id
        self.writer = SummaryWriter(log_dir=str(self.log_dir))
        links = [f"run id: `{info.run_id}`", f"stored at: `{info.run_uri}`"]
        if info.flow_run_url:
            links.append(f"Prefect flow run: {info.flow_run_url}")
        self.writer.add_text("run", "  \n".join(links), info.first_iteration)
        self.writer.add_text("pipeline.yaml", _code(info.pipeline_yaml), info.first_iteration)
        self.writer.flush()

    def log_iteration(self, iteration: int, metrics: Mapping[str, float]) -> None:
        for key, value in numeric(metrics).items():
            if key != "iteration":
                self.writer.add_scalar(key, value, iteration)
        self.writer.flush()  # so `tensorboard --logdir` shows the run as it goes

    def log_train_steps(self, first_step: int, rows: Sequence[Mapping[str, float]]) -> None:
        for step, row in enumerate(rows, start=first_step):
            for key, value in numeric(row).items():
                self.writer.add_scalar(f"train_step/{key}", value, step)

    def log_rollouts(self, iteration: int, rows: Sequence[Mapping[str, object]]) -> None:
        if rows:
            self.writer.add_text("rollouts", rollouts_markdown(rows, iteration), iteration)

    def log_image(self, name: str, png: bytes, iteration: int) -> None:
        import numpy as np
        from PIL import Image

        pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        self.writer.add_image(name, pixels, iteration, dataformats="HWC")

    def finish(self, ok: bool) -> None:
        if self.writer is not None:
            self.writer.close()


def _code(text: str) -> str:
    # TensorBoard renders text as Markdown: indent by 4 spaces to keep it verbatim
    return "\n".join("    " + line for line in text.splitlines())
