"""Experiment trackers, for real: a run under Prefect reports to an MLflow tracking server
this test starts (read back through its API), to TensorBoard event files (read back with
TensorBoard's EventAccumulator) and to W&B in offline mode (its run files read back); a
tracker whose server dies mid-run only warns; a selected tracker that is not installed is a
validation error."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.cli import main
from rldag.engine.events import IterationFinished, add_listener
from rldag.report.trackers.fanout import TrackerWarning
from tests.support.paths import ROOT
from tests.support.small_pipelines import small_grpo
from tests.support.tracker_servers import MlflowServer, TcpProxy, wandb_records


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """One MLflow tracking server for the whole session. It takes 10-25 s to start: tests
    ask for it before `prefect_api`, so that both start at the same time."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()


def _tiny_run_overrides(tiny_task: Path, tmp_path: Path, iterations: int) -> list[str]:
    return [
        *small_grpo(tiny_task, tmp_path, iterations),
        "nodes.train.params.mini_batch_size=16",  # 2 optimizer steps per iteration
        "ray.enabled=false",
        f"tracking.tensorboard.log_dir={tmp_path}/tb",
    ]


def _scalars(log_dir: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


def _history(records: list, key: str, axis: str) -> dict[int, float]:
    out = {}
    for record in records:
        if record.WhichOneof("record_type") != "history":
            continue
        items = {
            ".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item
        }
        if key in items:
            out[int(items[axis])] = items[key]
    return out


@pytest.mark.slow
def test_a_run_reports_to_mlflow_tensorboard_and_wandb(
    mlflow_server, prefect_api, tiny_task, tmp_path, read_run
):
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client

    from flows.rl_loop import rldag_run

    overrides = _tiny_run_overrides(tiny_task, tmp_path, iterations=3) + [
        "trackers=[mlflow,tensorboard,wandb]",
        f"tracking.mlflow.tracking_uri={mlflow_server.url}",
        "tracking.mlflow.experiment=trackers-e2e",
        "tracking.wandb.mode=offline",
        f"tracking.wandb.dir={tmp_path}/wb",
        "tracking.wandb.project=trackers-e2e",
    ]
    run_id = rldag_run(str(ROOT / "pipeline.yaml"), overrides)
    run_dir = tmp_path / "runs" / run_id
    metrics = read_run(run_dir).metrics()
    rewards = {m["iteration"]: m["reward/mean"] for m in metrics}
    losses = [
        row["loss"]
        for i in range(3)
        for row in pq.read_table(run_dir / f"iter={i}" / "train.parquet").to_pylist()
    ]
    assert len(rewards) == 3 and len(losses) == 6
    pipeline_yaml = (run_dir / "pipeline.yaml").read_text()

    # MLflow, through the server's API
    client = MlflowClient(mlflow_server.url)
    experiment = client.get_experiment_by_name("trackers-e2e")
    (run,) = client.search_runs([experiment.experiment_id], f"tags.`rldag.run_id` = '{run_id}'")
    assert run.info.run_name == run_id and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert {m.step: m.value for m in history} == pytest.approx(rewards)
    steps = client.get_metric_history(run.info.run_id, "train_step/loss")
    assert [m.step for m in sorted(steps, key=lambda m: m.step)] == list(range(6))
    assert [m.value for m in sorted(steps, key=lambda m: m.step)] == pytest.approx(losses)
    assert run.data.params["nodes.train.params.lr"] == "0.0003"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"pipeline.yaml", "reward_curve.png", "rollouts"} <= artifacts
    local = Path(client.download_artifacts(run.info.run_id, "pipeline.yaml", str(tmp_path)))
    assert local.read_text() == pipeline_yaml
    png = Path(client.download_artifacts(run.info.run_id, "reward_curve.png", str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rollouts = client.list_artifacts(run.info.run_id, "rollouts")
    assert len(rollouts) == 3  # one table per iteration
    table = json.loads(
        Path(
            client.download_artifacts(run.info.run_id, rollouts[0].path, str(tmp_path))
        ).read_text()
    )
    assert {"prompt", "response", "reward"} <= set(table["columns"])
    url = run.data.tags["rldag.prefect_flow_run_url"]  # the test server has a UI
    with get_client(sync_client=True) as prefect:
        flow_run = prefect.read_flow_run(url.rsplit("/", 1)[-1])
    assert flow_run.parameters["pipeline"] == str(ROOT / "pipeline.yaml")

    # TensorBoard, with its own reader
    tb_dir = tmp_path / "tb" / run_id
    assert _scalars(tb_dir, "reward/mean") == pytest.approx(rewards)
    assert list(_scalars(tb_dir, "train_step/loss").values()) == pytest.approx(losses)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb_dir), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    (image,) = events.Images("reward_curve")
    assert image.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n" and image.width == 700
    (text,) = events.Tensors("pipeline.yaml/text_summary")
    shown = textwrap.dedent(text.tensor_proto.string_val[0].decode())  # verbatim (indented)
    assert shown == pipeline_yaml.rstrip("\n")
    assert len(events.Tensors("rollouts/text_summary")) == 3

    # W&B offline run files
    (wb_run,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    records = wandb_records(wb_run)
    (start,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert start.display_name == run_id and start.project == "trackers-e2e"
    config = {u.key: json.loads(u.value_json) for u in start.config.update}
    assert config["rldag"]["run_id"] == run_id and config["prefect_flow_run_url"] == url
    assert config["nodes"]["train"]["params"]["lr"] == 0.0003
    assert _history(records, "reward/mean", "iteration") == pytest.approx(rewards)
    train = _history(records, "train_step/loss", "train_step")
    assert list(train) == list(range(6)) and list(train.values()) == pytest.approx(losses)
    assert (wb_run / "files" / "pipeline.yaml").read_text() == pipeline_yaml
    assert list((wb_run / "files" / "media" / "images").glob("reward_curve_*.png"))
    assert len(list((wb_run / "files" / "media" / "table").glob("rollouts_*.table.json"))) == 3
    exits = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exits and exits[-1].exit_code == 0


@pytest.mark.slow
def test_a_tracker_whose_server_dies_mid_run_only_warns(
    mlflow_server, prefect_api, tiny_task, tmp_path, read_run
):
    from mlflow import MlflowClient

    from flows.rl_loop import rldag_run

    proxy = TcpProxy(mlflow_server.port)
    direct = MlflowClient(mlflow_server.url)

    def logged_iterations() -> list[int]:
        experiment = direct.get_experiment_by_name("trackers-dying")
        runs = direct.search_runs([experiment.experiment_id]) if experiment else []
        if not runs:
            return []
        return sorted(m.step for m in direct.get_metric_history(runs[0].info.run_id, "reward/mean"))

    def cut_after_first_iteration(event: object) -> None:
        if isinstance(event, IterationFinished) and event.iteration == 1:
            deadline = time.monotonic() + 60
            while logged_iterations() != [0] and time.monotonic() < deadline:
                time.sleep(0.2)  # the trackers log in the background: let iteration 0 land
            proxy.cut()

    remove = add_listener(cut_after_first_iteration)
    overrides = _tiny_run_overrides(tiny_task, tmp_path, iterations=4) + [
        "trackers=[mlflow,tensorboard]",
        f"tracking.mlflow.tracking_uri={proxy.url}",
        "tracking.mlflow.experiment=trackers-dying",
        "tracking.mlflow.http_retries=0",
    ]
    try:
        with pytest.warns(TrackerWarning) as caught:
            run_id = rldag_run(str(ROOT / "pipeline.yaml"), overrides)
    finally:
        remove()
    mine = [w for w in caught if issubclass(w.category, TrackerWarning)]
    assert len(mine) == 1 and "tracker mlflow failed" in str(mine[0].message)
    metrics = read_run(tmp_path / "runs", run_id).metrics()
    assert [m["iteration"] for m in metrics] == [0, 1, 2, 3]  # training went on
    assert logged_iterations() == [0]  # what reached MLflow before it was gone
    assert sorted(_scalars(tmp_path / "tb" / run_id, "reward/mean")) == [0, 1, 2, 3]
    assert any(run_id in m for m in _warning_logs("tracker mlflow failed"))  # in the Prefect UI


def _warning_logs(text: str) -> list[str]:
    """WARNING+ messages in the Prefect API's run logs that contain `text` (the API log
    handler sends its records in batches, so wait a little for them)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterLevel

    deadline = time.monotonic() + 20
    with get_client(sync_client=True) as client:
        while True:
            logs = client.read_logs(LogFilter(level=LogFilterLevel(ge_=30)), limit=200)
            found = [log.message for log in logs if text in log.message]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(1)


def test_a_selected_tracker_that_is_not_installed_is_a_validation_error(
    write_yaml, dataset, capsys, monkeypatch
):
    from tests.support.pipelines import scoring_pipeline

    path = write_yaml(scoring_pipeline(dataset, trackers=["tensorboard", "wandb"]))
    assert main(["validate", str(path)]) == 0
    monkeypatch.setitem(sys.modules, "wandb", None)  # what an environment without it sees
    assert main(["validate", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}: trackers: tracker 'wandb' needs the Python package 'wandb'" in err
    assert "pip install 'rldag[wandb]'" in err


def test_an_unknown_tracker_is_a_spec_error_naming_the_choices(write_yaml, dataset, capsys):
    from tests.support.pipelines import scoring_pipeline

    path = write_yaml(scoring_pipeline(dataset, trackers=["mlflow", "comet"]))
    assert main(["validate", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "trackers" in err and "comet" in err and "tensorboard" in err


def test_a_tracker_listed_twice_is_a_spec_error(write_yaml, dataset, capsys):
    from tests.support.pipelines import scoring_pipeline

    path = write_yaml(scoring_pipeline(dataset, trackers=["tensorboard", "tensorboard"]))
    assert main(["validate", str(path)]) == 2
    assert "trackers: tracker 'tensorboard' is listed twice" in capsys.readouterr().err
