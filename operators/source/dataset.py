"""`dataset` source: prompts from a Parquet or JSONL file, one batch per iteration.

veRL-format Parquet loads as is: `reward_model.ground_truth` becomes `ground_truth`, a struct
`extra_info` becomes a JSON string. Each epoch is a seeded permutation, so batch b of the
prompt stream is a pure function of (seed, b): a resumed run sees the same prompts. Batch b
is iteration b's, unless DAPO's refill rounds drew batches too (`ctx.batch_index`;
docs/guides/dapo.md#refill). `oversample` hands out more prompts per batch than the train
batch needs, for a filter that drops some groups (`dynamic_sampling`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from omegaconf import MISSING

from operators.source.cursor import batch_indices
from operators.source.dataset_checks import (
    JSONL_SUFFIXES,
    answer_key,
    check_rows,
    check_schema,
    describe_columns,
    read_schema,
    read_table,
)
from rldag import InputError, NodeContext, NodeKind, OperatorDef
from rldag.graph.schema import MESSAGES, col, without_values


@dataclass
class DatasetParams:
    """Parameters of the `dataset` source."""

    path: str = MISSING  # .parquet or .jsonl file
    batch_size: int = 32  # prompts per iteration (times oversample)
    shuffle: bool = True  # a new seeded permutation each epoch
    prompt_key: str = "prompt"  # column holding the prompt (string or chat messages)
    # column holding the answer (`ground_truth`), or a struct's field: reward_model.ground_truth;
    # default: `ground_truth`, else veRL's `reward_model.ground_truth`
    ground_truth_key: str | None = None
    oversample: float = 1.0  # prompts per iteration = ceil(batch_size * oversample)

    @property
    def prompts_per_iteration(self) -> int:
        """How many prompts each iteration's batch holds."""
        return math.ceil(self.batch_size * self.oversample)


def _check(params: DatasetParams) -> Path:
    path = Path(params.path)
    if not path.is_file():
        raise InputError(f"dataset file not found: {path}", path="path")
    if path.suffix not in (".parquet", *JSONL_SUFFIXES):
        raise InputError(f"expected a .parquet or .jsonl file, got {path.name}", path="path")
    if params.batch_size < 1:
        raise InputError(f"must be >= 1, got {params.batch_size}", path="batch_size")
    if not params.oversample >= 1.0:
        raise InputError(f"must be >= 1.0, got {params.oversample}", path="oversample")
    return path


ANSWER_HINT = (
    "name the answer column with params.ground_truth_key (e.g. answer, or a struct's field: "
    "reward_model.ground_truth)"
)


def _out_fields(
    schema: pa.Schema, params: DatasetParams, answer_hint: str = ANSWER_HINT
) -> list[pa.Field]:
    prompt_type = schema.field(params.prompt_key).type
    if not (pa.types.is_string(prompt_type) or pa.types.is_large_string(prompt_type)):
        prompt_type = MESSAGES
    fixed = {"prompt_id", params.prompt_key, "data_source", "reward_model", "extra_info"}
    fixed |= {"ground_truth", "dataset_index"}
    if params.ground_truth_key:
        fixed.add(params.ground_truth_key)  # renamed to ground_truth, as the prompt column
    rest = [f for f in schema if f.name not in fixed]
    ground_truth = pa.field("ground_truth", pa.string())
    if answer_key(Path(params.path), schema, params.ground_truth_key) is None:
        ground_truth = without_values(
            ground_truth,
            f"{params.path} has no answer column: no 'ground_truth' and no "
            f"'reward_model.ground_truth' (columns: {describe_columns(schema)}); {answer_hint}",
        )
    return [
        pa.field("prompt_id", pa.int64()),
        pa.field("prompt", pa.string() if prompt_type != MESSAGES else MESSAGES),
        pa.field("data_source", pa.string()),
        ground_truth,
        pa.field("extra_info", pa.string()),
        pa.field("dataset_index", pa.int64()),
        *rest,
    ]


def dataset_schema(params: DatasetParams) -> pa.Schema:
    """The schema this source emits, from the file's metadata, after checking its prompts
    (of a Parquet file only the prompt column is read)."""
    path = _check(params)
    schema = read_schema(path)
    check_schema(path, schema, params.prompt_key, params.ground_truth_key)
    table, data = read_table(path, [params.prompt_key])
    check_rows(path, table, params.prompt_key, data)
    check_batch_size(path, table.num_rows, params)
    return pa.schema(_out_fields(schema, params))


