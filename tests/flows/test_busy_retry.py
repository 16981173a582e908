"""A write the Prefect server refuses because SQLite is busy is run again inside the server
within milliseconds (flows/busy_retry.py), not by the client seconds later: tested on a real
Starlette app that answers as Prefect's does (503 from its error handler, which Starlette
raises again once it has answered), through a real httpx client."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.busy_retry import PAUSES_S, RetryBusy


class Busy(Exception):
    """Stands for sqlite3's SQLITE_BUSY, the error Prefect's server answers 503 for."""


def app_busy_for(attempts: int) -> tuple[Starlette, list[bytes]]:
    """An app whose write fails busy `attempts` times, then echoes the body it got."""
    seen: list[bytes] = []

    async def write(request: Request) -> JSONResponse:
        seen.append(await request.body())
        if len(seen) <= attempts:
            raise Busy
        return JSONResponse({"got": seen[-1].decode()}, status_code=201)

    async def read(request: Request) -> JSONResponse:
        seen.append(b"")
        raise Busy

    async def busy(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"exception_message": "Service Unavailable"}, status_code=503)

    routes = [Route("/runs", write, methods=["POST"]), Route("/runs", read, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={Exception: busy}), seen


def call(app: RetryBusy, method: str, body: bytes = b"") -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            return await client.request(method, "/runs", content=body)

    return asyncio.run(go())


def test_a_busy_write_is_answered_by_its_retry_with_the_same_body():
    app, seen = app_busy_for(3)
    middleware = RetryBusy(app)
    response = call(middleware, "POST", b'{"name": "iteration-7"}')
    assert response.status_code == 201 and response.json() == {"got": '{"name": "iteration-7"}'}
    assert seen == [b'{"name": "iteration-7"}'] * 4 and middleware.retried == 3


def test_past_its_pauses_the_503_reaches_the_client_whose_backoff_applies():
    app, seen = app_busy_for(100)
    middleware = RetryBusy(app, pauses_s=(0.001, 0.002))
    response = call(middleware, "POST", b"x")
    assert response.status_code == 503 and response.json()["exception_message"]
    assert len(seen) == 3 and sum(PAUSES_S) < 2.0  # all of them: under the client's first wait


def test_a_read_is_passed_through_once():
    app, seen = app_busy_for(0)
    response = call(RetryBusy(app), "GET")
    assert response.status_code == 503 and len(seen) == 1
