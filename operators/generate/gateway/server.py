"""The gateway's HTTP server: OpenAI's API per episode session, on a loopback port.

Each episode's base URL is ``http://127.0.0.1:<port>/s/<session>/v1`` (the session id, 128
random bits, in the path), serving ``POST /chat/completions``, ``POST /completions`` and
``GET /models``. Every request needs the run's bearer token (the door of the rollout servers,
``operators.rollout.guard``); an unknown or ended session is 404 ``session_not_found``; a
malformed or unsupported request is a 4xx with OpenAI's error body, recorded in its session.
The server runs uvicorn on a daemon thread of the rollout worker that hosts the sessions, so
an episode's requests all reach the worker (and the engine cache) that holds its session. The
app is plain ASGI: the OpenAI client the node hands each agent calls it in process, on the
agents' event loop (``node.py``); clients the agent makes itself reach it over HTTP.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from operators.generate.gateway.openai_requests import APIError, parse_chat, parse_completion
from operators.generate.gateway.openai_responses import (
    chat_body,
    completion_body,
    error_json,
    models_body,
)
from operators.generate.gateway.session import Session
from operators.rollout.guard import ASGIApp, ServerGuard


class Sessions:
    """The open sessions by id (thread-safe: opened and closed from the agents' thread)."""

    def __init__(self) -> None:
        self._open: dict[str, Session] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    def open(self, session: Session) -> str:
        sid = secrets.token_hex(16)
        with self._lock:
            self._open[sid] = session
        return sid

    def get(self, sid: str) -> Session:
        with self._lock:
            session = self._open.get(sid)
        if session is None:
            raise APIError(
                404, f"no session {sid!r}: it ended or never existed", code="session_not_found"
            )
        return session

    def close(self, sid: str) -> Session | None:
        with self._lock:
            return self._open.pop(sid, None)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
JSON_HEADERS = [(b"content-type", b"application/json")]


class GatewayApp:
    """The gateway's routes as a plain ASGI app: one path split and one JSON parse per request,
    no framework between the socket (or the in-process transport) and the session."""

    def __init__(self, sessions: Sessions, model: str) -> None:
        self.sessions, self.model = sessions, model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan and websockets: nothing to serve
        raw = await _body(receive)  # first: the door's size cap answers 413 while it reads
        try:
            status, body = 200, await self._route(scope, raw)
        except APIError as err:
            status, body = err.status, err.body()
        except Exception as err:  # a bug of ours: the agent gets a 500, the server goes on
            status = 500
            body = APIError(500, f"{type(err).__name__}: {err}", type="server_error").body()
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        headers = [*JSON_HEADERS, (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _route(self, scope: Scope, raw: bytes) -> dict[str, Any]:
        """The body of the endpoint ``scope`` names; APIError for a path or method it has not."""
        parts = scope["path"].split("/", 4)  # "", "s", sid, "v1", endpoint
        if len(parts) != 5 or parts[1] != "s" or parts[3] != "v1" or not parts[2]:
            raise APIError(404, f"no route {scope['path']}", code="not_found")
        sid, endpoint, method = parts[2], parts[4], scope["method"]
        wanted = ENDPOINTS.get(endpoint)
        if wanted is None:
            raise APIError(404, f"no route {scope['path']}", code="not_found")
        if method != wanted:
            raise APIError(
                405, f"{method} {scope['path']}: use {wanted}", code="method_not_allowed"
            )
        session = self.sessions.get(sid)
        if endpoint == "models":
            return models_body(self.model)
        return await self._served(session, raw, endpoint == "chat/completions")

    async def _served(self, session: Session, raw: bytes, chat: bool) -> dict[str, Any]:
        """One chat or text completion of ``session``; a refusal is recorded in it."""
        p = session.setup.params
        try:
            try:
                payload = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise APIError(400, f"the body is not JSON: {err}", param="body") from None
            parse, sample, body = (
                (parse_chat, session.chat, chat_body)
                if chat
                else (parse_completion, session.complete, completion_body)
            )
            req = parse(payload, p.temperature, p.top_p)
            choices = await session.served(sample(req))
            prompt = len(session.seg.episode.prompt_ids) if session.seg else 0
            extra = {"call_prefix": f"call_{session.requests}"} if chat else {}
            return body(
                self.model,
                choices,
                prompt,
                tokenizer=session.setup.tokenizer,
                logprobs=req.sampling.logprobs,
                **extra,
            )
        except APIError as err:
            session.refused(err)
            raise


ENDPOINTS = {"chat/completions": "POST", "completions": "POST", "models": "GET"}


async def _body(receive: Receive) -> bytes:
    """The request's body, read to its end."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def build_app(sessions: Sessions, token: str, model: str) -> ASGIApp:
    """The gateway's app, behind ``token``; ``model`` is the id ``/v1/models`` lists."""
    return ServerGuard(GatewayApp(sessions, model), token=token, error_body=error_json)


class GatewayServer:
    """uvicorn serving ``app`` on 127.0.0.1 (a free port) from a daemon thread."""

    def __init__(self, app: ASGIApp, startup_s: float = 30.0) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepts
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", proxy_headers=False
        )
        self.server = uvicorn.Server(config)
        name = f"rldag-gateway-{uuid.uuid4().hex[:6]}"
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name=name, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + startup_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the agent gateway did not start")
            time.sleep(0.01)

    def url(self, sid: str) -> str:
        """The base URL of session ``sid`` (what ``openai.AsyncOpenAI(base_url=...)`` takes)."""
        return f"http://127.0.0.1:{self.port}/s/{sid}/v1"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
