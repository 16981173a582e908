"""agent_loop through the real pipeline on the tiny model: episodes with tool calls are
scored and trained on; on Ray the environments live as actors on the environment pool."""

from __future__ import annotations

import os
from pathlib import Path

from flows.cli import main
from tests.support.paths import ROOT
from tests.support.runs import StoredRunView, run_pipeline

EXAMPLE = ROOT / "examples" / "agent_python_tool.yaml"


def _run(
    tiny_task: Path, tmp_path: Path, overrides: list[str], iterations: int = 2
) -> StoredRunView:
    return run_pipeline(
        EXAMPLE,
        f"storage.uri={tmp_path}",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=4",
        "nodes.generate.params.n=2",
        "nodes.generate.params.max_turns=2",
        *overrides,
        iterations=iterations,
    )


def test_the_example_validates_and_plan_shows_the_environment_bound(capsys):
    assert main(["validate", str(EXAMPLE)]) == 0
    assert main(["plan", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "pool environment" in out and "max concurrency 64" in out
    assert "hosts generate's actors (at most 16 at once: 1 worker(s) x 16)" in out
    assert main(["plan", str(EXAMPLE), "pools.environment.max_concurrency=8"]) == 2
    assert (
        "nodes.generate.params.max_concurrency: 1 worker(s) x concurrency 16 = 16 exceeds "
        "pools.environment.max_concurrency=8" in capsys.readouterr().err
    )


TOOLS = [
    "ray.enabled=false",
    "nodes.generate.params.tools=[tests.support.agent_envs:lookup]",
    "nodes.generate.params.tool_parser=tests.support.agent_envs:always_call",
]


def test_episodes_with_tool_calls_are_scored_and_trained_in_process(tiny_task, tmp_path):
    run = _run(tiny_task, tmp_path, TOOLS)
    for i in range(2):
        gen = run.table("generate", i)
        assert gen.num_rows == 8 and set(gen["policy_version"].to_pylist()) == {i}
        assert set(gen["finish_reason"].to_pylist()) <= {"max_turns", "length"}
        assert any(name == "lookup" for names in gen["tool_names"].to_pylist() for name in names)
        masks = gen["response_mask"].to_pylist()
        assert all(0 in m and 1 in m for m, f in zip(masks, gen["finish_reason"].to_pylist(),
                                                     strict=True) if f == "max_turns")  # fmt: skip
        scored = run.table("score", i)
        assert scored.column_names.count("reward") == 1  # the score node replaced it
    train = run.table("train", 1)
    model_tokens = sum(sum(m) for m in gen["response_mask"].to_pylist())
    assert model_tokens < sum(len(r) for r in gen["response_ids"].to_pylist())
    assert sum(train["tokens"].to_pylist()) == model_tokens  # tool tokens are not counted


def test_on_ray_environments_are_actors_on_the_environment_pool(ray_local, tiny_task, tmp_path):
    """...and an environment that raises or hangs there ends its episode, not the run."""
    run = _run(
        tiny_task,
        tmp_path,
        [
            "nodes.generate.params.tools=[]",
            "nodes.generate.params.environment=tests.support.agent_envs:WhereEnv",
            "nodes.generate.params.tool_parser=none",
            "nodes.generate.params.step_timeout_s=2",
            "nodes.prompts.params.batch_size=8",
            "nodes.probe.kind=transform",
            "nodes.probe.op=tests.support.user_code:WORKER_INFO",
            "nodes.probe.pool=rollout",
            "nodes.probe.inputs.rows=generate",
        ],
        iterations=1,
    )
    import json

    gen = run.table("generate", 0)
    turns = [t for row in gen["turns"].to_pylist() for t in row]
    infos = [json.loads(t["info"]) for t in turns if t["info"]]  # failed steps have none
    assert infos, "no environment step ran"
    groups = {i["placement_group"] for i in infos}
    pids = {i["pid"] for i in infos}
    rollout = set(run.table("probe", 0)["pid"].to_pylist())
    assert len(groups) == 1 and None not in groups  # the environment pool's placement group
    assert len(pids) == 1 and not pids & rollout and os.getpid() not in pids  # one host actor
    # a raising or hanging environment on an actor ends its episode, never the run
    expected = {0: "max_turns", 1: "max_turns", 2: "tool_error", 3: "timeout"}
    for row in gen.select(["prompt_id", "finish_reason", "env_errors"]).to_pylist():
        assert row["finish_reason"] == expected[row["prompt_id"] % 4]
        if row["prompt_id"] % 4 == 2:
            assert "ValueError: simulator crashed" in row["env_errors"][0]
    assert {p % 4 for p in gen["prompt_id"].to_pylist()} == {0, 1, 2, 3}


def test_episodes_on_a_rollout_server_sample_what_the_in_process_engine_samples(
    tiny_task, tmp_path
):
    """An episode's turns go to the server of its first turn, which keeps its cache as a
    session between turns: the rows are the in-process engine's (which reuses it in process)."""
    served = ["nodes.generate.params.engine=server", "nodes.generate.params.servers=1"]
    on_server = _run(tiny_task, tmp_path / "server", [*TOOLS, *served], iterations=1)
    in_process = _run(tiny_task, tmp_path / "torch", TOOLS, iterations=1)
    columns = ["prompt_id", "sample_idx", "response_ids", "response_mask", "finish_reason"]
    server_rows = on_server.table("generate", 0).select(columns).to_pylist()
    assert server_rows == in_process.table("generate", 0).select(columns).to_pylist()
    assert any(sum(1 - m for m in row["response_mask"]) > 0 for row in server_rows)  # turns
