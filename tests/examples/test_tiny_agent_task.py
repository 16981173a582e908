"""The tiny agent tasks (examples/tiny_task/agent): the guessing game's and the lookup task's
prompts, the `lookup` tool, the BPE tokenizer that loads back as Qwen2Tokenizer, and warm-up
episodes rendered token in / token out as agent_loop renders them."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from examples.tiny_task import build_tiny_task, read_stamp
from examples.tiny_task.agent.facts_env import EpisodeFacts
from examples.tiny_task.agent.params import AgentWarmupParams, GuessTaskParams, LookupTaskParams
from examples.tiny_task.agent.problems import (
    HIGHER,
    LOWER,
    corpus_lines,
    episode_facts,
    guess_episode,
    guess_problems,
    lookup_episode,
    lookup_problems,
    tool_call_text,
)
from examples.tiny_task.agent.tokenizer import train_agent_tokenizer
from examples.tiny_task.agent.warmup import episode_row
from examples.tiny_task.tokenizer import CHAT_TEMPLATE
from examples.tiny_task.warmup import IGNORE_INDEX
from operators.generate.agent.episode import Episode, EpisodeRunner
from operators.generate.agent.hosting import LocalHosts
from operators.generate.agent.params import AgentParams
from operators.generate.agent.parsers import hermes, tool_parser
from operators.rollout.sampling import Completion
from tests.support.paths import ROOT

QUICK = AgentWarmupParams(episodes=8, steps=2)


@pytest.fixture(scope="module")
def tokenizer():
    problems = lookup_problems(10, 1) + guess_problems(0, 9, 1)
    return train_agent_tokenizer(corpus_lines(problems, calls=True))


def test_no_policy_without_the_tool_beats_chance_on_the_lookup_prompts():
    rows = lookup_problems(10, 10)
    assert len(rows) == 100 and len({r.prompt for r in rows}) == 10
    for prompt in {r.prompt for r in rows}:  # the best tool-free answer to a prompt: 1 in 10
        answers = [r.ground_truth for r in rows if r.prompt == prompt]
        assert sorted(answers) == [str(d) for d in range(10)]
    for row in rows:
        table = episode_facts(row.index, 10)
        assert table[row.key] == int(row.ground_truth) and table == episode_facts(row.index, 10)
    assert len({tuple(episode_facts(r.index, 10)) for r in rows}) == 100  # a table per episode


def test_the_lookup_tool_answers_from_the_episodes_table():
    env = EpisodeFacts(keys=10)
    env.reset({"dataset_index": 37})
    schema = env.tool_schemas()[0]["function"]
    assert schema["name"] == "lookup"
    assert schema["parameters"]["properties"]["key"]["type"] == "integer"
    turn = hermes(tool_call_text(7))
    (call,) = turn.tool_calls
    assert (call.name, call.arguments) == ("lookup", {"key": 7})
    result = env.step(turn)
    assert result.observation[0]["content"] == str(episode_facts(37, 10)[7]) and not result.done
    bad = env.step(hermes(tool_call_text(12)))
    assert bad.errors and "no fact under key 12" in bad.observation[0]["content"]
    assert env.step(hermes("4")).done  # a turn without a call ends the episode


def test_guess_episodes_follow_the_games_rules():
    rng = random.Random(0)
    for secret in range(10):
        messages = guess_episode(rng, secret, 0, 9, 4, 1.0)
        guesses = [int(m["content"]) for m in messages if m["role"] == "assistant"]
        replies = [m["content"] for m in messages if m["role"] == "user"]
        assert 1 <= len(guesses) <= 4
        for guess, reply in zip(guesses, replies, strict=False):
            assert reply == (HIGHER if secret > guess else LOWER)
        assert (guesses[-1] == secret) or len(guesses) == 4
    rows = guess_problems(0, 9, 3)
    assert [r.ground_truth for r in rows[:11]] == [str(s) for s in range(10)] + ["0"]


def test_the_tokenizer_loads_back_as_qwen2_with_the_same_ids(tokenizer, tmp_path):
    import transformers

    tokenizer.save_pretrained(tmp_path)
    transformers.Qwen2Config(vocab_size=len(tokenizer)).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded).__name__ == "Qwen2Tokenizer"
    for text in (tool_call_text(4), "lookup 4", "guess=5higher", "7"):
        assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
        assert loaded.decode(loaded(text)["input_ids"]) == text
    digits = tokenizer("482")["input_ids"]
    assert len(digits) == 3  # one token per digit
    assert len(tokenizer(tool_call_text(4))["input_ids"]) <= 16  # merges: 51 characters


def sampled(tokenizer, text: str) -> Completion:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return Completion(ids, [-1.0] * len(ids), "stop", text)


def play_game(tokenizer, texts: list[str]) -> Episode:
    """A guessing game (secret 9) whose turns are ``texts``, through the episode runner."""
    params = AgentParams(
        model_path="unused", environment="operators.generate.agent.guessing_game:GuessingGame",
        env_params={"low": 0, "high": 9}, tool_parser="none", max_turns=len(texts),
    )  # fmt: skip
    runner = EpisodeRunner(params, tokenizer, tool_parser("none"), LocalHosts(params), None)
    turns = iter(texts)
    prompt = [{"role": "user", "content": "guess="}]
    return runner.run(
        "k", {"ground_truth": "9"}, prompt, lambda *_: (sampled(tokenizer, next(turns)), 0)
    )


def test_no_bpe_merge_crosses_the_end_of_an_assistant_turn(tokenizer):
    episode = play_game(tokenizer, ["4hig", "5ig", "6g", "9"])  # letters before "higher"
    assert episode.finish_reason == "stop" and episode.turns[-1].reward > 0


def test_a_turn_the_template_cannot_extend_ends_its_episode_not_the_run(tokenizer):
    tokenizer.chat_template, agent = CHAT_TEMPLATE, tokenizer.chat_template
    try:  # plain concatenation: "hig" + "higher" re-tokenises as one word
        episode = play_game(tokenizer, ["4hig", "9"])  # guesses 4: "higher" follows
    finally:
        tokenizer.chat_template = agent
    assert episode.finish_reason == "tool_error" and "turn 0 render" in episode.errors[-1]
    assert [m["content"] for m in episode.messages] == ["guess=", "4hig", HIGHER]


def test_a_warm_up_episode_is_the_token_stream_of_the_loop(tokenizer):
    problem = lookup_problems(10, 10)[47]
    value = str(episode_facts(47, 10)[7])
    ids, labels, smoothing = episode_row(
        tokenizer, problem.prompt, lookup_episode(problem, 10, 0.0, 1.0)
    )
    eos = tokenizer.eos_token_id
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    call, answer = encode(tool_call_text(7)) + [eos], encode(value) + [eos]
    prompt, tool = encode("lookup 7"), encode(value)
    assert ids == prompt + call + tool + answer  # sampled ids (EOS kept), then the tool's
    assert labels == [IGNORE_INDEX] * len(prompt) + call + [IGNORE_INDEX] * len(tool) + answer
    assert smoothing == [0.0] * (len(prompt) + len(call) + len(tool)) + [1.0] * len(answer)


@pytest.mark.parametrize(
    ("params", "source", "rows", "rates"),
    [
        (GuessTaskParams(copies=2, warmup=QUICK), "guess", 20, {"format_rate", "first_hit_rate"}),
        (LookupTaskParams(rows_per_key=4, warmup=QUICK), "lookup", 40, {"call_rate", "key_rate"}),
    ],
)
def test_a_build_writes_model_prompts_and_first_turn_rates(
    params, source, rows, rates, tmp_path: Path
):
    out = build_tiny_task(tmp_path / source, params=params)
    table = pq.read_table(out / "train.parquet")
    assert table.num_rows == rows and set(table["data_source"].to_pylist()) == {source}
    loaded = AutoTokenizer.from_pretrained(out / "model")
    prompt = table["prompt"][0].as_py()
    rendered = loaded.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False)
    assert rendered == prompt
    stamp = read_stamp(out)
    assert stamp["task"] == source and rates <= set(stamp["warmup"])


def test_the_game_examples_stop_tokens_are_the_digits():
    """examples/agent_env.yaml lists token ids; they must be its model's tokens of 0..9."""
    import yaml

    root = ROOT
    example = yaml.safe_load((root / "examples" / "agent_env.yaml").read_text())
    built = build_tiny_task(root / ".cache" / "tiny-guess", task="guess")
    tokenizer = AutoTokenizer.from_pretrained(built / "model")
    ids = example["nodes"]["agent"]["params"]["stop_token_ids"]
    assert [tokenizer.decode([i]) for i in ids] == [str(d) for d in range(10)]
