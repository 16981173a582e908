"""MLflow: one MLflow run per rldag run, in an experiment named after the pipeline. Metrics
per iteration and per optimizer step, the pipeline as params and as pipeline.yaml, the
reward curve and sample rollouts as artifacts, the run id and Prefect URL as tags."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rldag.config.tracking import MlflowSpec
from rldag.report.trackers.base import RunInfo, flatten, numeric, rollout_table

MAX_PARAMS_PER_CALL = 100  # MLflow's log_batch limit
MAX_METRICS_PER_CALL = 1000
MAX_PARAM_CHARS = 6000


class MlflowTracker:
    name = "mlflow"

    def __init__(self, spec: MlflowSpec) -> None:
        self.spec = spec
        self.client = None
        self.mlflow_run_id = ""
        self._steps: list = []  # train-step metrics, sent with the iteration's (one request)

    def start(self, info: RunInfo) -> None:
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(int(self.spec.http_timeout_s))
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(self.spec.http_retries)
        from mlflow import MlflowClient

        self.client = client = MlflowClient(tracking_uri=self.spec.tracking_uri)
        name = self.spec.experiment or info.pipeline_name
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        tags = {"rldag.run_id": info.run_id, "rldag.run_uri": info.run_uri}
        note = f"rldag run `{info.run_id}`, stored at `{info.run_uri}`"
        if info.flow_run_url:
            tags["rldag.prefect_flow_run_url"] = info.flow_run_url
            note += f"; Prefect flow run: {info.flow_run_url}"
        if info.first_iteration:
            tags["rldag.resumed_at_iteration"] = str(info.first_iteration)
        tags["mlflow.note.content"] = note
        run = client.create_run(experiment_id, run_name=info.run_id, tags=tags)
        self.mlflow_run_id = run.info.run_id
        self._log_params(flatten(info.config))
        client.log_text(self.mlflow_run_id, info.pipeline_yaml, "pipeline.yaml")

    def _log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v[:MAX_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_CALL):
            self.client.log_batch(self.mlflow_run_id, params=items[i : i + MAX_PARAMS_PER_CALL])

    def _metrics(self, values: Mapping[str, float], step: int) -> list:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        return [Metric(k, v, now, step) for k, v in values.items()]

    def _send(self, metrics: list) -> None:
        for i in range(0, len(metrics), MAX_METRICS_PER_CALL):
            batch = metrics[i : i + MAX_METRICS_PER_CALL]
            self.client.log_batch(self.mlflow_run_id, metrics=batch)

    def log_iteration(self, iteration: int, metrics: Mapping[str, float]) -> None:
        values = numeric(metrics)
        values.pop("iteration", None)
        pending, self._steps = self._steps, []
        self._send(pending + self._metrics(values, iteration))

    def log_train_steps(self, first_step: int, rows: Sequence[Mapping[str, float]]) -> None:
        for step, row in enumerate(rows, start=first_step):
            values = {f"train_step/{k}": v for k, v in numeric(row).items()}
            self._steps += self._metrics(values, step)

    def log_rollouts(self, iteration: int, rows: Sequence[Mapping[str, object]]) -> None:
        if not rows:
            return
        columns, data = rollout_table(iteration, rows)
        table = {"columns": columns, "data": data}  # the layout of MLflow's log_table files
        self.client.log_dict(self.mlflow_run_id, table, f"rollouts/iter={iteration:06d}.json")

    def log_image(self, name: str, png: bytes, iteration: int) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.png"
            path.write_bytes(png)
            self.client.log_artifact(self.mlflow_run_id, str(path))

    def finish(self, ok: bool) -> None:
        if self.client is not None and self.mlflow_run_id:
            pending, self._steps = self._steps, []
            self._send(pending)
            self.client.set_terminated(self.mlflow_run_id, "FINISHED" if ok else "FAILED")
