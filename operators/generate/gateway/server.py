"""The gateway's HTTP server: OpenAI's API per episode session, on a loopback port.

Each episode's base URL is ``http://127.0.0.1:<port>/s/<session>/v1`` (the session id, 128
random bits, in the path), serving ``POST /chat/completions``, ``POST /completions`` and
``GET /models``. Every request needs the run's bearer token (the door of the rollout servers,
``operators.rollout.guard``); an unknown or ended session is 404 ``session_not_found``; a
malformed or unsupported request is a 4xx with OpenAI's error body, recorded in its session.
The server runs uvicorn on a daemon thread of the rollout worker that hosts the sessions, so
an episode's requests all reach the worker (and the engine cache) that holds its session.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from operators.generate.gateway.openai_requests import APIError, parse_chat, parse_completion
from operators.generate.gateway.openai_responses import (
    chat_body,
    completion_body,
    error_json,
    models_body,
)
from operators.generate.gateway.session import Session
from operators.rollout.guard import ServerGuard


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


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise APIError(400, f"the body is not JSON: {err}", param="body") from None


def build_app(sessions: Sessions, token: str, model: str) -> FastAPI:
    """The gateway's app, behind ``token``; ``model`` is the id ``/v1/models`` lists."""
    app = FastAPI(title="rldag agent gateway", openapi_url=None, docs_url=None, redoc_url=None)
    app.add_middleware(ServerGuard, token=token, error_body=error_json)

    @app.exception_handler(APIError)
    async def api_error(_request: Request, err: APIError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, err: HTTPException) -> JSONResponse:
        code = "not_found" if err.status_code == 404 else None
        return JSONResponse(
            APIError(err.status_code, str(err.detail), code=code).body(),
            status_code=err.status_code,
        )

    @app.exception_handler(Exception)
    async def server_error(_request: Request, err: Exception) -> JSONResponse:
        body = APIError(500, f"{type(err).__name__}: {err}", type="server_error").body()
        return JSONResponse(body, status_code=500)

    async def served(sid: str, request: Request, chat: bool) -> dict[str, Any]:
        """One chat or text completion of session `sid`; a refusal is recorded in it."""
        session = sessions.get(sid)
        p = session.setup.params
        try:
            parse, sample, body = (
                (parse_chat, session.chat, chat_body)
                if chat
                else (parse_completion, session.complete, completion_body)
            )
            req = parse(await _body(request), p.temperature, p.top_p)
            choices = await sample(req)
            prompt = len(session.seg.episode.prompt_ids) if session.seg else 0
            extra = {"call_prefix": f"call_{session.requests}"} if chat else {}
            return body(
                model,
                choices,
                prompt,
                tokenizer=session.setup.tokenizer,
                logprobs=req.sampling.logprobs,
                **extra,
            )
        except APIError as err:
            session.refused(err)
            raise

    @app.post("/s/{sid}/v1/chat/completions")
    async def chat(sid: str, request: Request) -> dict[str, Any]:
        return await served(sid, request, chat=True)

    @app.post("/s/{sid}/v1/completions")
    async def complete(sid: str, request: Request) -> dict[str, Any]:
        return await served(sid, request, chat=False)

    @app.get("/s/{sid}/v1/models")
    async def models(sid: str) -> dict[str, Any]:
        sessions.get(sid)
        return models_body(model)

    return app


class GatewayServer:
    """uvicorn serving ``app`` on 127.0.0.1 (a free port) from a daemon thread."""

    def __init__(self, app: FastAPI, startup_s: float = 30.0) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepts
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
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
