"""The lookup task's environment: a tool environment whose one tool, ``lookup``, answers from
the episode's own table of facts (examples/agent_tools.yaml).

Each row's episode gets the table :func:`~examples.tiny_task.agent.problems.episode_facts`
builds from the row's ``dataset_index``; the prompt names only a key, and the rows sharing a
prompt hold every answer equally often, so the facts are known to the tool alone. Used as
``environment: examples.tiny_task.agent.facts_env:EpisodeFacts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from examples.tiny_task.agent.problems import episode_facts
from operators.generate.agent.environment import AssistantTurn, Message, StepResult
from operators.generate.agent.tools import ToolEnvironment
from rldag.config.spec import check_positive


class EpisodeFacts:
    """The ``lookup`` tool over one episode's table; the episode ends on a turn without a
    call (``ToolEnvironment``'s rule)."""

    def __init__(self, keys: int = 10, index_column: str = "dataset_index") -> None:
        check_positive("env_params.keys", keys)
        self.keys, self.index_column = keys, index_column
        self.facts: list[int] = []
        self.tools = ToolEnvironment([self.lookup])

    def lookup(self, key: int) -> int:
        """Look up the fact stored under a key.

        Args:
            key: the key, one digit
        """
        if not 0 <= key < len(self.facts):
            raise KeyError(f"no fact under key {key} (keys 0..{len(self.facts) - 1})")
        return self.facts[key]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.tools.tool_schemas()

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        """The table of the row's episode; no first messages."""
        self.facts = episode_facts(int(row[self.index_column]), self.keys)
        return []

    def step(self, turn: AssistantTurn) -> StepResult:
        return self.tools.step(turn)

    def close(self) -> None:
        """Nothing to release."""
