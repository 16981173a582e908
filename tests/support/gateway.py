"""A real agent gateway for tests: the tiny lookup model on an in-process engine, the gateway's
HTTP server on loopback, and sessions opened one by one with a real ``openai`` client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.generate.agent.parsers import tool_parser
from operators.generate.agent.samplers import LoopTurns
from operators.generate.gateway.params import GatewayParams
from operators.generate.gateway.server import GatewayServer, Sessions, build_app
from operators.generate.gateway.session import Session, SessionSetup
from operators.rollout.sampling import SamplingParams
from operators.rollout.torch_engine import TorchEngine
from tests.support.paths import ROOT

LOOKUP = ROOT / ".cache" / "tiny-lookup"
AGENT = "examples.openai_agent.lookup:rollout"
TOKEN = "test-token"


def lookup_model() -> Path:
    """The shipped tiny lookup model (built once, cached under .cache/)."""
    from examples.tiny_task import build_tiny_task

    return build_tiny_task(LOOKUP, task="lookup") / "model"


@dataclass
class Opened:
    session: Session
    sid: str
    url: str


class GatewayHarness:
    """One engine and one server; ``open`` starts a session with the params given."""

    def __init__(self, model: Path) -> None:
        self.model = str(model)
        self.engine = TorchEngine.from_pretrained(self.model)
        self.sampler = LoopTurns(self.engine, 0)
        self.sessions = Sessions()
        self.server = GatewayServer(build_app(self.sessions, TOKEN, "policy"))
        self.count = 0

    def open(self, **params: Any) -> Opened:
        p = GatewayParams(model_path=self.model, agent=AGENT, **params)
        sampling = SamplingParams(temperature=p.temperature, stop=tuple(p.stop))
        setup = SessionSetup(p, self.engine.tokenizer, tool_parser(p.tool_parser), self.sampler,
                             sampling, 7, 128)  # fmt: skip
        self.count += 1
        session = Session(setup, f"test/{self.count}", self.count, 0)
        sid = self.sessions.open(session)
        return Opened(session, sid, self.server.url(sid))

    def close_session(self, opened: Opened) -> Any:
        self.sessions.close(opened.sid)
        self.sampler.release(opened.session.key)
        return opened.session.finish()

    def run(self, agent: Callable[[Any], Awaitable[Any]], **params: Any) -> tuple[Any, Any]:
        """``agent(client)`` on a new session: (what it returned, the session's episode);
        the session is ``self.last``."""
        import openai

        opened = self.open(**params)
        self.last = opened.session

        async def go() -> Any:
            async with openai.AsyncOpenAI(
                base_url=opened.url, api_key=TOKEN, max_retries=0
            ) as client:
                return await agent(client)

        try:
            value = asyncio.run(go())
        finally:
            episode = self.close_session(opened)
        return value, episode

    def close(self) -> None:
        self.server.close()
        self.sampler.close()
