"""Parameters of the `agent_gateway` operator: the engine's, the user's agent, the budgets and
what happens when an agent misbehaves."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from operators.generate.agent.parsers import tool_parser
from operators.generate.policy_engine import EngineParams
from rldag import SpecError, check_choice, check_positive


class OnAgentError(StrEnum):
    """What the node does with an episode whose agent raised, hung past ``timeout_s`` or
    returned something that is not a reward."""

    fail = "fail"  # the run fails, naming the node, iteration, episode, agent and error
    zero = "zero"  # the episode's row stays with reward 0.0 (its `agent_error` says why)
    drop = "drop"  # the row is removed; the rest of its prompt group stays


class OnRewrite(StrEnum):
    """What a session does with a request that does not extend its previous turns."""

    split = "split"  # a new segment starts there; the row keeps the last one (`rewrites`)
    reject = "reject"  # the request gets a 400 history_rewritten error


@dataclass
class GatewayParams(EngineParams):
    """Parameters of `agent_gateway` (engine keys as for `torch_engine`)."""

    agent: str = ""  # module:function, `async def rollout(client, task) -> float | dict`
    tool_parser: str = "hermes"  # registered parser or module:function (text -> tool calls)
    max_turns: int = 8  # completion requests per episode (later ones get an empty `length`)
    max_tokens_per_turn: int = 256  # new tokens per request (a request's max_tokens may cap)
    max_total_tokens: int = 1024  # response tokens per episode (model + environment)
    max_concurrency: int = 16  # episodes (agent calls) in flight per worker
    timeout_s: float = 600.0  # per episode: the agent's whole rollout (0: none)
    on_error: OnAgentError = OnAgentError.fail  # fail | zero | drop
    on_rewrite: OnRewrite = OnRewrite.split  # split | reject
    served_model: str = "policy"  # the model id GET /v1/models lists

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("max_turns", "max_tokens_per_turn", "max_total_tokens", "max_concurrency"):
            check_positive(key, getattr(self, key))
        check_positive("timeout_s", self.timeout_s, allow_zero=True)
        check_choice("on_error", self.on_error, tuple(OnAgentError))
        self.on_error = OnAgentError(self.on_error)
        check_choice("on_rewrite", self.on_rewrite, tuple(OnRewrite))
        self.on_rewrite = OnRewrite(self.on_rewrite)
        tool_parser(self.tool_parser)
        if not self.agent:
            raise SpecError(
                "give the agent as module:function (async def rollout(client, task))",
                path="agent",
            )
        from operators.generate.gateway.agents import agent_function

        agent_function(self.agent)
