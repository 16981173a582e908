"""Parameters of the `agent_loop` operator: the engine's, the environment's and the budgets."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from operators.generate.agent.factory import check_environment
from operators.generate.agent.parsers import tool_parser
from operators.generate.policy_engine import EngineParams
from rldag import check_choice, check_positive


class FinishReason(StrEnum):
    """Why an episode ended (the ``finish_reason`` column)."""

    stop = "stop"  # the model ended its turn and the environment had nothing more (no call)
    length = "length"  # a turn hit max_tokens_per_turn, or the episode max_total_tokens
    max_turns = "max_turns"
    env_done = "env_done"  # the environment ended the episode
    tool_error = "tool_error"  # a tool/parse error with on_tool_error: end, or a broken env
    timeout = "timeout"  # an environment call passed step_timeout_s, or the episode its time


# What an episode does after a tool call failed (the model always sees the error): continue
# (the error is the observation; the model gets its next turn) or end (finish_reason
# tool_error). Functional form: `continue` is a keyword, and pipeline.yaml gives member names.
OnToolError = StrEnum("OnToolError", {"continue": "continue", "end": "end"})


class EnvHosting(StrEnum):
    """Where the episodes' environments live when the run is on Ray."""

    pool = "pool"  # actors on the environment pool (a Ray call per reset/step/close)
    local = "local"  # the rollout worker's own process (cheap, trusted environments)


@dataclass
class AgentParams(EngineParams):
    """Parameters of `agent_loop` (engine keys as for `torch_engine`)."""

    environment: str = ""  # module:Class built per episode with env_params ("" = tool env)
    env_params: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the class
    tools: list[str] = field(default_factory=list)  # tool env: built-in names or module:function
    # refuse a chat template that does not render the tools' schemas (validate renders the
    # prompt with and without them); false: the model learned its tools without seeing them
    tools_in_template: bool = True
    tool_parser: str = "hermes"  # registered parser or module:function (text -> AssistantTurn)
    max_turns: int = 4  # model turns per episode
    max_tokens_per_turn: int = 64  # new tokens per model turn
    max_total_tokens: int = 256  # response tokens per episode (model + environment)
    max_tool_response_tokens: int = 256  # longer observations are cut in the middle
    parallel_tool_calls: int = 4  # tool calls of one turn running at once
    tool_timeout_s: float = 30.0  # per tool call (tool env)
    step_timeout_s: float = 60.0  # per environment reset/step call
    episode_timeout_s: float = 600.0  # per episode, generation included
    on_tool_error: OnToolError = OnToolError["continue"]  # continue | end
    max_concurrency: int = 16  # episodes in flight per worker (and their tool calls)
    env_workers: int = 0  # Ray environment actors (0: one per environment pool worker)
    env_hosting: EnvHosting = EnvHosting.pool  # pool | local (in the rollout worker's process)
    sandbox_isolation: str = "full"  # the python tool's sandbox: full | none
    sandbox_slots: int = 2  # python tool programs running at once per environment process
    sandbox_wall_seconds: float = 5.0  # per python tool program

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("max_turns", "max_tokens_per_turn", "max_total_tokens", "max_concurrency"):
            check_positive(key, getattr(self, key))
        for key in ("max_tool_response_tokens", "parallel_tool_calls", "sandbox_slots"):
            check_positive(key, getattr(self, key))
        for key in ("tool_timeout_s", "step_timeout_s", "episode_timeout_s"):
            check_positive(key, getattr(self, key), allow_zero=True)
        check_positive("env_workers", self.env_workers, allow_zero=True)
        check_choice("on_tool_error", self.on_tool_error, tuple(OnToolError))
        self.on_tool_error = OnToolError(self.on_tool_error)
        check_choice("env_hosting", self.env_hosting, tuple(EnvHosting))
        self.env_hosting = EnvHosting(self.env_hosting)
        check_choice("sandbox_isolation", self.sandbox_isolation, ("full", "none"))
        tool_parser(self.tool_parser)
        check_environment(self)
