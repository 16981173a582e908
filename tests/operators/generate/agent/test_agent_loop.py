"""The agent_loop operator on a small random chat model: token in / token out, budgets and
finish reasons, failing environments, streaming and GRPO groups."""

from __future__ import annotations

import string
from dataclasses import replace

import pyarrow as pa
import pytest
import torch
from transformers import AutoTokenizer

from operators.generate.agent.loop import AgentLoop, turn_seed
from operators.generate.agent.params import AgentParams
from operators.rollout.torch_engine import TorchEngine
from rldag.graph.operator import NodeContext
from tests.support.agent_envs import build_chat_model

PROMPTS = pa.table({"prompt_id": pa.array([0, 1, 2], pa.int64()), "prompt": ["hi", "yo", "ok"]})
CTX = NodeContext("agent", 0, 0, "unused")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return str(build_chat_model(tmp_path_factory.mktemp("chat")))


@pytest.fixture(scope="module")
def stops(chat_model):
    """Most printable characters end a turn (a random model rarely samples <|im_end|>)."""
    tok = AutoTokenizer.from_pretrained(chat_model)
    chars = string.ascii_letters + string.digits + string.punctuation
    return [tok.convert_tokens_to_ids(c) for c in chars]


def run(chat_model, stops, prompts=PROMPTS, ctx=CTX, **params) -> pa.Table:
    defaults = {"stop_token_ids": stops, "max_tokens_per_turn": 24, "tool_parser": "none"}
    op = AgentLoop(AgentParams(model_path=chat_model, **{**defaults, **params}))
    try:
        return op({"prompts": prompts}, ctx)
    finally:
        op.close()


def test_stored_ids_are_what_was_sampled_and_what_the_template_rendered(chat_model, stops):
    params = AgentParams(
        model_path=chat_model,
        n=2,
        environment="tests.support.agent_envs:EchoEnv",
        env_params={"turns": 3},
        stop_token_ids=stops,
        max_tokens_per_turn=24,
        max_total_tokens=400,
        tool_parser="none",
    )
    op = AgentLoop(params)
    table = op({"prompts": PROMPTS}, CTX)
    # turns 2 and 3 prefilled only what the turn and the environment added (the ids are
    # checked below against full prefills); every finished episode's cache was dropped
    assert op.engine.batcher.reused_tokens > 0
    assert len(op.engine.batcher.kept) == 0
    op.close()
    sampling, base = op.sampling(CTX, 24)
    engine = TorchEngine.from_pretrained(chat_model)
    tok = engine.tokenizer
    for row in table.to_pylist():
        prompt, response, mask = row["prompt_ids"], row["response_ids"], row["response_mask"]
        assert len(mask) == len(response) == len(row["response_logprobs"])
        assert row["num_turns"] == 3 and row["finish_reason"] == "env_done"
        for t, turn in enumerate(row["turns"]):
            start, model_end, end = turn["start"], turn["model_end"], turn["end"]
            again = replace(
                sampling,
                n=1,
                max_new_tokens=min(24, 400 - start),
                seed=turn_seed(base, row["prompt_id"], row["sample_idx"], t),
            )
            (completion,) = engine.generate([prompt + response[:start]], again)[0:1][0]
            assert response[start:model_end] == completion.token_ids  # exactly as sampled
            assert row["response_logprobs"][start:model_end] == pytest.approx(
                completion.logprobs, abs=1e-5
            )
            assert set(mask[start:model_end]) == {1}
            if t == 2:
                assert end == model_end == len(response)
                continue
            assert set(mask[model_end:end]) == {0}
            assert set(row["response_logprobs"][model_end:end]) == {0.0}
            # environment tokens: the template's extension by the observation, after the
            # closure the template gives the assistant turn (<|im_end|>\n)
            messages = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
            upto = 3 + 2 * t  # prompt, reset message, then (assistant, observation) pairs
            closed = tok.apply_chat_template(messages[:upto], tokenize=True)["input_ids"]
            opened = tok.apply_chat_template(
                messages[: upto + 1], add_generation_prompt=True, tokenize=True
            )["input_ids"]
            observation = opened[len(closed) :]
            assert response[end - len(observation) : end] == observation
            assert tok.decode(response[model_end : end - len(observation)]) == "<|im_end|>\n"
        assert row["turn_rewards"] == [1.0, 1.0, 1.0] and row["reward"] == 3.0


