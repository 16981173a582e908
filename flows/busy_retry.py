"""The Prefect server that `rldag run` starts, with writes its SQLite database refused as busy
retried inside the server within milliseconds, instead of by the client two seconds later.

On SQLite a write transaction that began as a read fails at once with SQLITE_BUSY when
another connection wrote meanwhile (the busy timeout does not apply to that upgrade). Prefect's
server answers 503 and its client waits ``2 ** attempt`` seconds before trying again: with
iterations overlapping (async runs), creating a task or flow run hit this every few
iterations and stalled the run ~2 s each time (measured with bench/orchestration_overhead.py).
`RetryBusy` replays such a write in the server after a short pause, as the client would (the
failed transaction was rolled back); after `PAUSES_S` it lets the 503 through and the client's
own backoff applies as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

PAUSES_S = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64)  # ~1.3 s in all
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
BUSY = 503  # what Prefect's server answers for an error its client may retry


class RetryBusy:
    """ASGI middleware: a write answered 503 is run again after each of `PAUSES_S`."""

    def __init__(self, app: ASGIApp, pauses_s: tuple[float, ...] = PAUSES_S) -> None:
        self.app = app
        self.pauses_s = pauses_s
        self.retried = 0  # writes run again (for tests and curiosity)

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITES:
            await self.app(scope, receive, send)
            return
        body = await _whole_body(receive)
        for pause in (*self.pauses_s, None):
            answer = await self._attempt(scope, body, receive)
            if pause is None or not answer or answer[0].get("status") != BUSY:
                break
            self.retried += 1
            await asyncio.sleep(pause)
        for message in answer:
            await send(message)

    async def _attempt(
        self, scope: MutableMapping[str, Any], body: bytes, receive: Receive
    ) -> list[Message]:
        """One run of the request: the response's messages, held back until it is done."""
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()  # after the body: the client's disconnect, if any
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        try:
            await self.app(dict(scope), replay, hold)
        except Exception:
            if not held:
                raise
            # Starlette's error middleware raises again once it has answered (for the
            # server's log); the answer stands, and is retried or sent.
        return held


async def _whole_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def create_app() -> ASGIApp:
    """Prefect's server app (as `prefect server start` and the ephemeral server make it),
    behind `RetryBusy`: the factory uvicorn runs for the server rldag starts."""
    from prefect.server.api.server import create_app as prefect_app

    return RetryBusy(prefect_app())
