"""`agent_loop` generate operator: n multi-turn episodes per prompt, token in / token out.

Each prompt row starts ``n`` episodes (its GRPO group); each episode alternates a model turn
(on the node's engine, operators/generate/policy_engine.py) and an environment step (on the
environment
pool, operators/generate/agent/hosting.py) until a budget or the environment ends it
(operators/generate/agent/episode.py). Up to ``max_concurrency`` episodes are in flight at once and
their
turns batch together in the engine while tools run. Finished groups stream out as chunks; the
table has the generate columns plus ``response_mask`` and the trajectory (operators/generate/agent/
table.py). Weights arrive along the weights edge as for ``torch_engine``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pyarrow as pa

from operators.generate.agent.episode import Episode, EpisodeRunner
from operators.generate.agent.groups import finished_groups
from operators.generate.agent.hosting import start_hosts
from operators.generate.agent.params import AgentParams
from operators.generate.agent.parsers import tool_parser
from operators.generate.agent.samplers import LoopTurns, ServerTurns
from operators.generate.agent.table import agent_columns, agent_table
from operators.generate.agent.template_check import check_agent_template
from operators.generate.policy_engine import PolicyEngine
from operators.generate.single_turn import GENERATE_COLUMNS, GENERATE_PORTS
from operators.model.prompts import chat_messages
from rldag import NodeContext, NodeKind, OperatorDef, PoolName, columns


def turn_seed(base: int, prompt: int, sample: int, turn: int) -> int:
    """The sampling seed of one turn of one episode: a pure function of the iteration's base
    seed, the prompt's id, the episode's sample index and the turn."""
    state = np.random.SeedSequence([base, prompt, sample, turn]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


def prompt_messages(prompt: str | list) -> list[dict]:
    """A row's prompt as chat messages (a plain string is one user message)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return chat_messages(prompt)


class AgentLoop(PolicyEngine):
    """Runs the episodes of a prompt table and builds their rollout table."""

    def __init__(self, params: AgentParams) -> None:
        super().__init__(params)
        self.parse = tool_parser(params.tool_parser)
        self.hosts = None  # started on the first call (on Ray: needs the pool reservation)

    def close(self) -> None:
        if self.hosts is not None:
            self.hosts.shutdown()
            self.hosts = None
        super().close()

    def stream(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> Iterator[pa.Table]:
        """Tables of ``ctx.chunk_groups`` finished prompt groups at a time (0: one table), each
        in prompt order; the rows do not depend on the chunking."""
        prompts = inputs["prompts"]
        if self.hosts is None:
            self.hosts = start_hosts(self.p, ctx.companion)
        params, base = self.sampling(ctx, self.p.max_tokens_per_turn)
        params = replace(params, n=1)
        if self.engine is not None:
            turns = LoopTurns(self.engine, self.policy_version)
        else:
            turns = ServerTurns(self.service)

        def episode(i: int, k: int) -> Episode:
            def sample(ids: list[int], budget: int, turn: int, left: float | None):
                per_turn = replace(params, max_new_tokens=budget)
                seed = turn_seed(base, ids_of[i], k, turn)
                return turns.sample(ids, per_turn, seed, left, key)

            key = f"{ctx.node}/{ctx.rank}/{ctx.iteration}/{i}/{k}"
            try:
                return runner.run(key, rows[i], prompt_messages(rows[i]["prompt"]), sample)
            finally:
                turns.release(key)

        runner = EpisodeRunner(self.p, self.tokenizer, self.parse, self.hosts, self.context)
        rows = prompts.to_pylist()
        ids_of = [row["prompt_id"] for row in rows]  # seeds follow the prompt, not the shard
        n = self.p.n
        try:
            with ThreadPoolExecutor(self.p.max_concurrency, "rldag-episode") as pool:
                running = {
                    pool.submit(episode, i, k): (i, k) for i in range(len(rows)) for k in range(n)
                }
                size = ctx.chunk_groups or len(rows)
                for chunk, groups in finished_groups(running, n, size):
                    yield self.with_digest(
                        agent_table(prompts.take(chunk), groups, self.policy_version)
                    )
        finally:
            turns.close()


AGENT_LOOP = OperatorDef(
    name="agent_loop",
    kind=NodeKind.generate,
    factory=AgentLoop,
    ports=GENERATE_PORTS,
    adds=(*GENERATE_COLUMNS, *columns("policy_version_max", "weights_digest"), *agent_columns()),
    params=AgentParams,
    stateful=True,
    emits_chunks=True,
    concurrency=lambda params: params.max_concurrency,
    companion_pool=PoolName.environment,
    preflight=check_agent_template,  # the chat template extends every turn (exit 2 if not)
    description="Multi-turn episodes with tools or environments, token in / token out.",
)
