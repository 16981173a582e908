"""The guessing-game example learns to use the environment's replies, driven through the Run
the flow uses (examples/agent_env.yaml, its first 20 of 60 iterations): strict play, where a
guess the replies rule out loses at once, so a random player wins about a quarter of its
games. Over the 20 iterations the guesses after the first become consistent with the replies
far more often (about half of them at the start) and the win rate rises by more than 1.3x.
The example's 2x needs its 60 iterations (README "Agent examples that learn"), longer than a
test may take."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from operators.tiny_task import build_tiny_task
from tests.test_learning import run_rewards

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 20


def later_guesses_consistent(agent_table: Path) -> float:
    """The share of guesses after an episode's first that the replies before them allow."""
    turns = pq.read_table(agent_table, columns=["turns"])["turns"].to_pylist()
    found = [json.loads(t["info"])["consistent"] for row in turns for t in row[1:] if t["info"]]
    return sum(found) / len(found)


def test_the_guessing_game_example_learns_to_use_the_replies(ray_local, tmp_path):
    built = build_tiny_task(ROOT / ".cache" / "tiny-guess", task="guess")
    pipeline = ROOT / "examples" / "agent_env.yaml"
    rewards = run_rewards(pipeline, tmp_path, built, f"iterations={ITERATIONS}")
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    consistent = [
        later_guesses_consistent(run / f"iter={i}" / "agent.parquet") for i in range(ITERATIONS)
    ]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert first <= 0.3, rewards
    assert last >= 1.3 * first, rewards
    before, after = sum(consistent[:3]) / 3, sum(consistent[-3:]) / 3
    assert before <= 0.6 and after >= before + 0.12, consistent
