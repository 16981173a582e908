"""Gymnasium simulators through the text adapter (operators/generate/agent/gym_env.py), stepping
real
episodes of Gymnasium's own FrozenLake and Blackjack."""

from __future__ import annotations

import json

import gymnasium
import pytest

from operators.generate.agent.environment import AssistantTurn, Environment
from operators.generate.agent.gym_env import GymTextEnvironment, discrete_parser
from rldag.config.errors import SpecError

NAMES = ["left", "down", "right", "up"]  # FrozenLake's actions 0..3


def lake(**kw) -> GymTextEnvironment:
    return GymTextEnvironment("FrozenLake-v1", {"is_slippery": False}, **kw)


def say(text: str) -> AssistantTurn:
    return AssistantTurn(text=text)


def test_a_frozen_lake_episode_reaches_the_goal_from_text_actions():
    env = lake()
    assert isinstance(env, Environment)
    assert env.reset({"prompt_id": 0}) == [{"role": "user", "content": "0"}]
    # right, right, down, down, down reach row 3 column 2; the last "right" is the goal
    states = []
    for action in ["2", "I go 2", "<think>maybe 3</think>1", "1", "then 1"]:
        result = env.step(say(action))
        assert (result.reward, result.done) == (0.0, False)
        states.append(result.observation[0]["content"])
    assert states == ["1", "2", "6", "10", "14"]
    last = env.step(say("2"))
    assert (last.reward, last.done, last.observation) == (1.0, True, [])
    assert last.info["terminated"] is True and last.info["action"] == 2
    env.close()


def test_falling_in_a_hole_ends_the_episode_with_no_reward():
    env = lake(action_names=NAMES)
    env.reset({"prompt_id": 1})
    assert env.step(say("Right.")).info["action"] == 2  # names, case-insensitive
    hole = env.step(say("left, no: down"))  # the last action said counts
    assert (hole.reward, hole.done, hole.info["action"]) == (0.0, True, 1)


def test_an_unparsable_action_is_an_error_observation_that_counts():
    env = lake(action_names=NAMES, invalid_reward=-0.1)
    env.reset({"prompt_id": 0})
    bad = env.step(say("north!"))
    expected = "invalid action: expected an integer in 0..3 or one of left, down, right, up"
    assert bad.observation == [{"role": "user", "content": f"{expected}, found none"}]
    assert (bad.reward, bad.done, bad.info["invalid_actions"]) == (-0.1, False, 1)
    far = env.step(say("7"))
    assert far.observation[0]["content"].endswith("got 7")
    assert far.info["invalid_actions"] == 2
    ok = env.step(say("2"))  # the simulator never saw the invalid ones: still at the start
    assert ok.observation[0]["content"] == "1" and ok.info["invalid_actions"] == 2
    env.reset({"prompt_id": 0})
    assert env.step(say("2")).info["invalid_actions"] == 0  # per episode


def test_the_ansi_formatter_shows_the_rendered_map_with_the_agent_in_brackets():
    env = lake(formatter="ansi")
    assert env.reset({})[0]["content"] == "[S]FFF\nFHFH\nFFFH\nHFFG"
    moved = env.step(say("2")).observation[0]["content"]
    assert moved.splitlines() == ["  (Right)", "S[F]FF", "FHFH", "FFFH", "HFFG"]


def test_blackjack_episodes_of_one_prompt_start_alike_and_play_to_the_end():
    env = GymTextEnvironment("Blackjack-v1")
    starts = {
        pid: [env.reset({"prompt_id": pid})[0]["content"] for _ in range(3)] for pid in (3, 4)
    }
    for first in starts.values():
        assert len(set(first)) == 1  # seeded by prompt_id: one group, one starting hand
        assert first[0].startswith("(") and first[0].count(",") == 2  # (sum, dealer, ace)
    env.reset({"prompt_id": 3})
    result = env.step(say("0"))  # stick: the dealer plays, the hand is decided
    assert result.done and result.reward in (-1.0, 0.0, 1.0, 1.5)
    assert result.info["terminated"] is True


def test_bad_environment_settings_name_their_key():
    with pytest.raises(SpecError, match=r"env_params.env_id: gymnasium.make\('Nope-v0'"):
        GymTextEnvironment("Nope-v0")
    with pytest.raises(SpecError, match="env_params.env_id: .*unexpected keyword"):
        GymTextEnvironment("FrozenLake-v1", {"bogus": 1})
    with pytest.raises(SpecError, match="env_params.parser: .*Box.*is not Discrete"):
        GymTextEnvironment("Pendulum-v1")
    with pytest.raises(SpecError, match="env_params.action_names: 2 action_names for 4"):
        lake(action_names=["a", "b"])
    with pytest.raises(SpecError, match="env_params.formatter: unknown formatter 'html'"):
        lake(formatter="html")


def test_the_discrete_parser_respects_a_space_that_starts_above_zero():
    parse = discrete_parser()
    space = gymnasium.spaces.Discrete(3, start=5)
    assert parse("5 then 7", space) == 7
    with pytest.raises(ValueError, match="expected an integer in 5..7, got 4"):
        parse("4", space)


def test_frozen_lake_episodes_run_through_agent_loop(tiny_task):
    import pyarrow as pa

    from operators.generate.agent.loop import AgentLoop
    from operators.generate.agent.params import AgentParams
    from rldag.graph.operator import NodeContext

    params = AgentParams(
        model_path=str(tiny_task / "model"),
        n=2,
        environment="operators.generate.agent.gym_env:GymTextEnvironment",
        env_params={
            "env_id": "FrozenLake-v1",
            "kwargs": {"is_slippery": False},
            "formatter": "tests.support.agent_envs:as_question",
        },
        tool_parser="none",
        max_turns=3,
        max_tokens_per_turn=4,
        max_total_tokens=32,
    )
    agent = AgentLoop(params)
    prompts = pa.table({"prompt_id": [0, 1], "prompt": ["1+1=", "1+2="]})
    try:
        table = agent({"prompts": prompts}, NodeContext("agent", 0, 0, ""))
    finally:
        agent.close()
    assert table.num_rows == 4
    stepped = 0
    for row in table.to_pylist():
        roles = [m["role"] for m in row["messages"]]
        assert roles[:3] == ["user", "user", "assistant"]  # the prompt, then reset's state
        assert row["messages"][1]["content"] == "0+1="  # FrozenLake starts in state 0
        for message in row["messages"][3:]:
            if message["role"] == "user":  # a new state, or what the adapter expected
                content = message["content"]
                assert content.endswith("+1=") or content.startswith("invalid action: expected")
        infos = [json.loads(t["info"]) for t in row["turns"]]
        stepped += sum("action" in info for info in infos)  # actions the simulator took
        assert row["num_turns"] == len(row["turn_rewards"]) >= 1
        assert row["finish_reason"] in {"env_done", "max_turns", "length"}
        assert row["reward"] == sum(row["turn_rewards"]) in (0.0, 1.0)
    assert stepped > 0
