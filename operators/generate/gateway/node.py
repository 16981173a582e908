"""`agent_gateway` generate operator: the user's own OpenAI-SDK agent, n episodes per prompt.

Each prompt row starts ``n`` episodes (its GRPO group). An episode is a session of the
gateway (operators/generate/gateway/server.py) on this rollout worker and one call of the
user's ``async def rollout(client, task)`` with an ``openai.AsyncOpenAI`` client whose base
URL is the session's and whose key is the gateway's bearer token (its requests reach the
gateway's app in process, without a socket); ``task`` is the prompt row
(with its ``sample_idx``). Up to ``max_concurrency`` episodes run at once and their requests
batch together in the engine. The gateway owns the tokens (session.py): each row holds the
session's trajectory with the columns `agent_loop` stores, plus ``reward`` (the agent's),
``reward_info`` (the other keys of a dict it returned), ``agent_error``, ``requests`` and
``rewrites``. An agent that raises, hangs past ``timeout_s`` or returns garbage is handled by
``on_error``; finished groups stream out as chunks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from operators.generate.agent.episode import Episode
from operators.generate.agent.groups import finished_groups
from operators.generate.agent.parsers import tool_parser
from operators.generate.agent.samplers import LoopTurns, ServerTurns
from operators.generate.agent.table import agent_columns, agent_table
from operators.generate.agent.template_check import check_agent_template
from operators.generate.gateway.agents import AgentOutcome, LoopThread, agent_function, call_agent
from operators.generate.gateway.params import GatewayParams, OnAgentError
from operators.generate.gateway.server import GatewayServer, Sessions, build_app
from operators.generate.gateway.session import Session, SessionSetup
from operators.generate.policy_engine import PolicyEngine
from operators.generate.single_turn import GENERATE_COLUMNS, GENERATE_PORTS
from operators.rollout.guard import ASGIApp, new_token
from rldag import Column, NodeContext, NodeKind, OperatorDef, RowError, columns

# The columns `agent_gateway` adds to those of `agent_loop`.
GATEWAY_COLUMNS: dict[str, pa.DataType] = {
    "reward_info": pa.string(),  # the agent's dict without `reward`, as JSON ("" otherwise)
    "agent_error": pa.string(),  # "" or "<kind>: <what>" (kind: raised, timeout, garbage)
    "requests": pa.int32(),  # completion requests the agent made
    "rewrites": pa.int32(),  # times it rewrote its history (on_rewrite: split)
}


@dataclass
class EpisodeResult:
    """A finished episode and what its agent gave."""

    episode: Episode
    outcome: AgentOutcome
    requests: int
    rewrites: int


class AgentGateway(PolicyEngine):
    """Runs the user's agent per episode against its session of the gateway."""

    def __init__(self, params: GatewayParams) -> None:
        super().__init__(params)
        self.agent = agent_function(params.agent)
        self.parse = tool_parser(params.tool_parser)
        self.sessions = Sessions()
        self.token = new_token()  # the gateway accepts no other
        self.app = build_app(self.sessions, self.token, params.served_model)
        self.server: GatewayServer | None = None  # started on the worker's first step

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        super().close()

    def stream(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> Iterator[pa.Table]:
        """Tables of ``ctx.chunk_groups`` finished prompt groups at a time (0: one table)."""
        prompts = inputs["prompts"]
        import openai  # the `agents` extra; imported here, not on the agents' event loop

        if self.server is None:
            self.server = GatewayServer(self.app)
        sampling, base = self.sampling(ctx, self.p.max_tokens_per_turn)
        if self.engine is not None:
            sampler: LoopTurns | ServerTurns = LoopTurns(self.engine, self.policy_version)
        else:
            sampler = ServerTurns(self.service, self.p.max_concurrency)
        setup = SessionSetup(
            self.p, self.tokenizer, self.parse, sampler, sampling, base, self.context
        )
        rows = prompts.to_pylist()
        agents = LoopThread("rldag-agents")
        shared = agents.run(_shared(self.p.max_concurrency, self.app))
        try:
            running = {
                agents.submit(self._episode(openai, setup, shared, ctx, rows[i], k)): (i, k)
                for i in range(len(rows))
                for k in range(self.p.n)
            }
            size = ctx.chunk_groups or len(rows)
            kept = 0
            for chunk, groups in finished_groups(running, self.p.n, size):
                table = self._table(prompts.take(chunk), groups, ctx)
                kept += table.num_rows
                if table.num_rows:
                    yield table
            if not kept:
                raise RowError(
                    f"node '{ctx.node}' iteration {ctx.iteration}: the agent {self.p.agent} "
                    f"failed on every episode (on_error: drop), none is left"
                )
        finally:
            try:
                agents.run(shared[1].aclose(), 10)
            finally:
                agents.close()
                sampler.close()

    async def _episode(
        self,
        openai: Any,
        setup: SessionSetup,
        shared: tuple,
        ctx: NodeContext,
        row: dict[str, Any],
        k: int,
    ) -> EpisodeResult:
        """One episode: a session, the agent's call, the session's trajectory."""
        limit, http = shared
        async with limit:
            key = f"{ctx.node}/{ctx.rank}/{ctx.iteration}/{row['prompt_id']}/{k}"
            session = Session(setup, key, row["prompt_id"], k)
            sid = self.sessions.open(session)
            assert self.server is not None
            client = openai.AsyncOpenAI(
                base_url=self.server.url(sid), api_key=self.token, http_client=http, max_retries=0
            )
            try:
                outcome = await call_agent(
                    self.agent, client, {**row, "sample_idx": k}, self.p.timeout_s
                )
            finally:
                self.sessions.close(sid)
                episode = session.finish()
                setup.sampler.release(key)
        if not outcome.error and not episode.turns:
            outcome = AgentOutcome(
                error="made no completion request through its client", kind="garbage"
            )
        return EpisodeResult(episode, outcome, session.requests, session.rewrites)

    def _table(
        self, prompts: pa.Table, groups: list[list[EpisodeResult]], ctx: NodeContext
    ) -> pa.Table:
        """The chunk's rows, ``on_error`` applied to the episodes whose agent failed."""
        results = [r for g in groups for r in g]
        failed = [(i, r) for i, r in enumerate(results) if r.outcome.error]
        if failed and self.p.on_error is OnAgentError.fail:
            raise RowError(self._failure(prompts, groups, failed[0][1], ctx))
        for r in results:
            ep, outcome = r.episode, r.outcome
            if outcome.error:
                ep.finish_reason = "timeout" if outcome.kind == "timeout" else "agent_error"
            elif ep.turns:  # the agent's reward, on the last turn (`reward` sums them)
                ep.turns[-1].reward = outcome.reward
        table = agent_table(prompts, [[r.episode for r in g] for g in groups], self.policy_version)
        values = {
            "reward_info": [r.outcome.info for r in results],
            "agent_error": [
                f"{r.outcome.kind}: {r.outcome.error}" if r.outcome.error else "" for r in results
            ],
            "requests": [r.requests for r in results],
            "rewrites": [r.rewrites for r in results],
        }
        for name, kind in GATEWAY_COLUMNS.items():
            table = table.append_column(name, pa.array(values[name], kind))
        if failed:
            ctx.log.warning(
                "node '%s' iteration %d: the agent failed on %d of %d episodes (on_error: %s); "
                "first: %s",
                ctx.node,
                ctx.iteration,
                len(failed),
                len(results),
                self.p.on_error.value,
                self._failure(prompts, groups, failed[0][1], ctx),
            )
        if failed and self.p.on_error is OnAgentError.drop:
            table = table.filter(pc.equal(table["agent_error"], ""))
        return self.with_digest(table)

    def _failure(
        self,
        prompts: pa.Table,
        groups: list[list[EpisodeResult]],
        result: EpisodeResult,
        ctx: NodeContext,
    ) -> str:
        i = next(i for i, g in enumerate(groups) if any(r is result for r in g))
        k = next(k for k, r in enumerate(groups[i]) if r is result)
        prompt_id = prompts["prompt_id"][i].as_py()
        return (
            f"node '{ctx.node}' iteration {ctx.iteration}, episode (prompt_id {prompt_id}, "
            f"sample_idx {k}): the agent {self.p.agent} {result.outcome.error}; fix it (if only "
            f"some episodes can fail, nodes.{ctx.node}.params.on_error: zero or drop keeps going)"
        )


async def _shared(concurrency: int, app: ASGIApp) -> tuple[Any, Any]:
    """The bound on episodes in flight and the HTTP client their OpenAI clients share (made on
    the agents' event loop): it hands each request to the gateway's ``app`` in process, on
    this loop (no socket, no HTTP parsing, no thread hop); the base URLs still name the
    gateway's HTTP server, which serves the same app to clients the agent makes itself."""
    import asyncio

    import httpx

    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    return asyncio.Semaphore(concurrency), httpx.AsyncClient(transport=transport, timeout=None)


def gateway_columns() -> tuple[Column, ...]:
    return tuple(Column(name, (t,)) for name, t in GATEWAY_COLUMNS.items())


AGENT_GATEWAY = OperatorDef(
    name="agent_gateway",
    kind=NodeKind.generate,
    factory=AgentGateway,
    ports=GENERATE_PORTS,
    adds=(
        *GENERATE_COLUMNS,
        *columns("policy_version_max", "weights_digest"),
        *agent_columns(),
        *gateway_columns(),
    ),
    params=GatewayParams,
    stateful=True,
    emits_chunks=True,
    concurrency=lambda params: params.max_concurrency,
    preflight=check_agent_template,  # the chat template extends every turn (exit 2 if not)
    description="Your own OpenAI-SDK agent per episode, served by an OpenAI-compatible gateway.",
)
