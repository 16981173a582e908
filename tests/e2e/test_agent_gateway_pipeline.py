"""examples/agent_gateway.yaml through the real pipeline: the OpenAI-SDK agent's episodes are
trained on, and the rows carry exactly the ids and log-probs the engine sampled (the trainer
recomputes the same log-probs on them before its first step)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from tests.support.gateway import lookup_model
from tests.support.paths import ROOT
from tests.support.runs import StoredRunView, run_pipeline

EXAMPLE = ROOT / "examples" / "agent_gateway.yaml"


def test_the_example_validates_and_names_a_bad_agent(capsys):
    assert main(["validate", str(EXAMPLE)]) == 0
    bad = "nodes.agent.params.agent=tests.support.gateway_agents:not_async"
    assert main(["validate", str(EXAMPLE), bad]) == 2
    assert "nodes.agent.params.agent" in capsys.readouterr().err


def _run(tmp_path: Path, *overrides: str, iterations: int = 2) -> StoredRunView:
    model = lookup_model()
    return run_pipeline(
        EXAMPLE,
        f"storage.uri={tmp_path}",
        "ray.enabled=false",
        f"model.path={model}",
        f"nodes.prompts.params.path={model.parent / 'train.parquet'}",
        "nodes.prompts.params.batch_size=4",
        "nodes.agent.params.n=2",
        *overrides,
        iterations=iterations,
    )


def test_the_agents_rows_are_exactly_what_was_sampled_and_trained_on(tmp_path):
    run = _run(tmp_path)
    for i in range(2):
        rows = run.table("agent", i).to_pylist()
        assert len(rows) == 8 and {r["policy_version"] for r in rows} == {i}
        assert all(r["agent_error"] == "" and r["requests"] == r["num_turns"] for r in rows)
        sampled = []
        for r in rows:
            mask, logprobs = r["response_mask"], r["response_logprobs"]
            assert len(r["response_ids"]) == len(mask) == len(logprobs)
            assert all(lp == 0.0 for m, lp in zip(mask, logprobs, strict=True) if not m)
            sampled += [lp for m, lp in zip(mask, logprobs, strict=True) if m]
        train = run.table("train", i).to_pylist()[0]
        assert train["tokens"] == len(sampled)  # the tool's tokens are not trained on
        # before its first step the trainer's log-probs of the stored ids are the sampled ones
        assert train["approx_kl"] == pytest.approx(0.0, abs=1e-6)
        assert train["mean_logprob"] == pytest.approx(sum(sampled) / len(sampled), abs=1e-4)


def test_on_a_rollout_server_the_agents_episodes_are_the_in_process_ones(tmp_path):
    """The agent's requests go to the rollout server of its episode's first one, which keeps
    the episode's cache between them: the same episodes as on the in-process engine."""
    served = ("nodes.agent.params.engine=server", "nodes.agent.params.servers=1")
    on_server = _run(tmp_path / "server", *served, iterations=1).table("agent", 0)
    in_process = _run(tmp_path / "torch", iterations=1).table("agent", 0)
    columns = ["prompt_id", "sample_idx", "response_ids", "response_mask", "requests", "reward"]
    assert on_server.select(columns).to_pylist() == in_process.select(columns).to_pylist()
    assert max(on_server["requests"].to_pylist()) > 1  # episodes of several requests