def test_episodes_form_groups_of_n_per_prompt_and_stream_by_group(chat_model, stops):
    env = {"environment": "tests.support.agent_envs:EchoEnv", "n": 3}
    whole = run(chat_model, stops, **env)
    assert whole["prompt_id"].to_pylist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert whole["sample_idx"].to_pylist() == [0, 1, 2] * 3
    op = AgentLoop(AgentParams(model_path=chat_model, stop_token_ids=stops, **env))
    chunks = list(op.stream({"prompts": PROMPTS}, replace(CTX, chunk_groups=1)))
    op.close()
    assert [set(c["prompt_id"].to_pylist()) for c in chunks] in (
        [{a}, {b}, {c}] for a, b, c in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1),
                                         (2, 1, 0)]
    )  # fmt: skip
    joined = pa.concat_tables(chunks).sort_by([("prompt_id", "ascending")])
    assert joined["response_ids"].to_pylist() == whole["response_ids"].to_pylist()


def test_max_turns_ends_the_episode(chat_model, stops):
    table = run(chat_model, stops, environment="tests.support.agent_envs:EchoEnv",
                env_params={"turns": 10}, max_turns=2)  # fmt: skip
    assert set(table["finish_reason"].to_pylist()) == {"max_turns"}
    assert set(table["num_turns"].to_pylist()) == {2}


def test_a_turn_past_max_tokens_per_turn_ends_with_length(chat_model, stops):
    table = run(
        chat_model, [], environment="tests.support.agent_envs:EchoEnv", max_tokens_per_turn=3
    )
    assert set(table["finish_reason"].to_pylist()) == {"length"}
    assert [len(r) for r in table["response_ids"].to_pylist()] == [3, 3, 3]


def test_max_total_tokens_bounds_the_whole_response(chat_model, stops):
    table = run(chat_model, stops, environment="tests.support.agent_envs:LongEnv",
                env_params={"size": 300}, max_total_tokens=120,
                max_tool_response_tokens=1000)  # fmt: skip
    assert set(table["finish_reason"].to_pylist()) == {"length"}
    assert max(len(r) for r in table["response_ids"].to_pylist()) <= 120


def test_long_observations_are_cut_in_the_middle(chat_model, stops):
    table = run(chat_model, stops, environment="tests.support.agent_envs:LongEnv",
                env_params={"size": 300}, max_turns=2, max_total_tokens=1000,
                max_tool_response_tokens=20)  # fmt: skip
    row = table.to_pylist()[0]
    observation = row["messages"][3]["content"]
    assert observation.endswith("END") and "tokens truncated" in observation
    first = row["turns"][0]
    assert first["end"] - first["model_end"] < 100  # 20 kept + the marker and the template
    whole = AutoTokenizer.from_pretrained(chat_model).encode("a" * 300 + "END")
    assert len(whole) > 150


def test_the_environment_ending_the_episode_is_env_done(chat_model, stops):
    table = run(
        chat_model, stops, environment="tests.support.agent_envs:EchoEnv", env_params={"turns": 1}
    )
    assert set(table["finish_reason"].to_pylist()) == {"env_done"}


def test_a_turn_without_tool_calls_in_a_tool_env_is_stop(chat_model, stops):
    table = run(chat_model, stops, tools=["tests.support.agent_envs:lookup"], tool_parser="hermes")
    assert set(table["finish_reason"].to_pylist()) == {"stop"}
    prompt = AutoTokenizer.from_pretrained(chat_model).decode(table["prompt_ids"][0].as_py())
    assert "tools: lookup" in prompt  # the schemas reached the chat template


def test_tool_results_come_back_as_tool_messages(chat_model, stops):
    table = run(chat_model, stops, tools=["tests.support.agent_envs:lookup"],
                tool_parser="tests.support.agent_envs:always_call", max_turns=2)  # fmt: skip
    row = table.to_pylist()[0]
    assert row["finish_reason"] == "max_turns"
    assert row["messages"][1]["tool_calls"].startswith('[{"name": "lookup"')
    assert row["messages"][2]["role"] == "tool" and row["messages"][2]["content"].startswith("fact")
    assert row["tool_names"] == ["lookup", "lookup"]
    assert [c["turn"] for c in row["tool_calls"]] == [0, 1]


@pytest.mark.parametrize(("policy", "finish"), [("end", "tool_error"), ("continue", "max_turns")])
def test_on_tool_error_ends_or_continues(chat_model, stops, policy, finish):
    table = run(chat_model, stops, tools=["tests.support.agent_envs:lookup"],
                tool_parser="tests.support.agent_envs:call_missing", max_turns=2,
                on_tool_error=policy)  # fmt: skip
    row = table.to_pylist()[0]
    assert row["finish_reason"] == finish
    assert "unknown tool 'no_such_tool'" in row["env_errors"][0]
    assert row["messages"][2]["content"].startswith("Error: unknown tool")


