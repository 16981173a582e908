"""Cancelling a run from Prefect: the UI's Cancel button (or `prefect flow-run cancel`, or a
client's `set_flow_run_state(id, Cancelling())`) moves the flow run to Cancelling. A flow
that `rldag run` calls in its own process has no Prefect worker to enforce that, so the run
watches its own flow run's state and, once it is Cancelling, asks the driver to stop at a
safe point (rldag.engine.stop); the flow then ends Cancelled (flows/rl_loop.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

from rldag.engine.stop import CANCEL_EXIT, StopRequest

log = logging.getLogger("rldag.prefect")
POLL_S = 1.0  # seconds between two reads of the flow run's state


def cancelling(flow_run_id: UUID) -> bool:
    """Whether the flow run is being cancelled (or was); an unreachable API says no (the
    outage handling of flows/api_outage.py is the run's, not the watcher's)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run_id).state
    except Exception as err:  # the next poll tries again
        log.debug("could not read the state of flow run %s: %s", flow_run_id, err)
        return False
    return state is not None and (state.is_cancelling() or state.is_cancelled())


@contextmanager
def stop_on_cancel(flow_run_id: UUID, stop: StopRequest, poll_s: float = POLL_S) -> Iterator[None]:
    """Within the block, a cancel of `flow_run_id` in Prefect requests `stop`."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            if cancelling(flow_run_id):
                log.warning("the flow run was cancelled in Prefect: the run stops")
                stop.request("a cancel in Prefect", CANCEL_EXIT)
                return

    thread = threading.Thread(target=watch, name="rldag-cancel-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=poll_s)  # a read in flight may wait out the client's retries
