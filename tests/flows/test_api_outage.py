"""Telling an unreachable Prefect API from other errors (flows/api_outage.py), publishing
UI-only artifacts on a best-effort basis while it is down, and bounding each request by
`faults.prefect_request_timeout_s`."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from flows.api_outage import best_effort, unreachable
from tests.support.paths import ROOT


def _status_error(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:4200/api/flow_runs/")
    response = httpx.Response(code, request=request)
    return httpx.HTTPStatusError(f"{code}", request=request, response=response)


def test_connection_failures_and_unavailable_answers_are_an_unreachable_api():
    assert unreachable(httpx.ConnectError("All connection attempts failed"))
    assert unreachable(httpx.ReadTimeout("timed out"))
    assert unreachable(_status_error(503))
    assert not unreachable(_status_error(422))  # the API answered: a real error
    assert not unreachable(ValueError("bad value"))
    assert not unreachable(None)


def test_an_error_raised_from_a_connection_failure_is_an_unreachable_api():
    try:
        try:
            raise httpx.ConnectError("refused")
        except httpx.ConnectError as err:
            raise RuntimeError("could not create the flow run") from err
    except RuntimeError as err:
        assert unreachable(err)


def test_best_effort_skips_only_an_unreachable_api(caplog):
    def down() -> None:
        raise httpx.ConnectError("refused")

    def broken() -> None:
        raise KeyError("artifact")

    assert best_effort("the progress", lambda: 7) == 7
    assert best_effort("the progress", down) is None
    assert "could not publish the progress" in caplog.text
    with pytest.raises(KeyError):
        best_effort("the progress", broken)


PREFECT_TIMEOUT = (
    "from flows.api_outage import bound_api_requests\n"
    "from rldag.config.faults import FaultsSpec\n"
    "bound_api_requests(FaultsSpec(prefect_request_timeout_s=7))\n"
    "from prefect.settings import PREFECT_API_REQUEST_TIMEOUT\n"
    "print(PREFECT_API_REQUEST_TIMEOUT.value())\n"
)


@pytest.mark.parametrize(
    ("env", "seconds"), [({}, "7.0"), ({"PREFECT_API_REQUEST_TIMEOUT": "3"}, "3.0")]
)
def test_faults_bound_prefect_requests_unless_the_environment_does(env, seconds):
    clean = {k: v for k, v in os.environ.items() if k != "PREFECT_API_REQUEST_TIMEOUT"}
    done = subprocess.run(
        [sys.executable, "-c", PREFECT_TIMEOUT],
        env=clean | env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split()[-1] == seconds
