"""The run's experiment trackers for the length of a flow: attached with the Prefect
flow-run URL (when there is a UI to link to), closed as finished or failed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prefect.runtime import flow_run
from prefect.settings import PREFECT_UI_URL

from rldag.engine.run import Run
from rldag.report.trackers import RunTracking, attach_trackers


def flow_run_url() -> str | None:
    """The Prefect UI page of the flow run in progress; None without a UI (ephemeral API)."""
    if not PREFECT_UI_URL.value() or flow_run.get_id() is None:
        return None
    return flow_run.get_flow_run_ui_url()


@contextmanager
def tracking(run: Run) -> Iterator[RunTracking]:
    """Report `run` to its pipeline's trackers while the block runs."""
    tracked = attach_trackers(run, flow_run_url())
    try:
        yield tracked
    except BaseException:
        tracked.close(ok=False)
        raise
    tracked.close(ok=True)
