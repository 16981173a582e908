"""Experiment trackers (MLflow, TensorBoard, W&B) fed from a run's events: `trackers:` in
pipeline.yaml selects them, `tracking:` holds their options."""

from rldag.report.trackers.attach import RunTracking, attach_trackers
from rldag.report.trackers.base import RunInfo, Tracker
from rldag.report.trackers.fanout import TrackerSet

__all__ = ["RunInfo", "RunTracking", "Tracker", "TrackerSet", "attach_trackers"]
