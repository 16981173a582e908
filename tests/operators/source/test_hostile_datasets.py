"""Bad datasets are bad input: `rldag validate` (and `rldag run`, before anything runs) exits
2 naming the pipeline file, `nodes.prompts.params.path` (or `.prompt_key`), the dataset
file, the column and the row (the line of a JSONL file); a file that turns bad after
validation fails the run naming the node, the iteration and the row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.cli import main
from rldag.compute.in_process import InProcessPools
from rldag.config.errors import RunError
from tests.support.hostile import rldag
from tests.support.pipelines import scoring_pipeline
from tests.support.runs import drive_inline, start_run

GOOD = {"data_source": "arithmetic", "ground_truth": "2", "extra_info": {"index": 0}}
MESSAGES_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def _parquet(tmp_path: Path, columns: dict, schema: pa.Schema | None = None) -> Path:
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table(columns, schema=schema), path)
    return path


def _jsonl(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _row(prompt: object) -> bytes:
    return json.dumps({"prompt": prompt, **GOOD}).encode()


def _validate(write_yaml, tmp_path, data: Path, capsys, key: str = "path") -> str:
    """Run `rldag validate`; assert exit 2 naming the pipeline, key path and dataset file;
    return stderr."""
    doc = scoring_pipeline(data, storage={"uri": str(tmp_path / "runs")})
    pipeline = write_yaml(doc)
    assert main(["validate", str(pipeline)]) == 2
    err = capsys.readouterr().err.replace("\n", "")  # rich may wrap long lines
    assert f"{pipeline}: nodes.prompts.params.{key}: {data}" in err
    assert "Traceback" not in err
    return err


def test_a_missing_prompt_column_names_prompt_key(write_yaml, tmp_path, capsys):
    data = _parquet(tmp_path, {"question": ["1+1="], "ground_truth": ["2"]})
    err = _validate(write_yaml, tmp_path, data, capsys, key="prompt_key")
    assert "has no column 'prompt' (columns: question, ground_truth)" in err


@pytest.mark.parametrize(
    ("prompts", "said"),
    [
        (pa.array([1, 2]), "column 'prompt' is int64, expected a string or chat messages"),
        (
            pa.array([[{"role": "user"}]] * 2),
            "column 'prompt' is list<struct<role: string>>, expected a string or chat "
            "messages list<struct<role: string, content: string>>",
        ),
        (
            pa.array([[{"role": 1, "content": "x"}]] * 2),
            "column 'prompt' is list<struct<role: int64",
        ),
    ],
)
def test_a_mistyped_prompt_column_is_refused(write_yaml, tmp_path, capsys, prompts, said):
    data = _parquet(tmp_path, {"prompt": prompts, "ground_truth": ["2", "3"]})
    assert said in _validate(write_yaml, tmp_path, data, capsys)


def test_a_nested_ground_truth_is_refused(write_yaml, tmp_path, capsys):
    reward_model = [{"ground_truth": [1, 2]}, {"ground_truth": [3]}]
    data = _parquet(tmp_path, {"prompt": ["a", "b"], "reward_model": reward_model})
    err = _validate(write_yaml, tmp_path, data, capsys)
    assert "column 'reward_model.ground_truth' is list<int64>, expected a string or a number" in err


@pytest.mark.parametrize(
    ("prompts", "said"),
    [
        (["1+1=", "2+2=", "", "3+3="], "row 2: column 'prompt' is an empty prompt"),
        (["1+1=", "  \n "], "row 1: column 'prompt' is an empty prompt"),
        (["1+1=", None], "row 1: column 'prompt' is null; every row needs a prompt"),
    ],
)
def test_empty_and_null_text_prompts_name_the_row(write_yaml, tmp_path, capsys, prompts, said):
    data = _parquet(tmp_path, {"prompt": prompts})
    assert said in _validate(write_yaml, tmp_path, data, capsys)


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ([[{"role": "user", "content": "hi"}], []], "row 1: column 'prompt' is an empty list"),
        (
            [
                [{"role": "user", "content": "hi"}],
                [{"role": "system", "content": "s"}, {"role": "user", "content": None}],
            ],
            "row 1: column 'prompt' has a message without 'content'",
        ),
        (
            [[{"role": None, "content": "hi"}]],
            "row 0: column 'prompt' has a message without 'role'",
        ),
    ],
)
def test_bad_chat_messages_name_the_row(write_yaml, tmp_path, capsys, messages, said):
    data = _parquet(tmp_path, {"prompt": pa.array(messages, MESSAGES_TYPE)})
    assert said in _validate(write_yaml, tmp_path, data, capsys)


def test_jsonl_rows_are_named_with_their_line(write_yaml, tmp_path, capsys):
    data = _jsonl(tmp_path, [_row("1+1="), b"", _row("2+2="), _row("")])
    assert "row 2 (line 4): column 'prompt' is an empty prompt" in _validate(
        write_yaml, tmp_path, data, capsys
    )


def test_invalid_utf8_in_jsonl_names_the_line(write_yaml, tmp_path, capsys):
    data = _jsonl(tmp_path, [_row("1+1="), _row("2+2="), b'{"prompt": "3+3=\xff\xfe"}'])
    err = _validate(write_yaml, tmp_path, data, capsys)
    assert "line 3 is not valid UTF-8 (invalid start byte at byte 17 of the line)" in err


@pytest.mark.parametrize(
    ("third", "said"),
    [
        (
            b"{'prompt': 'single quotes'}",
            "line 3: JSON parse error: Missing a name for object member.",
        ),
        (_row([{"role": "user", "content": "hi"}]), "line 3: JSON parse error: Column(/prompt) "),
    ],
)
def test_a_line_that_is_not_json_or_changes_type_is_named(
    write_yaml, tmp_path, capsys, third, said
):
    data = _jsonl(tmp_path, [_row("1+1="), b"", third])
    assert said in _validate(write_yaml, tmp_path, data, capsys)


def test_invalid_utf8_in_a_parquet_string_column_names_the_row(write_yaml, tmp_path, capsys):
    # Arrow does not check UTF-8 when a string array is built from raw buffers, so a
    # Parquet file can carry such bytes (other writers produce them too).
    raw = [b"1+1=", b"2+\xc3("]
    offsets = pa.array([0, len(raw[0]), len(raw[0]) + len(raw[1])], pa.int32()).buffers()[1]
    bad = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"".join(raw))])
    data = _parquet(tmp_path, {"prompt": bad})
    assert "row 1: column 'prompt' is not valid UTF-8" in _validate(
        write_yaml, tmp_path, data, capsys
    )


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("data.jsonl", b"", "the file is empty (no rows)"),
        ("data.jsonl", b"\n\n", "the file is empty (no rows)"),
        ("data.parquet", b"", "the file is empty (0 bytes)"),
        ("data.parquet", b"PAR1 not really", "not a readable Parquet file"),
    ],
)
def test_empty_and_unreadable_files_are_refused(write_yaml, tmp_path, capsys, name, content, said):
    data = tmp_path / name
    data.write_bytes(content)
    assert said in _validate(write_yaml, tmp_path, data, capsys)


def test_a_parquet_file_without_rows_is_refused(write_yaml, tmp_path, capsys):
    data = _parquet(tmp_path, {"prompt": pa.array([], pa.string())})
    assert "the file has no rows" in _validate(write_yaml, tmp_path, data, capsys)


def test_the_cli_exits_2_before_running_anything(write_yaml, tmp_path):
    data = _jsonl(tmp_path, [_row("1+1="), _row("")])
    pipeline = write_yaml(scoring_pipeline(data, storage={"uri": str(tmp_path / "runs")}))
    for command in ("validate", "run"):
        result = rldag(command, str(pipeline), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        err = result.stderr.replace("\n", "")
        assert f"nodes.prompts.params.path: {data}: row 1 (line 2): column 'prompt' is an" in err
        assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_file_that_turns_bad_after_validation_fails_naming_node_iteration_row(
    write_yaml, tmp_path
):
    data = _jsonl(tmp_path, [_row("1+1="), _row("2+2=")])
    doc = scoring_pipeline(data, storage={"uri": str(tmp_path / "runs")}, ray={"enabled": False})
    doc["nodes"]["prompts"]["params"]["batch_size"] = 2  # the file's two rows
    run = start_run(write_yaml(doc), runner=InProcessPools())  # validated
    _jsonl(tmp_path, [_row("1+1="), _row("  ")])  # then the file changes
    with pytest.raises(RunError) as info:
        drive_inline(run)
    message = str(info.value)
    assert "node 'prompts' (iteration 0) failed" in message
    assert f"{data}: row 1 (line 2): column 'prompt' is an empty prompt" in message
