"""examples/code_sandbox.yaml end to end, without Prefect: the tiny code model generates
programs, the sandbox runs them against each problem's asserts, pass rate is the reward, GRPO
advantages train the policy. Also the code task's CLI on the same build."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.tiny_task import CodeTaskParams, build_tiny_task, is_built
from examples.tiny_task.__main__ import main as tiny_task_main
from operators.sandbox.spec import ExecStatus
from tests.support.paths import ROOT
from tests.support.runs import drive_inline, start_run
from tests.support.sandbox import SANDBOX_COLUMNS

EXAMPLE = ROOT / "examples" / "code_sandbox.yaml"
ITERATIONS = 2


@pytest.fixture(scope="session")
def code_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default code-task build (model, tokenizer, parquet), once per session."""
    return build_tiny_task(tmp_path_factory.mktemp("tiny_code_example") / "task", task="code")


def test_code_sandbox_example_runs_and_scores_by_pass_rate(
    ray_local, code_task: Path, tmp_path: Path
):
    overrides = [
        f"model.path={code_task / 'model'}",
        f"nodes.prompts.params.path={code_task / 'train.parquet'}",
        f"storage.uri={tmp_path / 'runs'}",
        f"iterations={ITERATIONS}",
    ]
    run = start_run(EXAMPLE, *overrides)
    assert run.graph.nodes["execute"].pool == "environment"
    stored = drive_inline(run, ITERATIONS)
    tokenizer_dir = code_task / "model"
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    for i in range(ITERATIONS):
        executed = stored.table("execute", i)
        assert executed.num_rows == 8 * 4  # batch_size prompts x n samples
        for column in SANDBOX_COLUMNS:
            assert column in executed.column_names, column
        rows = executed.to_pylist()
        assert all(r["tests_total"] > 0 for r in rows)
        assert {r["exec_status"] for r in rows} <= set(ExecStatus)
        assert all(r["data_source"] == "code" for r in rows)
        for r in rows:  # responses are the decoded response ids, non-empty text
            assert r["response"].strip()
            assert tok.decode(r["response_ids"], skip_special_tokens=True) == r["response"]
        scored = stored.table("score", i).to_pylist()
        for r in scored:
            assert 0.0 <= r["reward"] <= 1.0
            assert r["reward"] == pytest.approx(r["tests_passed"] / r["tests_total"])
        assert "advantage" in stored.table("advantage", i).column_names
    trained = stored.table("train", ITERATIONS - 1)
    assert max(trained["policy_version"].to_pylist()) == ITERATIONS
    assert stored.metric("iteration") == list(range(ITERATIONS))
    assert all(0.0 <= r <= 1.0 for r in stored.metric("reward/mean"))


def test_code_task_cli_reuses_the_build(code_task: Path, capsys: pytest.CaptureFixture[str]):
    assert is_built(code_task, CodeTaskParams())
    assert tiny_task_main(["--task", "code", "--out", str(code_task)]) == 0
    out = capsys.readouterr().out
    assert f"{code_task}: up to date" in out
    assert "format rate" in out and "sample for 'Write a Python function add(a, b)" in out
