"""The `hf_dataset` source over Hugging Face `datasets` directories the tests write: a
`save_to_disk` DatasetDict and directories of parquet/jsonl/csv files, with a split and a
column mapping; random access and streaming, each serving iteration i's batch as a pure
function of (seed, i)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from operators.source.hf_dataset import HfDatasetParams, HfDatasetSource, hf_dataset_schema
from rldag.config.errors import InputError
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from rldag.graph.operator import NodeContext
from tests.support.pipelines import scoring_pipeline

ROWS = 10


def _rows(split: str) -> list[dict]:
    return [
        {
            "question": f"{a}+{a + 1}=",
            "answer": str(2 * a + 1),
            "source": "arith",
            "meta": {"split": split, "index": a},
        }
        for a in range(ROWS)
    ]


@pytest.fixture
def saved_dict(tmp_path: Path) -> Path:
    """A DatasetDict (train, test) written by save_to_disk."""
    path = tmp_path / "saved"
    splits = {s: datasets.Dataset.from_list(_rows(s)) for s in ("train", "test")}
    datasets.DatasetDict(splits).save_to_disk(str(path))
    return path


def _write_files(root: Path, fmt: str) -> Path:
    import pandas as pd

    root.mkdir()
    for split in ("train", "test"):
        rows = _rows(split)
        if fmt == "csv":  # csv has no structs: meta as JSON text
            rows = [r | {"meta": json.dumps(r["meta"])} for r in rows]
        frame = pd.DataFrame(rows)
        if fmt == "parquet":
            frame.to_parquet(root / f"{split}.parquet")
        elif fmt == "jsonl":
            frame.to_json(root / f"{split}.jsonl", orient="records", lines=True)
        else:
            frame.to_csv(root / f"{split}.csv", index=False)
    return root


MAPPING = {"prompt": "question", "ground_truth": "answer", "data_source": "source"}


def _params(path: Path, tmp_path: Path, **extra) -> HfDatasetParams:
    fields = {"path": str(path), "columns": dict(MAPPING), "batch_size": 4}
    return HfDatasetParams(**(fields | {"cache_dir": str(tmp_path / "hf-cache")} | extra))


def _batch(source: HfDatasetSource, iteration: int, seed: int = 0):
    return source({}, NodeContext("prompts", iteration, seed, "file:///unused")).to_pylist()


def test_a_saved_dataset_dict_serves_the_split_in_our_columns(saved_dict, tmp_path):
    params = _params(saved_dict, tmp_path, split="test", shuffle=False)
    rows = _batch(HfDatasetSource(params), iteration=1)
    assert [r["prompt_id"] for r in rows] == [4, 5, 6, 7]
    assert [r["dataset_index"] for r in rows] == [4, 5, 6, 7]
    assert [r["prompt"] for r in rows] == [f"{a}+{a + 1}=" for a in range(4, 8)]
    assert [r["ground_truth"] for r in rows] == [str(2 * a + 1) for a in range(4, 8)]
    assert {r["data_source"] for r in rows} == {"arith"}
    assert json.loads(rows[0]["extra_info"]) == {}  # not mapped: no extra_info column
    assert rows[0]["meta"] == {"split": "test", "index": 4}  # their other columns pass through
    schema = hf_dataset_schema(params)
    assert schema.names[:6] == [
        "prompt_id", "prompt", "data_source", "ground_truth", "extra_info", "dataset_index"
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_a_directory_of_data_files_loads_by_split(fmt, tmp_path):
    root = _write_files(tmp_path / fmt, fmt)
    params = _params(
        root, tmp_path, split="test", shuffle=False, columns=MAPPING | {"extra_info": "meta"}
    )
    rows = _batch(HfDatasetSource(params), iteration=0)
    assert [r["prompt"] for r in rows] == [f"{a}+{a + 1}=" for a in range(4)]
    assert [r["ground_truth"] for r in rows] == [str(2 * a + 1) for a in range(4)]
    info = rows[2]["extra_info"]
    assert json.loads(json.loads(info) if fmt == "csv" else info) == {"split": "test", "index": 2}


def _all_batches(source: HfDatasetSource, iterations: int, seed: int) -> list[list[str]]:
    return [[r["prompt"] for r in _batch(source, i, seed)] for i in range(iterations)]


@pytest.mark.parametrize(
    ("source", "streaming"),
    [("saved", False), ("saved", True), ("parquet", False), ("jsonl", True)],
)
def test_iteration_i_is_a_pure_function_of_seed_and_i(source, streaming, saved_dict, tmp_path):
    path = saved_dict if source == "saved" else _write_files(tmp_path / source, source)
    params = _params(path, tmp_path, streaming=streaming, shuffle_buffer=4)
    iterations = 5  # 20 rows over a 10-row split: two whole epochs
    run = _all_batches(HfDatasetSource(params), iterations, seed=3)
    for i in (4, 2, 3):  # a fresh source (a resumed run), and jumps back
        fresh = HfDatasetSource(params)
        assert [r["prompt"] for r in _batch(fresh, i, seed=3)] == run[i]
    first, second = sum(run, [])[:ROWS], sum(run, [])[ROWS:]
    every = sorted(f"{a}+{a + 1}=" for a in range(ROWS))
    assert sorted(first) == every and sorted(second) == every  # each epoch: every row once
    assert first != second  # a new order each epoch
    assert _all_batches(HfDatasetSource(params), iterations, seed=4) != run


def test_a_streamed_parquet_directory_resumes_at_the_same_rows(tmp_path):
    # datasets sleeps 5 s whenever a shuffled parquet stream closes (an epoch ends, a source
    # is dropped): keep to one epoch and two sources here
    root = _write_files(tmp_path / "parquet", "parquet")
    params = _params(root, tmp_path, streaming=True, shuffle_buffer=4)
    source = HfDatasetSource(params)
    first = [_batch(source, i, seed=1) for i in range(2)]
    assert [r["prompt"] for r in _batch(HfDatasetSource(params), 1, seed=1)] == [
        r["prompt"] for r in first[1]
    ]
    assert len({r["prompt"] for batch in first for r in batch}) == 8  # no row twice


def test_streaming_without_shuffle_reads_rows_in_order_across_epochs(tmp_path):
    root = _write_files(tmp_path / "files", "jsonl")
    source = HfDatasetSource(_params(root, tmp_path, streaming=True, shuffle=False, batch_size=4))
    rows = _batch(source, iteration=2)  # stream rows 8..11: the epoch's last two, then 0, 1
    assert [r["dataset_index"] for r in rows] == [8, 9, 0, 1]
    assert [r["prompt_id"] for r in rows] == [8, 9, 10, 11]
    assert [r["prompt"] for r in rows] == ["8+9=", "9+10=", "0+1=", "1+2="]


def _pipeline(write_yaml, path: Path, tmp_path: Path, **params) -> Path:
    doc = scoring_pipeline(Path("unused"), storage={"uri": f"file://{tmp_path}/runs"})
    doc["ray"] = {"enabled": False}
    doc["nodes"]["prompts"] = {
        "kind": "source",
        "op": "hf_dataset",
        "params": {"path": str(path), "columns": MAPPING, "batch_size": 4} | params,
    }
    return write_yaml(doc)


def test_a_pipeline_runs_over_a_saved_dataset(write_yaml, saved_dict, tmp_path, run_pipeline):
    run = run_pipeline(_pipeline(write_yaml, saved_dict, tmp_path), iterations=2)
    for i in range(2):
        scored = run.table("score", i)
        for row in scored.select(["prompt", "ground_truth"]).to_pylist():
            a, b = row["prompt"].rstrip("=").split("+")  # the mapped question and answer
            assert int(a) + int(b) == int(row["ground_truth"])
        # ANSWER_HALF answers even prompt ids with the ground truth: echo_score gives 1.0
        ids = scored["prompt_id"].to_pylist()
        assert scored["reward"].to_pylist() == [float(p % 2 == 0) for p in ids]


@pytest.mark.parametrize(
    ("params", "path", "message"),
    [
        ({"columns": {"prompt": "query"}}, "columns.prompt", "no column 'query' (columns: "),
        ({"split": "validation"}, "split", "no split 'validation' (splits: train, test)"),
        ({"columns": {"answer": "answer"}}, "columns.answer", "expected one of [prompt, "),
        ({"batch_size": 0}, "batch_size", "must be > 0"),
    ],
)
def test_bad_params_name_the_key(write_yaml, saved_dict, tmp_path, params, path, message):
    spec = _pipeline(write_yaml, saved_dict, tmp_path, **params)
    with pytest.raises(InputError) as err:
        build_graph(load_pipeline(spec))
    assert err.value.path == f"nodes.prompts.params.{path}"
    assert message in err.value.message


def test_a_missing_directory_is_bad_input(write_yaml, tmp_path):
    spec = _pipeline(write_yaml, tmp_path / "nowhere", tmp_path)
    with pytest.raises(InputError, match="dataset directory not found") as err:
        build_graph(load_pipeline(spec))
    assert err.value.path == "nodes.prompts.params.path"
