"""Seeing multi-turn episodes: `rldag inspect RUN --node N --trajectory K` prints one episode
turn by turn from the stored table, and the sample-rollouts artifact's Markdown shows whole
trajectories (rldag/report/trajectory.py, rldag/report/rollouts.py). The table has the trajectory
columns of
the `agent_loop` operator (operators/generate/agent/table.py: AGENT_COLUMNS)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from flows.cli import main
from operators.generate.agent.table import AGENT_COLUMNS
from rldag.report.rollouts import rollouts_markdown, sample_rollouts
from rldag.report.trajectory import trajectory
from rldag.storage.store import Storage

RUN = "agent-20261201-120000-abcd"
BASE = pa.schema(
    [("prompt_id", pa.int64()), ("sample_idx", pa.int32()), ("prompt", pa.string()),
     ("response", pa.string()), ("finish_reason", pa.string()), ("policy_version", pa.int64())]
)  # fmt: skip
SCHEMA = pa.schema([*BASE, *AGENT_COLUMNS.items()])  # what agent_loop stores
CALL = '<tool_call>{"name": "python", "arguments": {"code": "print(37*58)"}}</tool_call>'


def message(role: str, content: str, name: str = "", calls: str = "") -> dict:
    return {"role": role, "content": content, "name": name, "tool_calls": calls}


def turn(start, model_end, end, reward, errors=()) -> dict:
    return {
        "start": start, "model_end": model_end, "end": end, "generate_seconds": 0.25,
        "env_seconds": 0.1, "reward": reward, "policy_version": 3, "finish": "stop",
        "errors": list(errors), "info": json.dumps({"solved": reward > 0}) if reward else "",
    }  # fmt: skip


def episodes() -> pa.Table:
    """Two episodes of one prompt: one that used its tool and answered, one whose call
    failed."""
    prompt = [message("system", "You can run python."), message("user", "37*58=")]
    calls = json.dumps([{"name": "python", "arguments": '{"code": "print(37*58)"}'}])
    solved = [
        *prompt,
        message("assistant", CALL, calls=calls),
        message("tool", "2146", name="python"),
        message("assistant", "2146"),
    ]
    failed = [
        *prompt,
        message("assistant", CALL, calls=calls),
        message("tool", "error: NameError: name 'x' is not defined", name="python"),
        message("assistant", "2000"),
    ]
    call = {"turn": 0, "name": "python", "arguments": '{"code": "print(37*58)"}', "seconds": 0.1}
    rows = {
        "prompt_id": [7, 7], "sample_idx": [0, 1], "prompt": ["37*58="] * 2,
        "response": ["2146", "2000"], "finish_reason": ["stop", "stop"],
        "policy_version": [3, 3], "messages": [solved, failed], "num_turns": [2, 2],
        "turn_rewards": [[0.0, 1.0], [0.0, 0.0]], "reward": [1.0, 0.0],
        "turns": [
            [turn(0, 12, 17, 0.0), turn(17, 21, 21, 1.0)],
            [turn(0, 12, 30, 0.0, ["python: NameError: name 'x' is not defined"]),
             turn(30, 34, 34, 0.0)],
        ],
        "tool_calls": [[{**call, "error": ""}], [{**call, "error": "NameError: x"}]],
        "tool_names": [["python"], ["python"]], "env_errors": [[], ["python: NameError"]],
        "env_seconds": [0.2, 0.2], "generate_seconds": [0.5, 0.5],
        "response_mask": [[1] * 12 + [0] * 5 + [1] * 4, [1] * 12 + [0] * 18 + [1] * 4],
    }  # fmt: skip
    return pa.table(rows, schema=SCHEMA)


@pytest.fixture
def runs(tmp_path):
    store = Storage(str(tmp_path / "runs"))
    store.write_text(f"{RUN}/pipeline.yaml", "name: agent\niterations: 2\nnodes: {agent: {}}\n")
    store.write_table(f"{RUN}/iter=0/agent.parquet", episodes())
    store.write_table(f"{RUN}/iter=0/prompts.parquet", pa.table({"prompt_id": [7]}))
    return tmp_path / "runs"


def test_an_episode_splits_into_its_prompt_and_turns():
    episode = trajectory(episodes().to_pylist()[0])
    assert [m["role"] for m in episode.prompt] == ["system", "user"]
    assert [(t.index, t.said["content"], t.reward) for t in episode.turns] == [
        (0, CALL, 0.0),
        (1, "2146", 1.0),
    ]
    assert [m["content"] for m in episode.turns[0].answer] == ["2146"]
    assert [c["name"] for c in episode.turns[0].calls] == ["python"]
    assert episode.turns[1].calls == [] and episode.turns[1].answer == []


def test_inspect_trajectory_prints_turns_tool_calls_and_rewards(runs, capsys):
    args = ["inspect", str(runs / RUN), "--node", "agent", "--trajectory", "0"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "agent, iteration 0, trajectory 0 of 2" in out
    assert "prompt_id 7 · sample_idx 0 · reward 1 · num_turns 2 · finish_reason stop" in out
    first = out.index("turn 0 · reward 0 · 12 model tokens, 5 environment tokens · stop")
    tool = out.index("tool (python): 2146")
    second = out.index("turn 1 · reward 1 · 4 model tokens, 0 environment tokens")
    assert out.index("prompt · system") < out.index("prompt · user") < first < tool < second
    table = out[first:tool]
    assert "tool calls" in table and "python" in table and "print(37*58)" in table
    assert 'info: {"solved": true}' in out[second:] and "info:" not in out[first:second]


def test_a_failed_call_shows_its_error_in_its_turn(runs, capsys):
    args = ["inspect", str(runs / RUN), "--node", "agent", "--iter", "0", "--trajectory", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    turn0 = out[out.index("turn 0") : out.index("turn 1")]
    assert "NameError: x" in turn0  # the call's error in its tool-call row
    assert "error: python: NameError: name 'x' is not defined" in turn0  # the turn's errors
    assert "episode error: python: NameError" in out[out.index("turn 1") :]


@pytest.mark.parametrize(
    ("args", "option", "says"),
    [
        (["--node", "agent", "--trajectory", "2"], "--trajectory", "no row 2: 'agent' stored 2"),
        (["--node", "prompts", "--trajectory", "0"], "--trajectory", "no 'messages' column"),
        (["--trajectory", "0"], "--node", "--trajectory needs --node"),
    ],
)
def test_bad_trajectory_options_exit_2_naming_them(runs, capsys, args, option, says):
    assert main(["inspect", str(runs / RUN), *args]) == 2
    err = capsys.readouterr().err
    assert f"error: {option}:" in err and says in err


class _Graph:
    order = ["prompts", "agent"]


def test_the_sample_rollouts_artifact_shows_whole_trajectories_turn_by_turn():
    rows = sample_rollouts(_Graph(), {"agent": episodes()}, k=2)
    assert [len(r["messages"]) for r in rows] == [5, 5]  # whole episodes, not just responses
    markdown = rollouts_markdown(rows, 0)
    assert "### prompt 7, sample 0 · reward **1**" in markdown
    first = markdown.index("**turn 0 · reward 0 · 12 model tokens, 5 environment tokens")
    call = markdown.index('- tool call `python` `{"code": "print(37*58)"}`')
    answer = markdown.index("*tool (python)*\n\n```\n2146\n```")
    assert markdown.index("**prompt · user**") < first < call < answer
    assert markdown.index("**turn 1 · reward 1") > answer
    assert markdown.index('- info `{"solved": true}`') > markdown.index("**turn 1 · reward 1")
    assert "— error: NameError: x" in markdown  # the second episode's failed call
    assert "\nresponse\n" not in markdown  # single-turn layout not used for trajectories
