"""The guessing game (operators/generate/agent/guessing_game.py): a stateful text environment over
several turns with higher/lower feedback and a reward that prefers fewer guesses."""

from __future__ import annotations

import pytest

from operators.generate.agent.environment import AssistantTurn, Environment
from operators.generate.agent.guessing_game import GuessingGame, success_reward
from rldag.config.errors import SpecError


def guess(game: GuessingGame, text: str):
    return game.step(AssistantTurn(text=text))


def test_the_reward_prefers_fewer_guesses():
    assert [success_reward(g, 0.25) for g in (1, 2, 3, 4)] == [1.0, 0.75, 0.5, 0.25]
    assert [success_reward(g, 0.4) for g in (1, 3, 4)] == pytest.approx([1.0, 0.2, 0.0])


def test_binary_search_finds_the_secret_with_higher_lower_feedback():
    game = GuessingGame(low=1, high=9, max_guesses=4)
    assert isinstance(game, Environment)
    assert game.reset({"ground_truth": "7"}) == []
    first = guess(game, "5")
    assert first.observation == [{"role": "user", "content": "higher"}]
    assert (first.reward, first.done, first.info) == (
        0.0,
        False,
        {"guess": 5, "guesses": 1, "secret": 7, "consistent": True},
    )
    assert guess(game, "<think>maybe 2</think>8").observation[0]["content"] == "lower"
    right = guess(game, "then 6, no: 7")  # the last number said is the guess
    assert (right.reward, right.done, right.observation) == (0.5, True, [])
    assert right.info["solved"] is True and right.info["guesses"] == 3


def test_a_turn_without_a_number_in_range_is_invalid_and_costs_a_guess():
    game = GuessingGame(low=1, high=9, max_guesses=3, invalid="say 1..9")
    game.reset({"ground_truth": 2})
    assert guess(game, "no idea").observation[0]["content"] == "say 1..9"
    assert guess(game, "12").info == {
        "guess": None,
        "guesses": 2,
        "secret": 2,
        "consistent": False,
    }
    last = guess(game, "3")  # the third wrong guess ends it with nothing
    assert (last.reward, last.done, last.info["solved"]) == (0.0, True, False)


def test_a_guess_the_replies_rule_out_is_marked_and_loses_a_strict_game():
    lenient = GuessingGame(low=0, high=9, max_guesses=4)
    lenient.reset({"ground_truth": "6"})
    assert [guess(lenient, g).info["consistent"] for g in ("3", "2", "8", "9")] == [
        True,
        False,  # below 3, after "higher"
        True,
        False,  # above 8, after "lower"
    ]
    strict = GuessingGame(low=0, high=9, max_guesses=4, turn_penalty=0.0, strict=True)
    for played, reward in (("3 7 5 6", 1.0), ("3 3", 0.0), ("5 7 6", 1.0), ("5 4", 0.0)):
        strict.reset({"ground_truth": "6"})
        results = [guess(strict, g) for g in played.split()]
        assert [r.done for r in results] == [False] * (len(results) - 1) + [True], played
        assert results[-1].reward == reward, played
    strict.reset({"ground_truth": "6"})
    assert guess(strict, "none").done  # an invalid guess rules out nothing but loses too


def test_feedback_texts_the_secret_column_and_the_intro_are_settable():
    game = GuessingGame(
        low=0, high=99, max_guesses=8, secret_column="secret", higher="+", lower="=", intro="0"
    )
    assert game.reset({"secret": 42, "ground_truth": "1"}) == [{"role": "user", "content": "0"}]
    assert guess(game, "50").observation[0]["content"] == "="
    assert guess(game, "25").observation[0]["content"] == "+"
    assert guess(game, "42").reward == 1.0 - 2 / 8  # the default penalty: 1 / max_guesses
    game.reset({"secret": 42})  # a new episode starts over
    assert guess(game, "42").reward == 1.0
    flat = GuessingGame(max_guesses=4, turn_penalty=0.1)
    flat.reset({"ground_truth": "3"})
    assert [guess(flat, g).reward for g in ("5", "4", "3")] == [0.0, 0.0, 0.8]


def test_a_row_without_a_usable_secret_and_bad_settings_are_named():
    game = GuessingGame(low=1, high=9)
    with pytest.raises(
        ValueError, match=r"column 'ground_truth' holds '12', not a secret number in 1..9"
    ):
        game.reset({"ground_truth": "12"})
    with pytest.raises(ValueError, match="holds None"):
        game.reset({})
    with pytest.raises(SpecError, match="env_params.low: low 5 is above high 4"):
        GuessingGame(low=5, high=4)
    with pytest.raises(SpecError, match="env_params.max_guesses: must be > 0"):
        GuessingGame(max_guesses=0)
    with pytest.raises(SpecError, match="env_params.turn_penalty: must be >= 0"):
        GuessingGame(turn_penalty=-1)
