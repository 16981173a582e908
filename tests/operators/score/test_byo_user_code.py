"""A new user's reward code mistakes (issue 28, items 2 and 7): a reward file that does not
parse, one that raises while it is imported, and a reward function without veRL's signature
are refused by `rldag validate` and `rldag run` (exit 2) naming the key, the file (and line)
and what was expected, before anything runs."""

from __future__ import annotations

import pytest

from flows.cli import main
from tests.support.byo import assert_refused, jsonl, pipeline, rldag, sums, user_package
from tests.support.byo import write_pipeline as write

SYNTAX_ERROR = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str == ground_truth
"""
RAISES_AT_IMPORT = """
import json

TABLE = json.load(open("answers.json"))  # a file that is not there


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(TABLE.get(solution_str) == ground_truth)
"""
TRL_STYLE = """
def compute_score(solution_str, ground_truth):
    return float(solution_str == ground_truth)
"""


def _user_pipeline(tmp_path, user_root, reward_source: str) -> str:
    user_package(user_root, {"reward.py": reward_source})
    doc = pipeline(tmp_path, "my-org/my-llama", jsonl(tmp_path / "train.jsonl", sums()))
    doc["nodes"]["prompts"]["params"]["ground_truth_key"] = "answer"
    return str(write(tmp_path, doc))


def _assert_refused(command, tmp_path, user_root, capsys, source: str, *fragments: str) -> None:
    """`rldag COMMAND` on the user's pipeline with `source` as their reward file: refused."""
    code = main([command, _user_pipeline(tmp_path, user_root, source)])
    assert_refused(code, capsys.readouterr().err, tmp_path / "runs", *fragments)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_reward_file_with_a_syntax_error_names_the_file_and_line(
    command, tmp_path, user_root, capsys
):
    _assert_refused(
        command,
        tmp_path,
        user_root,
        capsys,
        SYNTAX_ERROR,
        "nodes.score.op: module 'mypkg.reward' has a syntax error",
        f"{user_root / 'mypkg' / 'reward.py'}, line 3",
    )


def test_the_real_command_exits_2_on_a_syntax_error(tmp_path, user_root):
    path = _user_pipeline(tmp_path, user_root, SYNTAX_ERROR)
    result = rldag("validate", path, cwd=tmp_path, user_root=user_root)
    assert_refused(result.returncode, result.stderr, tmp_path / "runs", "nodes.score.op")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_reward_file_that_raises_at_import_names_the_error_and_file(
    command, tmp_path, user_root, capsys
):
    _assert_refused(
        command,
        tmp_path,
        user_root,
        capsys,
        RAISES_AT_IMPORT,
        "nodes.score.op: importing module 'mypkg.reward' raised FileNotFoundError",
        "'answers.json'",
        f"(at {user_root / 'mypkg' / 'reward.py'}:4)",
    )


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_reward_function_without_verl_signature_is_refused_saying_what_was_expected(
    command, tmp_path, user_root, capsys
):
    _assert_refused(
        command,
        tmp_path,
        user_root,
        capsys,
        TRL_STYLE,
        "nodes.score.op: reward function 'mypkg.reward:compute_score' has the signature "
        "compute_score(solution_str, ground_truth)",
        "compute_score(data_source, solution_str, ground_truth, extra_info=None, ...)",
    )
