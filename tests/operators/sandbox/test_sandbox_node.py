"""The sandbox node inside a pipeline: programs from `response`, tests from the dataset,
pass rate as reward; and `rldag sandbox FILE.py` prints the same result as JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.paths import ROOT
from tests.support.runs import drive_inline, start_run
from tests.support.sandbox import SANDBOX_COLUMNS

TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
RESPONSES = [
    "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```",  # 2/2
    "```python\ndef add(a, b):\n    return a + b if a > 0 else 7\n```",  # 1/2
    "```python\nimport os\nos._exit(0)\n```",  # forged exit: 0/2
    "```python\ntry:\n    print(open('/etc/shadow').read())\nexcept OSError as e:\n"
    "    print('blocked')\ndef add(a, b): return 3\n```",  # 1/2, no leak
]


@pytest.fixture
def code_pipeline(tmp_path, write_yaml):
    data = pa.table(
        {
            "prompt": ["write add(a, b)"] * len(RESPONSES),
            "data_source": ["code"] * len(RESPONSES),
            "ground_truth": [TESTS] * len(RESPONSES),
            "response": RESPONSES,
        }
    )
    pq.write_table(data, tmp_path / "code.parquet")
    doc = {
        "name": "code",
        "model": {"path": "unused"},
        "storage": {"uri": str(tmp_path / "runs")},
        "nodes": {
            "prompts": {
                "kind": "source",
                "op": "dataset",
                "params": {
                    "path": str(tmp_path / "code.parquet"),
                    "batch_size": 4,
                    "shuffle": False,
                },
            },
            "execute": {
                "kind": "sandbox",
                "op": "sandbox.python",
                "inputs": {"rollouts": "prompts"},
                "params": {"wall_seconds": 2},
            },
            "score": {"kind": "score", "op": "pass_rate", "inputs": {"executed": "execute"}},
        },
    }
    return write_yaml(doc)


def test_sandbox_node_scores_by_pass_rate_and_stores_columns(ray_local, code_pipeline):
    run = start_run(code_pipeline)
    assert run.graph.nodes["execute"].pool == "environment"
    stored = drive_inline(run, 1)
    table = stored.table("score", 0)
    assert table["tests_total"].to_pylist() == [2, 2, 2, 2]
    assert table["tests_passed"].to_pylist() == [2, 1, 0, 1]
    assert table["reward"].to_pylist() == [1.0, 0.5, 0.0, 0.5]
    assert table["exec_status"].to_pylist()[0] == "ok"
    assert table["stdout"].to_pylist()[3] == "blocked\n"  # /etc/shadow is not there
    executed = stored.table("execute", 0)
    assert set(SANDBOX_COLUMNS) <= set(executed.column_names)


def test_sandbox_cli_prints_the_result_as_json(tmp_path):
    program = tmp_path / "solution.py"
    program.write_text("def add(a, b):\n    return a + b\nprint('hello')\n")
    tests = tmp_path / "tests.py"
    tests.write_text(TESTS + "assert add(2, 2) == 5\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "sandbox",
            str(program),
            "--tests",
            str(tests),
            "--timeout",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["tests_passed"], out["tests_total"]) == (2, 3)
    assert out["stdout"] == "hello\n" and out["exec_status"] == "ok"
    missing = subprocess.run(
        [sys.executable, "-m", "flows.cli", "sandbox", str(tmp_path / "nope.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "nope.py" in missing.stderr
    assert "Traceback" not in missing.stderr
