"""Telling an unreachable Prefect API from other errors (flows/api_outage.py), and publishing
UI-only artifacts on a best-effort basis while it is down."""

from __future__ import annotations

import httpx
import pytest

from flows.api_outage import best_effort, unreachable


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
