"""Paths that moved in issue 29's floor plan keep working for what users wrote before it: an
old `module:attr` in a pipeline validates and warns with the new path, an old Python import
works and warns, an old package-level name resolves, and `python -m` of a moved module fails
naming the new command (rldag/config/moved.py, operators/moved.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from operators.moved import OPERATOR_MOVES
from rldag.config.moved import CORE_MOVES, MovedPathWarning, moved
from rldag.graph.registry import import_target
from tests.support.paths import ROOT

OLD = {new[0]: old.removesuffix(".*") for old, new in OPERATOR_MOVES.items()}


def back_dated(text: str) -> str:
    """`text` with every built-in `module:attr` path written as before the move."""
    for new, old in sorted(OLD.items(), key=lambda item: len(item[0]), reverse=True):
        text = text.replace(new + ".", old + ".").replace(new + ":", old + ":")
    return text


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("example", ["pipeline.yaml", "examples/agent_tools.yaml"])
def test_a_pipeline_written_before_the_move_validates_and_names_the_new_paths(
    example: str, tmp_path: Path
) -> None:
    text = (ROOT / example).read_text()
    old = back_dated(text)
    assert old != text  # it uses a built-in path that moved
    path = tmp_path / Path(example).name
    path.write_text(old.replace("path: .cache", f"path: {ROOT}/.cache"))
    result = subprocess.run(
        [Path(sys.executable).parent / "rldag", "validate", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warned and all("moved to" in line for line in warned)
    if "operators.rewards.arithmetic:compute_score" in old:  # named with its file and key
        said = (
            f"{path}: nodes.score.op: 'operators.rewards.arithmetic:compute_score' moved to "
            "'operators.score.rewards.arithmetic:compute_score'"
        )
        assert any(said in line for line in warned), warned


def test_an_old_python_import_works_and_warns() -> None:
    code = (
        "import warnings; warnings.simplefilter('error', FutureWarning)\n"
        "try:\n    from rldag.operator import OperatorDef\n"
        "except FutureWarning as w:\n    print(w)\n"
        "warnings.simplefilter('ignore')\n"
        "from rldag.operator import OperatorDef\n"
        "from rldag.graph.operator import OperatorDef as New\n"
        "assert OperatorDef is New\n"
    )
    result = python("-c", code)
    assert result.returncode == 0, result.stderr
    assert "'rldag.operator' moved to 'rldag.graph.operator'" in result.stdout


def test_an_old_module_that_is_now_a_package_still_gives_its_names() -> None:
    from operators.generate.single_turn import TORCH_ENGINE

    with pytest.warns(MovedPathWarning, match="operators.generate.single_turn"):
        assert import_target("operators.generate:TORCH_ENGINE") is TORCH_ENGINE
    with pytest.warns(MovedPathWarning, match="rldag.graph.dag"):
        from rldag.graph import build_graph
    from rldag.graph.dag import build_graph as new

    assert build_graph is new


def test_the_map_gives_new_paths_and_leaves_new_ones_alone() -> None:
    assert moved("operators.agent.gym_env:GymTextEnvironment") == (
        "operators.generate.agent.gym_env:GymTextEnvironment"
    )
    assert moved("operators.generate:TORCH_ENGINE") == "operators.generate.single_turn:TORCH_ENGINE"
    assert moved("rldag.spec") == "rldag.config.spec"
    assert moved("operators.generate.agent.loop:AGENT_LOOP") is None
    assert moved("operators.score.rewards.arithmetic:compute_score") is None
    for old, targets in {**CORE_MOVES, **OPERATOR_MOVES}.items():
        assert moved(old.removesuffix(".*")) == targets[0]
        for new in targets:
            file = ROOT / new.replace(".", "/")
            assert file.with_suffix(".py").exists() or (file / "__init__.py").exists(), new


def test_python_m_of_a_moved_module_names_the_new_command() -> None:
    result = python("-m", "operators.tiny_task", "--help")
    assert result.returncode != 0
    assert "python -m examples.tiny_task" in result.stderr
