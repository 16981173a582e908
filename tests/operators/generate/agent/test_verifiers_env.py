"""A verifiers taskset (tests/support/verifiers_addition.py, written with verifiers' own API)
as rldag prompts and as an agent of the real gateway on the tiny addition model, then a whole
run of it (examples/agent_gateway.yaml with the verifiers agent): the rows' rewards are the
taskset's own rubric."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from examples.tiny_task import build_tiny_task
from operators.generate.agent.verifiers_env import load_taskset, prompt_rows, write_prompts
from tests.support.gateway import GatewayHarness
from tests.support.paths import ROOT
from tests.support.runs import run_pipeline
from tests.support.verifiers_addition import AdditionTaskset, rollout, taskset

TINY = ROOT / ".cache" / "tiny"
AGENT = "tests.support.verifiers_addition:rollout"


@pytest.fixture(scope="module")
def model():
    return build_tiny_task(TINY) / "model"


def test_the_taskset_is_found_by_its_id_and_written_as_prompt_rows(tmp_path):
    found = load_taskset("tests.support.verifiers_addition")
    assert isinstance(found, AdditionTaskset)
    rows = pq.read_table(write_prompts(found, tmp_path / "p.parquet")).to_pylist()
    tasks = list(taskset())
    assert [r["prompt"] for r in rows] == [t.data.prompt for t in tasks]
    assert rows[5]["prompt"] == "1+2=" and rows[5]["ground_truth"] == "3"
    info = json.loads(rows[5]["extra_info"])
    assert info == {"verifiers_key": tasks[5].key, "idx": 5}
    assert prompt_rows(found) == rows


def test_an_episode_through_the_gateway_is_scored_by_the_tasks_rubric(model):
    gateway = GatewayHarness(model)
    try:
        rows = prompt_rows(taskset())
        for index in (0, 4):  # "0+0=" and "1+1="
            task = {**rows[index], "dataset_index": index, "prompt_id": index, "sample_idx": 0}
            out, episode = gateway.run(lambda client, t=task: rollout(client, t))
            reply = episode.text.strip()  # what the model answered, as the session stored it
            right = float(reply == task["ground_truth"])
            digit = float(len(reply) == 1 and reply.isdigit())
            assert set(out) == {"reward", "rewards", "metrics"}
            assert out["rewards"] == {"correct": right, "one_digit": digit}
            assert out["reward"] == right + 0.5 * digit  # the rubric's weighted sum
            assert out["metrics"]["reply_chars"] == len(reply)
            assert gateway.last.requests == 1
    finally:
        gateway.close()


def test_a_row_written_for_another_task_is_refused(model):
    gateway = GatewayHarness(model)
    try:
        row = {**prompt_rows(taskset())[1], "dataset_index": 2}
        with pytest.raises(ValueError, match="written for another task"):
            gateway.run(lambda client: rollout(client, row))
    finally:
        gateway.close()


def test_a_run_trains_on_the_verifiers_taskset(tmp_path, model):
    prompts = write_prompts(taskset(), tmp_path / "prompts.parquet")
    run = run_pipeline(
        ROOT / "examples" / "agent_gateway.yaml",
        f"storage.uri={tmp_path / 'runs'}",
        "ray.enabled=false",
        f"model.path={model}",
        f"nodes.prompts.params.path={prompts}",
        "nodes.prompts.params.batch_size=4",
        f"nodes.agent.params.agent={AGENT}",
        "nodes.agent.params.n=2",
        "nodes.agent.params.on_error=fail",
        iterations=2,
    )
    answers = {r["prompt"]: r["ground_truth"] for r in prompt_rows(taskset())}
    for i in range(2):
        rows = run.table("agent", i).to_pylist()
        assert len(rows) == 8 and all(r["agent_error"] == "" for r in rows)
        for r in rows:
            info = json.loads(r["reward_info"])
            rewards = info["rewards"]
            assert rewards["correct"] in (0.0, 1.0) and rewards["one_digit"] in (0.0, 1.0)
            assert r["reward"] == rewards["correct"] + 0.5 * rewards["one_digit"]
            assert r["ground_truth"] == answers[r["prompt"]]
            reply = r["response"].strip()
            assert rewards["one_digit"] == float(len(reply) == 1 and reply.isdigit())
            assert info["metrics"]["reply_chars"] == len(reply)
        assert sum(r["reward"] for r in rows) > 0  # the rubric gives the model something
        assert run.table("train", i).to_pylist()[0]["tokens"] > 0
