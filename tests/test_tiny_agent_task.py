"""The tiny agent tasks (operators/tiny_task/agent): the guessing game's and the lookup task's
prompts, the `lookup` tool, the BPE tokenizer that loads back as Qwen2Tokenizer, and warm-up
episodes rendered token in / token out as agent_loop renders them."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from operators.agent.parsers import hermes
from operators.agent.tools import tool_schema
from operators.tiny_task import build_tiny_task, read_stamp
from operators.tiny_task.agent.params import AgentWarmupParams, GuessTaskParams, LookupTaskParams
from operators.tiny_task.agent.problems import (
    HIGHER,
    LOWER,
    corpus_lines,
    fact,
    guess_episode,
    guess_problems,
    lookup,
    lookup_episode,
    lookup_problems,
    tool_call_text,
)
from operators.tiny_task.agent.tokenizer import train_agent_tokenizer
from operators.tiny_task.agent.warmup import episode_row
from operators.tiny_task.warmup import IGNORE_INDEX

QUICK = AgentWarmupParams(episodes=8, steps=2)


@pytest.fixture(scope="module")
def tokenizer():
    problems = lookup_problems(100, 999) + guess_problems(0, 9, 1)
    return train_agent_tokenizer(corpus_lines(problems, calls=True))


def test_lookup_is_a_typed_tool_over_hashed_facts():
    assert [fact(k) for k in (100, 101, 999)] == [fact(100), fact(101), fact(999)]  # stable
    assert {fact(k) for k in range(100, 1000)} == set(range(10))
    assert lookup(482) == fact(482)
    schema = tool_schema(lookup)["function"]
    assert schema["name"] == "lookup"
    assert schema["parameters"]["properties"]["key"]["type"] == "integer"
    (call,) = hermes(tool_call_text(482)).tool_calls
    assert (call.name, call.arguments) == ("lookup", {"key": 482})


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
    for text in (tool_call_text(482), "lookup 482", "guess=5higher", "7"):
        assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
        assert loaded.decode(loaded(text)["input_ids"]) == text
    digits = tokenizer("482")["input_ids"]
    assert len(digits) == 3  # one token per digit
    assert len(tokenizer(tool_call_text(482))["input_ids"]) < 24  # merges shorten the call


def test_a_warm_up_episode_is_the_token_stream_of_the_loop(tokenizer):
    messages = lookup_episode(482, 0.0, 1.0)
    ids, labels, smoothing = episode_row(tokenizer, "lookup 482", messages)
    eos = tokenizer.eos_token_id
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    call, answer = encode(tool_call_text(482)) + [eos], encode(str(fact(482))) + [eos]
    prompt, tool = encode("lookup 482"), encode(str(fact(482)))
    assert ids == prompt + call + tool + answer  # sampled ids (EOS kept), then the tool's
    assert labels == [IGNORE_INDEX] * len(prompt) + call + [IGNORE_INDEX] * len(tool) + answer
    assert smoothing == [0.0] * (len(prompt) + len(call) + len(tool)) + [1.0] * len(answer)


@pytest.mark.parametrize(
    ("params", "source", "rows", "rates"),
    [
        (GuessTaskParams(copies=2, warmup=QUICK), "guess", 20, {"format_rate", "first_hit_rate"}),
        (LookupTaskParams(last_key=139, warmup=QUICK), "lookup", 40, {"call_rate", "key_rate"}),
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
    assert loaded.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False) == (
        prompt
    )
    stamp = read_stamp(out)
    assert stamp["task"] == source and rates <= set(stamp["warmup"])
