"""`rldag plan` says which nodes take their input chunk by chunk and, for each node that waits
for its whole table, why."""

from __future__ import annotations

from flows.cli import main
from tests.support.paths import ROOT
from tests.support.pipelines import grpo_nodes


def plan(write_yaml, dataset, capsys, *overrides: str) -> list[str]:
    doc = {"name": "g", "model": {"path": "m"}, "pools": {"colocate": []}}
    doc["nodes"] = grpo_nodes("m", dataset, "tests.support.user_code:echo_score")
    doc["nodes"]["prompts"]["params"]["batch_size"] = 6  # the dataset's rows
    assert main(["plan", str(write_yaml(doc)), *overrides]) == 0
    return capsys.readouterr().out.splitlines()


def test_plan_names_the_nodes_that_stream(write_yaml, dataset, capsys):
    out = plan(write_yaml, dataset, capsys)
    streamed = next(line for line in out if "streamed (start on the first chunk" in line)
    assert "score <- generate, advantage <- score" in streamed
    assert "train <- advantage (steps as chunks arrive)" in streamed
    assert "    generate: operator torch_engine takes its whole input" in out


def test_plan_says_why_a_node_waits_for_its_whole_table(write_yaml, dataset, capsys):
    out = plan(
        write_yaml,
        dataset,
        capsys,
        "nodes.advantage.op=advantage",
        "nodes.advantage.params.estimator=reinforce_plus_plus",
        "nodes.train.params.epochs=2",
    )
    whole = next(line for line in out if "whole batch:" in line)
    assert whole.split(":", 1)[1].strip() == "generate, advantage, train"
    assert "    advantage: estimator reinforce_plus_plus normalises over the whole batch" in out
    assert "    train: epochs: 2 passes over the whole batch" in out


def test_the_streaming_example_trains_as_chunks_arrive(tiny_task, capsys):
    assert main(["plan", str(ROOT / "examples/stream_train.yaml")]) == 0
    out = capsys.readouterr().out
    assert "train <- advantage (steps as chunks arrive)" in out
