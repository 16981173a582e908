"""The agent_gateway operator: the user's agent per prompt x n, and what happens to episodes
whose agent raises, hangs, returns garbage, sends a malformed request or never asks."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from operators.generate.gateway.agents import agent_function
from operators.generate.gateway.node import AgentGateway
from operators.generate.gateway.params import GatewayParams, OnAgentError
from rldag import RowError, SpecError
from rldag.graph.operator import NodeContext
from tests.support.gateway import lookup_model

CTX = NodeContext("agent", 0, 0, "unused")


def prompts(ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "prompt_id": pa.array(ids, pa.int64()),
            "prompt": [f"lookup {i % 10}" for i in ids],
            "dataset_index": pa.array(ids, pa.int64()),
            "ground_truth": ["0"] * len(ids),
        }
    )


@pytest.fixture(scope="module")
def model():
    return str(lookup_model())


@pytest.fixture(scope="module")
def op(model):
    """One operator for the module (its engine and gateway warm), on_error set per call."""
    params = GatewayParams(model_path=model, agent="tests.support.gateway_agents:by_prompt",
                           n=2, max_total_tokens=48, timeout_s=8)  # fmt: skip
    gateway = AgentGateway(params)
    run(gateway, [0])  # the first forward and the gateway's start are not timed
    yield gateway
    gateway.close()


def run(op: AgentGateway, ids: list[int], on_error: str = "fail") -> pa.Table:
    op.p.on_error = OnAgentError(on_error)
    return op({"prompts": prompts(ids)}, CTX)


def test_each_row_is_an_episode_of_the_openai_agent_with_its_reward(op):
    table = run(op, [0, 10])
    assert table.num_rows == 4 and table["sample_idx"].to_pylist() == [0, 1, 0, 1]
    for row in table.to_pylist():
        assert row["agent_error"] == "" and row["requests"] == row["num_turns"] == 2
        assert row["reward"] == float(row["response"].strip() == row["ground_truth"])
        assert json.loads(row["reward_info"]) == {"tool_calls": 1}
        mask, logprobs = row["response_mask"], row["response_logprobs"]
        assert 0 in mask and all(
            (lp == 0.0) == (m == 0) for m, lp in zip(mask, logprobs, strict=True) if m == 0
        )
        assert len(row["response_ids"]) == len(mask) == len(logprobs)


def test_failing_agents_are_named_and_fail_the_run_by_default(op):
    with pytest.raises(RowError) as caught:
        run(op, [1])
    message = str(caught.value)
    assert "episode (prompt_id 1, sample_idx 0)" in message
    assert (
        "raised ValueError: the agent's own bug" in message and "on_error: zero or drop" in message
    )


def test_on_error_zero_keeps_every_episode_with_reward_zero_and_says_why(op):
    table = run(op, [0, 1, 2, 3, 4, 5], on_error="zero")
    rows = {(r["prompt_id"], r["sample_idx"]): r for r in table.to_pylist()}
    assert len(rows) == 12
    kinds = {p: rows[(p, 0)]["agent_error"].split(":")[0] for p in range(6)}
    assert kinds == {0: "", 1: "raised", 2: "timeout", 3: "garbage", 4: "raised", 5: "garbage"}
    assert "BadRequestError" in rows[(4, 0)]["agent_error"]  # the gateway's 400, as the SDK saw it
    assert "messages[0].role" in rows[(4, 0)]["env_errors"][0]  # and recorded in the episode
    assert "no completion request" in rows[(5, 1)]["agent_error"]
    assert (
        rows[(2, 0)]["finish_reason"] == "timeout"
        and rows[(1, 0)]["finish_reason"] == "agent_error"
    )
    assert all(rows[(p, k)]["reward"] == 0.0 for p in range(1, 6) for k in range(2))
    assert rows[(1, 0)]["num_turns"] == 1  # the turn before the agent failed is kept


def test_on_error_drop_removes_only_the_failed_episodes(op):
    table = run(op, [0, 3], on_error="drop")
    assert table["prompt_id"].to_pylist() == [0, 0] and set(table["agent_error"].to_pylist()) == {
        ""
    }
    with pytest.raises(RowError, match="failed on every episode"):
        run(op, [3], on_error="drop")


def test_the_agent_is_checked_when_the_params_are(model):
    with pytest.raises(SpecError, match="async function"):
        GatewayParams(model_path=model, agent="tests.support.gateway_agents:not_async")
    with pytest.raises(SpecError, match="give the agent"):
        GatewayParams(model_path=model)


def run_agent(op: AgentGateway, agent: str, ids: list[int]) -> pa.Table:
    """`run` with another agent (`module:function`) for this call only."""
    kept, op.agent = op.agent, agent_function(agent)
    try:
        return run(op, ids)
    finally:
        op.agent = kept


def test_the_agents_client_is_served_in_process_with_the_tokens_http_gets(op):
    """The client handed to the agent skips the socket; an agent's own client over HTTP gets
    the same episodes, token for token (per-sequence RNG), with the same log-probs up to the
    float noise of other batch shapes."""
    served = op.server.server.server_state
    before = served.total_requests
    in_process = run(op, [6, 17])
    assert served.total_requests == before  # nothing went over HTTP
    over_http = run_agent(op, "tests.support.gateway_agents:over_http", [6, 17])
    assert served.total_requests - before == sum(over_http["requests"].to_pylist()) > 0
    for name in ("prompt_ids", "response_ids", "response_mask", "reward"):
        assert in_process[name].to_pylist() == over_http[name].to_pylist(), name
    ours, theirs = (t["response_logprobs"].to_pylist() for t in (in_process, over_http))
    for mine, other in zip(ours, theirs, strict=True):
        assert mine == pytest.approx(other, abs=1e-4)


def test_one_sessions_requests_at_once_on_both_clients_are_each_answered(op):
    """Requests over HTTP arrive on the server's event loop and those of the handed client on
    the agents': a session serves them all on the agents' loop, one after the other."""
    table = run_agent(op, "tests.support.gateway_agents:both_clients_at_once", [6, 17])
    assert set(table["agent_error"].to_pylist()) == {""}
    assert set(table["reward"].to_pylist()) == {1.0} and set(table["requests"].to_pylist()) == {2}
