"""`dataset` source: prompts from a Parquet or JSONL file, one batch per iteration.

veRL-format Parquet loads as is: `reward_model.ground_truth` becomes `ground_truth`, a struct
`extra_info` becomes a JSON string. Each epoch is a seeded permutation, so iteration i's batch
is a pure function of (seed, i): a resumed run sees the same prompts. `oversample` hands out
more prompts per iteration than the train batch needs, for a filter that drops some groups
(`dynamic_sampling`).
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

from operators.data.cursor import batch_indices
from operators.data.dataset_checks import (
    JSONL_SUFFIXES,
    check_rows,
    check_schema,
    read_schema,
    read_table,
)
from rldag.errors import InputError
from rldag.operator import NodeContext, OperatorDef
from rldag.schema import MESSAGES, col
from rldag.spec import NodeKind


@dataclass
class DatasetParams:
    """Parameters of the `dataset` source."""

    path: str = MISSING  # .parquet or .jsonl file
    batch_size: int = 32  # prompts per iteration (times oversample)
    shuffle: bool = True  # a new seeded permutation each epoch
    prompt_key: str = "prompt"  # column holding the prompt (string or chat messages)
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


def _out_fields(schema: pa.Schema, params: DatasetParams) -> list[pa.Field]:
    prompt_type = schema.field(params.prompt_key).type
    if not (pa.types.is_string(prompt_type) or pa.types.is_large_string(prompt_type)):
        prompt_type = MESSAGES
    fixed = {"prompt_id", params.prompt_key, "data_source", "reward_model", "extra_info"}
    fixed |= {"ground_truth", "dataset_index"}
    rest = [f for f in schema if f.name not in fixed]
    return [
        pa.field("prompt_id", pa.int64()),
        pa.field("prompt", pa.string() if prompt_type != MESSAGES else MESSAGES),
        pa.field("data_source", pa.string()),
        pa.field("ground_truth", pa.string()),
        pa.field("extra_info", pa.string()),
        pa.field("dataset_index", pa.int64()),
        *rest,
    ]


def dataset_schema(params: DatasetParams) -> pa.Schema:
    """The schema this source emits, from the file's metadata, after checking its prompts
    (of a Parquet file only the prompt column is read)."""
    path = _check(params)
    schema = read_schema(path)
    check_schema(path, schema, params.prompt_key)
    table, data = read_table(path, [params.prompt_key])
    check_rows(path, table, params.prompt_key, data)
    return pa.schema(_out_fields(schema, params))


def _ground_truth(table: pa.Table) -> pa.Array:
    if "ground_truth" in table.column_names:
        return pc.cast(table["ground_truth"], pa.string())
    if "reward_model" in table.column_names:
        struct = table["reward_model"].combine_chunks()
        if pa.types.is_struct(struct.type) and struct.type.get_field_index("ground_truth") >= 0:
            return pc.cast(pc.struct_field(struct, "ground_truth"), pa.string())
    return pa.nulls(table.num_rows, pa.string())


def _to_json(column: pa.ChunkedArray | None, rows: int) -> pa.Array:
    if column is None:
        return pa.array(["{}"] * rows, pa.string())
    if pa.types.is_string(column.type):
        return column.combine_chunks()
    return pa.array([json.dumps(v, default=str) for v in column.to_pylist()], pa.string())


def normalise(table: pa.Table, params: DatasetParams) -> pa.Table:
    """Rename and convert a dataset table to the source columns of the vocabulary."""
    fields = _out_fields(table.schema, params)
    rows = table.num_rows
    source = table["data_source"] if "data_source" in table.column_names else None
    values = {
        "prompt_id": pa.array(np.arange(rows), pa.int64()),
        "prompt": table[params.prompt_key].cast(fields[1].type),
        "data_source": source.cast(pa.string()) if source is not None else pa.array([""] * rows),
        "ground_truth": _ground_truth(table),
        "extra_info": _to_json(
            table["extra_info"] if "extra_info" in table.column_names else None, rows
        ),
        "dataset_index": pa.array(np.arange(rows), pa.int64()),
    }
    arrays = [values[f.name] if f.name in values else table[f.name] for f in fields]
    return pa.table(arrays, schema=pa.schema(fields))


class DatasetSource:
    """Serves batch i of the seeded epoch order; prompt ids are unique across the run."""

    def __init__(self, params: DatasetParams) -> None:
        self.params = params
        path = _check(params)
        table, data = read_table(path)
        check_schema(path, table.schema, params.prompt_key)
        check_rows(path, table, params.prompt_key, data)
        self.table = normalise(table, params)

    def batch_indices(self, iteration: int, seed: int) -> np.ndarray:
        """Dataset rows of iteration `iteration`'s batch (wrapping over epochs)."""
        rows, size = self.table.num_rows, self.params.prompts_per_iteration
        return batch_indices(rows, size, iteration, seed, self.params.shuffle)

    def __call__(self, inputs: dict, ctx: NodeContext) -> pa.Table:
        batch = self.table.take(self.batch_indices(ctx.iteration, ctx.seed))
        start = ctx.iteration * self.params.prompts_per_iteration
        ids = pa.array(np.arange(start, start + batch.num_rows), pa.int64())
        return batch.set_column(0, "prompt_id", ids)


DATASET = OperatorDef(
    name="dataset",
    kind=NodeKind.source,
    factory=DatasetSource,
    adds=(col("prompt_id"), col("prompt"), col("data_source"), col("ground_truth")),
    params=DatasetParams,
    stateful=True,
    output_schema=dataset_schema,
    description="Prompts from a Parquet/JSONL file (veRL format accepted), a batch per iteration.",
)
