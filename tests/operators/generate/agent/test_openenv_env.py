"""OpenEnv environments through the text adapter (operators/generate/agent/openenv_env.py):
episodes of a guessing game written with OpenEnv's API (examples/openenv_game/guess.py),
served here by the adapter and played over OpenEnv's client."""

from __future__ import annotations

import json

import pytest

from operators.generate.agent.environment import AssistantTurn, Environment
from operators.generate.agent.openenv_env import OpenEnvEnvironment, serve_locally
from rldag.config.errors import SpecError

APP = "examples.openenv_game.guess:app"


def game(**kw) -> OpenEnvEnvironment:
    return OpenEnvEnvironment(
        app=APP, observation_field="reply", reset_columns={"secret": "ground_truth"}, **kw
    )


def say(text: str) -> AssistantTurn:
    return AssistantTurn(text=text)


def test_an_episode_is_played_on_the_server_and_ends_with_its_reward():
    env = game()
    assert isinstance(env, Environment)
    assert env.reset({"ground_truth": "6", "prompt_id": 3}) == []  # an empty first reply
    low = env.step(say("<think>maybe 9</think>2"))  # the text outside <think> is the action
    assert low.observation == [{"role": "user", "content": "higher"}]
    assert (low.reward, low.done) == (0.0, False)
    assert low.info == {"observation": {"reply": "higher", "guesses": 1}, "invalid_actions": 0}
    assert env.step(say("8")).observation[0]["content"] == "lower"
    right = env.step(say("6"))
    assert (right.reward, right.done, right.observation) == (1.0, True, [])
    assert right.info["observation"]["guesses"] == 3
    env.close()


def test_each_episode_has_its_own_session_on_one_server_per_process():
    envs = [game() for _ in range(3)]
    for secret, env in zip("147", envs, strict=True):
        env.reset({"ground_truth": secret})
    assert [env.step(say("4")).reward for env in envs] == [0.0, 1.0, 0.0]
    assert serve_locally(APP) == serve_locally(APP)
    for env in envs:
        env.close()


def test_a_running_server_is_reached_by_its_url_and_observations_default_to_json():
    env = OpenEnvEnvironment(base_url=serve_locally(APP), reset_columns={"secret": "ground_truth"})
    first = env.reset({"ground_truth": 5})[0]["content"]
    assert json.loads(first) == {"reply": "", "guesses": 0}
    assert json.loads(env.step(say("9")).observation[0]["content"])["reply"] == "lower"
    env.close()


def test_actions_the_parser_or_the_server_refuse_are_not_stepped():
    parsed = game(parser="examples.openenv_game.guess:digit_or_refuse", invalid_reward=-0.5)
    parsed.reset({"ground_truth": 3})
    bad = parsed.step(say("no idea"))
    assert bad.observation == [{"role": "user", "content": "invalid action: expected a digit"}]
    assert (bad.reward, bad.done, bad.info["invalid_actions"]) == (-0.5, False, 1)
    ok = parsed.step(say("my guess: 1"))
    assert ok.info == {"observation": {"reply": "higher", "guesses": 1}, "invalid_actions": 1}
    parsed.close()

    wrong_field = game(action_field="guess")  # the server's GuessAction has no `guess`
    wrong_field.reset({"ground_truth": 3})
    refused = wrong_field.step(say("3"))
    refused_text = 'invalid action: the environment refused {"guess": "3"}'
    assert refused.observation[0]["content"] == refused_text
    assert refused.info["invalid_actions"] == 1 and not refused.done
    wrong_field.close()


@pytest.mark.parametrize(
    ("params", "path", "says"),
    [
        ({}, "env_params.app", "give app"),
        ({"app": APP, "base_url": "http://127.0.0.1:1"}, "env_params.app", "give app"),
        ({"app": "examples.openenv_game.guess:nope"}, "env_params.app", "no attribute 'nope'"),
        ({"app": APP, "parser": "tests.support.nowhere:f"}, "env_params.parser", "cannot import"),
    ],
)
def test_a_bad_setting_is_a_spec_error_naming_its_key(params, path, says):
    with pytest.raises(SpecError, match=says) as err:
        OpenEnvEnvironment(**params)
    assert err.value.path == path
