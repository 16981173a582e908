"""Riding out a restart of the Prefect server: tell an unreachable API from other errors, wait
(bounded by `faults.prefect_outage_s`) until it answers again, and publish what is only for
the UI (artifacts) on a best-effort basis, so that a server restart never stops a run.

Prefect's client retries a request whose connection fails only on a client that has already
connected once; a new one (Prefect makes one per subflow start) fails at once. So the RL loop
retries an iteration's subflow that could not start, and names the server when it gives up.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

import httpx

from rldag.config.faults import FaultsSpec

log = logging.getLogger("rldag.prefect")
T = TypeVar("T")
POLL_S = 1.0
UNAVAILABLE = {502, 503, 504}


def bound_api_requests(faults: FaultsSpec) -> None:
    """Bound each Prefect API request by `faults.prefect_request_timeout_s` (Prefect reads
    PREFECT_API_REQUEST_TIMEOUT once, when its settings load; one set in the environment
    stands)."""
    os.environ.setdefault("PREFECT_API_REQUEST_TIMEOUT", f"{faults.prefect_request_timeout_s:g}")


def api_url() -> str:
    """The Prefect API this process talks to ("" for an ephemeral one not started yet)."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or ""


def unreachable(err: BaseException | None) -> bool:
    """Whether `err` (or an error it was raised from) is the Prefect API not answering."""
    seen = 0
    while err is not None and seen < 20:
        if isinstance(err, httpx.TransportError):
            return True
        if isinstance(err, httpx.HTTPStatusError) and err.response.status_code in UNAVAILABLE:
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def outage_message(err: BaseException) -> str:
    """What a user reads when the run gives up on the API."""
    return f"the Prefect server at {api_url() or '(ephemeral)'} is unreachable ({err!r})"


def wait_for_api(deadline: float) -> bool:
    """Poll the API's /health until it answers (True) or `deadline` (time.monotonic) passes."""
    url = api_url()
    if not url:
        return False
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=POLL_S * 2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S)
    return False


def best_effort(what: str, publish: Callable[..., T], *args: object) -> T | None:
    """`publish(*args)`, or, while the API is unreachable, a warning and None: artifacts are
    for the UI, the run's data is in storage."""
    try:
        return publish(*args)
    except Exception as err:
        if not unreachable(err):
            raise
        log.warning("could not publish %s: %s", what, outage_message(err))
        return None
