"""The build parameters of the tiny agent tasks, kept free of heavy imports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from examples.tiny_task.params import EvalParams, ModelParams

GUESS_TASK = "guess"
LOOKUP_TASK = "lookup"
AGENT_BUILDER_VERSION = 3  # bump when the builder's artefacts change for the same params


@dataclass(frozen=True)
class AgentWarmupParams:
    """The warm-up on synthetic episodes: full batch, AdamW (the digit targets' smoothing is
    the task's, per kind of digit)."""

    episodes: int = 128
    steps: int = 100
    learning_rate: float = 2e-3
    weight_decay: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class AgentTaskBase:
    """What every tiny agent task builds with: the model and the first-turn evaluation."""

    model: ModelParams = field(default_factory=lambda: ModelParams(max_position_embeddings=128))
    eval: EvalParams = field(
        default_factory=lambda: EvalParams(samples_per_problem=2, max_new_tokens=32)
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GuessTaskParams(AgentTaskBase):
    """The guessing game: secrets ``low..high``, ``copies`` prompt rows per secret; the
    warm-up's guesses are uniform (``guess_smoothing`` 1: it teaches the turn format, not the
    search)."""

    task: str = GUESS_TASK
    low: int = 0
    high: int = 9
    max_guesses: int = 4
    copies: int = 10
    guess_smoothing: float = 1.0
    warmup: AgentWarmupParams = field(default_factory=AgentWarmupParams)


@dataclass(frozen=True)
class LookupTaskParams(AgentTaskBase):
    """Facts only the ``lookup`` tool knows: row ``i`` asks for key ``i % keys`` of its own
    episode's table (:class:`~examples.tiny_task.agent.facts_env.EpisodeFacts`), and the rows
    sharing a prompt hold every answer equally often. The warm-up teaches the call
    (``key_smoothing`` 0: the prompt's key, exactly; 600 steps, so that RL does not drift to
    wrong keys before it learns to copy) and where the answer goes, barely what it is
    (``answer_smoothing`` 0.9: a target 90 % uniform, 10 % the tool's answer, a faint trace
    RL amplifies; with a wholly uniform one, on some CPUs RL did not find the copy)."""

    task: str = LOOKUP_TASK
    keys: int = 10
    rows_per_key: int = 10
    key_smoothing: float = 0.0
    answer_smoothing: float = 0.9
    warmup: AgentWarmupParams = field(
        default_factory=lambda: AgentWarmupParams(episodes=32, steps=600, learning_rate=3e-3)
    )


AgentTaskParams = GuessTaskParams | LookupTaskParams
