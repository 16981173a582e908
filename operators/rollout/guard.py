"""The rollout server's door: every request but the health checks needs the run's bearer
token (``Authorization: Bearer <token>``, SGLang's ``--api-key`` header), and request bodies
are capped. A plain ASGI middleware, so a refused request never reaches an endpoint; the agent
gateway uses the same door with OpenAI-shaped refusals (``error_body``).

The token is made per run (``new_token``) by whoever starts the servers and reaches them
through the environment (``TOKEN_ENV``), never a command line or the resolved pipeline.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

TOKEN_ENV = "RLDAG_ROLLOUT_TOKEN"  # the variable a server (or a client of running ones) reads
OPEN_PATHS = frozenset({"/health", "/health_generate"})  # liveness probes change nothing
MAX_BODY_BYTES = 16 * 2**20  # a /generate of ~1M token ids; larger bodies get 413
CHALLENGE = [(b"www-authenticate", b"Bearer")]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ErrorBody = Callable[[int, str], dict[str, Any]]  # (status, message) -> the JSON refusal


def rollout_error(status: int, message: str) -> dict[str, Any]:
    """A refusal as the rollout servers word it (SGLang's error shape)."""
    return {"object": "error", "message": message, "code": status}


def new_token() -> str:
    """A fresh bearer token (256 random bits)."""
    return secrets.token_urlsafe(32)


def auth_headers(token: str) -> dict[str, str]:
    """The headers a client sends with every request."""
    return {"Authorization": f"Bearer {token}"}


def inside(path: str | Path, root: str | Path) -> bool:
    """Whether `path`, with links and `..` resolved, lies under the directory `root`."""
    return Path(path).resolve().is_relative_to(Path(root).resolve())


class _TooLarge(Exception):
    pass


class ServerGuard:
    """Refuse requests without the bearer token (401) or with a body over the cap (413)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        max_body_bytes: int = MAX_BODY_BYTES,
        error_body: ErrorBody = rollout_error,
    ) -> None:
        if not token:
            raise ValueError(f"a rollout server needs a bearer token (set {TOKEN_ENV})")
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self.max_body_bytes = max_body_bytes
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"")
        if scope["path"] not in OPEN_PATHS and not hmac.compare_digest(given, self._expected):
            await self._reply(send, 401, "missing or wrong bearer token", CHALLENGE)
            return
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_body_bytes:
            await self._reply(send, 413, f"request body over {self.max_body_bytes} bytes")
            return
        seen = 0

        async def capped() -> Message:  # a chunked body has no content-length: count it
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body_bytes:
                raise _TooLarge
            return message

        try:
            await self.app(scope, capped, send)
        except _TooLarge:  # raised while the endpoint reads its body, before it answers
            await self._reply(send, 413, f"request body over {self.max_body_bytes} bytes")

    async def _reply(
        self, send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        body = json.dumps(self.error_body(status, message)).encode()
        headers = [(b"content-type", b"application/json"), *(extra or [])]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
