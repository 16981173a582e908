"""Which streaming nodes wait for their whole input, and why (rldag.graph.streaming): a
batch-wide advantage estimator, a trainer's several epochs, several training ranks, or a
trainer sharing its workers with generation; the rest take their input chunk by chunk."""

from __future__ import annotations

import pytest

from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from tests.support.pipelines import grpo_nodes


def grpo_graph(write_yaml, dataset, **top: object):
    doc = {"name": "g", "model": {"path": "m"}, **top}
    doc["nodes"] = grpo_nodes("m", dataset, "tests.support.user_code:echo_score")
    doc["nodes"]["prompts"]["params"]["batch_size"] = 6  # the dataset's rows
    return doc, lambda: build_graph(load_pipeline(write_yaml(doc)))


@pytest.mark.parametrize(
    ("top", "waits"),
    [
        ({"ray": {"enabled": False}}, ""),
        ({"pools": {"colocate": []}}, ""),
        ({}, "shares workers with generate (pools.colocate)"),
        ({"pools": {"colocate": [], "training": {"workers": 2}}}, "2 ranks"),
    ],
)
def test_a_trainer_streams_on_one_rank_of_its_own(write_yaml, dataset, top, waits):
    _, build = grpo_graph(write_yaml, dataset, **top)
    train = build().nodes["train"]
    assert (waits in train.waits) if waits else train.waits == ""
    assert train.op.streams == (not waits) and train.op.consumes_chunks


def test_a_trainer_of_several_epochs_waits(write_yaml, dataset):
    doc, build = grpo_graph(write_yaml, dataset, ray={"enabled": False})
    doc["nodes"]["train"]["params"]["epochs"] = 2
    train = build().nodes["train"]
    assert train.waits == "epochs: 2 passes over the whole batch" and not train.op.streams


@pytest.mark.parametrize(
    ("estimator", "streams"),
    [("grpo", True), ("rloo", True), ("reinforce_plus_plus", False)],
)
def test_per_group_estimators_stream_batch_wide_ones_wait(write_yaml, dataset, estimator, streams):
    doc, build = grpo_graph(write_yaml, dataset, ray={"enabled": False})
    doc["nodes"]["advantage"] |= {"op": "advantage", "params": {"estimator": estimator}}
    advantage = build().nodes["advantage"]
    assert advantage.op.streams == streams
    assert advantage.waits == (
        "" if streams else f"estimator {estimator} normalises over the whole batch"
    )