def check_batch_size(where: str | Path, rows: int, params: DatasetParams) -> None:
    """A batch takes each prompt at most once: `where` (the data) must hold a batch's
    prompts."""
    wanted = params.prompts_per_iteration
    if wanted <= rows:
        return
    times = f" (batch_size {params.batch_size} x oversample {params.oversample})"
    raise InputError(
        f"{where} has {rows} rows, fewer than the {wanted} prompts an iteration takes"
        f"{times if params.oversample != 1.0 else ''}; a batch would repeat prompts: set "
        f"batch_size to at most {math.floor(rows / params.oversample)}, or add rows",
        path="batch_size",
    )


def _ground_truth(table: pa.Table, key: str | None) -> pa.Array:
    """The answers at dotted `key` (a column or a struct's field) as strings; nulls if None."""
    if key is None:
        return pa.nulls(table.num_rows, pa.string())
    first, *rest = key.split(".")
    values = table[first].combine_chunks()
    for part in rest:
        values = pc.struct_field(values, part)
    return pc.cast(values, pa.string())


def _to_json(column: pa.ChunkedArray | None, rows: int) -> pa.Array:
    if column is None:
        return pa.array(["{}"] * rows, pa.string())
    if pa.types.is_string(column.type):
        return column.combine_chunks()
    return pa.array([json.dumps(v, default=str) for v in column.to_pylist()], pa.string())


def normalise(table: pa.Table, params: DatasetParams, answer_hint: str = ANSWER_HINT) -> pa.Table:
    """Rename and convert a dataset table to the source columns of the vocabulary; a table
    without answers says so in its schema (``answer_hint``: how to name its answer column)."""
    fields = _out_fields(table.schema, params, answer_hint)
    answer = answer_key(Path(params.path), table.schema, params.ground_truth_key)
    rows = table.num_rows
    source = table["data_source"] if "data_source" in table.column_names else None
    values = {
        "prompt_id": pa.array(np.arange(rows), pa.int64()),
        "prompt": table[params.prompt_key].cast(fields[1].type),
        "data_source": source.cast(pa.string()) if source is not None else pa.array([""] * rows),
        "ground_truth": _ground_truth(table, answer),
        "extra_info": _to_json(
            table["extra_info"] if "extra_info" in table.column_names else None, rows
        ),
        "dataset_index": pa.array(np.arange(rows), pa.int64()),
    }
    arrays = [values[f.name] if f.name in values else table[f.name] for f in fields]
    return pa.table(arrays, schema=pa.schema(fields))


class DatasetSource:
    """Serves batch `ctx.batch_index` of the seeded epoch order (the iteration, unless refill
    rounds drew batches too); prompt ids are positions in that stream, unique across the run."""

    def __init__(self, params: DatasetParams) -> None:
        self.params = params
        path = _check(params)
        table, data = read_table(path)
        check_schema(path, table.schema, params.prompt_key, params.ground_truth_key)
        check_rows(path, table, params.prompt_key, data)
        self.table = normalise(table, params)

    def batch_indices(self, batch: int, seed: int) -> np.ndarray:
        """Dataset rows of batch `batch` of the prompt stream (wrapping over epochs)."""
        rows, size = self.table.num_rows, self.params.prompts_per_iteration
        return batch_indices(rows, size, batch, seed, self.params.shuffle)

    def __call__(self, inputs: dict, ctx: NodeContext) -> pa.Table:
        batch = self.table.take(self.batch_indices(ctx.batch_index, ctx.seed))
        start = ctx.batch_index * self.params.prompts_per_iteration
        ids = pa.array(np.arange(start, start + batch.num_rows), pa.int64())
        return batch.set_column(0, "prompt_id", ids)


DATASET = OperatorDef(
    name="dataset",
    kind=NodeKind.source,
    factory=DatasetSource,
    adds=(col("prompt_id"), col("prompt"), col("data_source"), col("ground_truth")),
    params=DatasetParams,
    stateful=True,
    draws=True,
    output_schema=dataset_schema,
    description="Prompts from a Parquet/JSONL file (veRL format accepted), a batch per iteration.",
)
