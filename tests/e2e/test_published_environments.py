"""Environments written with other libraries' APIs on Ray's environment pool, through the
real pipeline: examples/agent_openenv.yaml's guessing game, written with OpenEnv's API, served
by each environment host and played over OpenEnv's client."""

from __future__ import annotations

import json
import re
from typing import Any

from examples.tiny_task import build_tiny_task
from flows.cli import main
from tests.support.paths import ROOT
from tests.support.runs import run_pipeline

EXAMPLE = ROOT / "examples" / "agent_openenv.yaml"


def test_the_example_validates():
    assert main(["validate", str(EXAMPLE)]) == 0


def test_an_openenv_game_is_played_on_the_environment_pool_and_trained_on(ray_local, tmp_path):
    task = build_tiny_task(ROOT / ".cache" / "tiny-guess", task="guess")
    run = run_pipeline(
        EXAMPLE,
        f"storage.uri={tmp_path}",
        f"model.path={task / 'model'}",
        f"nodes.prompts.params.path={task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=4",
        "nodes.agent.params.n=4",
        iterations=2,
    )
    for i in range(2):
        rows = run.table("agent", i).to_pylist()
        assert len(rows) == 16 and {r["policy_version"] for r in rows} == {i}
        assert all(r["env_errors"] == [] for r in rows)
        for r in rows:
            assert replies_follow_the_rules(int(r["ground_truth"]), r)
        assert run.table("train", i).to_pylist()[0]["tokens"] > 0


def reply(secret: int, said: str) -> str:
    """What the game answers to a turn that said `said`."""
    digits = re.findall(r"\d", said)
    if not digits:
        return "invalid"
    guess = int(digits[-1])
    return "right" if guess == secret else "higher" if secret > guess else "lower"


def replies_follow_the_rules(secret: int, row: dict[str, Any]) -> bool:
    """The server answered each of the model's turns by the game's rules, the model saw those
    replies, each turn's info holds its reply, and the reward is 1 exactly when one was right."""
    said = [m["content"] for m in row["messages"][1:]]  # turn, reply, turn, reply, ...
    expected = [reply(secret, turn) for turn in said[0::2]]
    shown = said[1::2]
    assert shown == expected[: len(shown)] and len(shown) >= len(expected) - 1, (secret, said)
    infos = [json.loads(t["info"])["observation"]["reply"] for t in row["turns"]]
    assert infos == expected, (infos, expected)
    return row["reward"] == float(expected[-1] == "right")
