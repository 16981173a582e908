"""The tool example learns with its environments on Ray's environment pool, driven through the
Run the flow uses (examples/agent_tools.yaml, its first 12 of 30 iterations): facts only the
episode's `lookup` tool knows, so no policy without the tool beats 0.1. The mean reward of
the last 3 iterations is >= 2x the first 3, which are <= 0.3."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.tiny_task import build_tiny_task
from tests.test_learning import run_rewards

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_the_tool_example_learns_to_use_its_tool(ray_local, tmp_path):
    built = build_tiny_task(ROOT / ".cache" / "tiny-lookup", task="lookup")
    pipeline = ROOT / "examples" / "agent_tools.yaml"
    rewards = run_rewards(pipeline, tmp_path, built, "iterations=12")
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert first <= 0.3, rewards
    assert last >= 2 * first and last > 0.2, rewards  # above what no tool can give (0.1)
