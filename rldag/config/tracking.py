"""`trackers:` and `tracking:` of pipeline.yaml: which experiment trackers a run reports to,
and each one's options."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from enum import StrEnum

from rldag.config.errors import SpecError


class TrackerName(StrEnum):
    """Experiment trackers a run can report to (`trackers: [...]`)."""

    mlflow = "mlflow"
    tensorboard = "tensorboard"
    wandb = "wandb"


# tracker -> (the module it needs, the distribution that provides it); the extra is its name
TRACKER_PACKAGES = {
    TrackerName.mlflow: ("mlflow", "mlflow-skinny"),
    TrackerName.tensorboard: ("tensorboard", "tensorboard"),
    TrackerName.wandb: ("wandb", "wandb"),
}


@dataclass
class MlflowSpec:
    """`tracking.mlflow`: where MLflow runs go."""

    tracking_uri: str | None = None  # default: MLFLOW_TRACKING_URI, else MLflow's own default
    experiment: str | None = None  # default: the pipeline's name
    http_timeout_s: float = 10.0  # per request (sets MLFLOW_HTTP_REQUEST_TIMEOUT)
    http_retries: int = 2  # per request (sets MLFLOW_HTTP_REQUEST_MAX_RETRIES)


@dataclass
class TensorboardSpec:
    """`tracking.tensorboard`: where event files go."""

    log_dir: str = "tensorboard"  # event files go to <log_dir>/<run id>/


class WandbMode(StrEnum):
    """W&B's own modes: online syncs as it goes, offline writes run files to sync later."""

    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class WandbSpec:
    """`tracking.wandb`: the W&B project and mode (the API key stays in WANDB_API_KEY)."""

    project: str | None = None  # default: the pipeline's name
    entity: str | None = None  # a team or user; default: the key's default entity
    mode: WandbMode = WandbMode.online  # online syncs as it goes; offline writes files to sync
    dir: str | None = None  # the parent of wandb/ run files; default: the working directory
    tags: list[str] = field(default_factory=list)  # tags of the W&B run


@dataclass
class TrackingSpec:
    """Per-tracker options; a tracker reports only when it is listed in `trackers`."""

    mlflow: MlflowSpec = field(default_factory=MlflowSpec)  # MLflow's options
    tensorboard: TensorboardSpec = field(default_factory=TensorboardSpec)  # TensorBoard's
    wandb: WandbSpec = field(default_factory=WandbSpec)  # W&B's options


def check_trackers(trackers: list[TrackerName], where: str) -> None:
    """Each tracker listed once, and its package installed (else how to install it)."""
    for i, name in enumerate(trackers):
        if name in trackers[:i]:
            raise SpecError(f"tracker '{name}' is listed twice", path="trackers", where=where)
        module, distribution = TRACKER_PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise SpecError(
                f"tracker '{name}' needs the Python package '{module}', which is not installed; "
                f"install it with: pip install 'rldag[{name}]' (or: pip install {distribution})",
                path="trackers",
                where=where,
            )