def test_a_hanging_tool_times_out_per_call(chat_model, stops):
    table = run(chat_model, stops, tools=["tests.support.agent_envs:slow_tool"],
                tool_parser="tests.support.agent_envs:call_slow", tool_timeout_s=0.2,
                on_tool_error="end")  # fmt: skip
    assert set(table["finish_reason"].to_pylist()) == {"tool_error"}
    assert "timed out after 0.2s" in table["env_errors"][0][0].as_py()


def test_the_episode_timeout_bounds_a_slow_episode(chat_model, stops):
    table = run(chat_model, stops, tools=["tests.support.agent_envs:slow_tool"],
                tool_parser="tests.support.agent_envs:call_slow",
                episode_timeout_s=0.5)  # fmt: skip
    assert set(table["finish_reason"].to_pylist()) == {"timeout"}


@pytest.mark.parametrize(
    ("mode", "finish", "error"),
    [
        ("raise", "tool_error", "ValueError: simulator crashed"),
        ("garbage", "tool_error", "not a StepResult"),
        ("nan", "tool_error", "step returned the reward nan"),
        ("hang", "timeout", "no answer within 0.3s"),
        ("reset", "tool_error", "reset: RuntimeError: cannot start"),
    ],
)
def test_a_broken_environment_ends_its_episode_and_never_the_run(
    chat_model, stops, mode, finish, error
):
    table = run(chat_model, stops, environment="tests.support.agent_envs:BrokenEnv",
                env_params={"mode": mode}, step_timeout_s=0.3)  # fmt: skip
    assert table.num_rows == 3
    assert set(table["finish_reason"].to_pylist()) == {finish}
    assert error in table["env_errors"][0][0].as_py()
    assert len(table["response_ids"][0]) == len(table["response_mask"][0])


def test_generated_log_probs_match_the_model_on_its_own_tokens(chat_model, stops):
    """What the trainer recomputes on model tokens equals what the engine recorded."""
    table = run(chat_model, stops, environment="tests.support.agent_envs:EchoEnv", max_turns=3)
    engine = TorchEngine.from_pretrained(chat_model)
    row = table.to_pylist()[0]
    ids = torch.tensor([row["prompt_ids"] + row["response_ids"]])
    with torch.no_grad():
        logits = engine.model(ids).logits[0, len(row["prompt_ids"]) - 1 : -1]
    logprobs = torch.log_softmax(logits.float(), -1).gather(
        -1, torch.tensor(row["response_ids"])[:, None]
    )[:, 0]
    mask = torch.tensor(row["response_mask"], dtype=torch.bool)
    assert 0 < int(mask.sum()) < len(mask)
    assert torch.allclose(logprobs[mask], torch.tensor(row["response_logprobs"])[mask], atol=1e-4)


def test_episodes_in_flight_overlap_their_tool_calls_and_turns(chat_model, stops):
    """8 episodes x 2 tool calls of 0.15 s: one at a time >= 2.4 s; 8 in flight share the
    waits and batch their turns in the engine."""
    import time

    prompts = pa.table({"prompt_id": pa.array(range(4), pa.int64()), "prompt": ["a"] * 4})
    seconds = {}
    for concurrency in (1, 8):
        start = time.perf_counter()
        table = run(chat_model, stops, prompts=prompts, n=2, max_turns=3,
                    tools=["tests.support.agent_envs:slow_tool"],
                    tool_parser="tests.support.agent_envs:call_quick",
                    max_concurrency=concurrency)  # fmt: skip
        seconds[concurrency] = time.perf_counter() - start
        assert set(table["finish_reason"].to_pylist()) == {"max_turns"}
    assert seconds[1] >= 8 * 2 * 0.15
    assert seconds[8] < seconds[1] / 2


def test_the_python_tool_runs_in_the_sandbox_within_episodes(chat_model, stops):
    table = run(chat_model, stops, tools=["python"],
                tool_parser="tests.support.agent_envs:call_python",
                max_turns=2, sandbox_slots=1)  # fmt: skip
    row = table.to_pylist()[0]
    assert row["messages"][2] == {"role": "tool", "content": "42\n", "name": "python",
                                  "tool_calls": ""}  # fmt: skip
    assert row["tool_calls"][0]["error"] == ""


def test_a_parser_that_raises_is_a_parse_error_shown_to_the_model(chat_model, stops):
    table = run(chat_model, stops, tools=["tests.support.agent_envs:lookup"], max_turns=2,
                tool_parser="tests.support.agent_envs:broken_parser")  # fmt: skip
    row = table.to_pylist()[0]
    assert row["finish_reason"] == "max_turns"
    assert "the tool-call parser raised KeyError('oops')" in row["messages"][2]["content"]
