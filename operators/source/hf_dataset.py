"""`hf_dataset` source: prompts from a Hugging Face `datasets` directory, one batch per
iteration. Either a directory written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`
(memory-mapped Arrow), or a directory of data files (parquet, jsonl, csv) read with
`load_dataset`; `columns` maps their column names to ours.

Iteration i's batch is a pure function of (seed, i), so a resumed run sees the same prompts:
random access uses the `dataset` source's seeded epoch permutations; `streaming: true` reads
the files as a stream (shuffled through a seeded buffer, reseeded each epoch) and serves rows
[i * batch_size, (i + 1) * batch_size) of the stream; after a jump (resume) it re-reads the
stream up to that row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from omegaconf import MISSING

from operators.source.cursor import batch_indices
from operators.source.dataset import DATASET, DatasetParams, check_batch_size, normalise
from rldag import InputError, NodeContext, NodeKind, OperatorDef, check_choice, check_positive

OUR_COLUMNS = ("prompt", "ground_truth", "data_source", "extra_info")
STREAM_CHUNK = 1024  # rows read from the stream at a time
HINT = "map the answer column with params.columns: {ground_truth: <column>}"


@dataclass
class HfDatasetParams:
    """Parameters of the `hf_dataset` source."""

    path: str = MISSING  # a save_to_disk directory, or a directory of parquet/jsonl/csv files
    split: str = "train"  # the split to read (a DatasetDict's key, or load_dataset's split)
    columns: dict[str, str] = field(default_factory=dict)  # ours -> theirs: {prompt: question}
    batch_size: int = 32  # prompts per iteration
    shuffle: bool = True  # a new seeded order each epoch
    streaming: bool = False  # read the files as a stream (never all in memory or in a cache)
    shuffle_buffer: int = 10_000  # streaming + shuffle: rows in the shuffle buffer
    cache_dir: str | None = None  # load_dataset's Arrow cache (default: HF_DATASETS_CACHE)

    def __post_init__(self) -> None:
        for ours in self.columns:
            check_choice(f"columns.{ours}", ours, OUR_COLUMNS)
        check_positive("batch_size", self.batch_size)
        check_positive("shuffle_buffer", self.shuffle_buffer)


def _is_saved(path: Path) -> bool:
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _open(params: HfDatasetParams) -> Any:
    """The split as a `datasets.Dataset` (random access) or `IterableDataset` (streaming)."""
    try:
        import datasets
    except ImportError:
        message = "the hf_dataset source needs the Python package 'datasets'; "
        raise InputError(message + "install it with: pip install 'rldag[hf]'") from None

    path = Path(params.path)
    if not path.is_dir():
        raise InputError(f"dataset directory not found: {path}", path="path")
    if _is_saved(path):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if params.split not in loaded:
                splits = ", ".join(loaded)
                raise InputError(
                    f"{path} has no split '{params.split}' (splits: {splits})", path="split"
                )
            loaded = loaded[params.split]
        return loaded.to_iterable_dataset() if params.streaming else loaded
    try:
        return datasets.load_dataset(
            str(path), split=params.split, streaming=params.streaming, cache_dir=params.cache_dir
        )
    except ValueError as err:  # an unknown split
        if "split" in str(err).lower():
            raise InputError(f"{path}: {err}", path="split") from None
        raise InputError(f"{path}: {err}", path="path") from None
    except FileNotFoundError as err:  # no data files datasets can read
        raise InputError(f"{path}: {err}", path="path") from None


def to_our_columns(table: pa.Table, params: HfDatasetParams) -> pa.Table:
    """Rename their columns to ours (`columns`), then normalise as the `dataset` source does."""
    names = table.column_names
    for ours, theirs in params.columns.items():
        if theirs not in names:
            raise InputError(
                f"{params.path} has no column '{theirs}' (columns: {', '.join(names)})",
                path=f"columns.{ours}",
            )
    mapped = {theirs: ours for ours, theirs in params.columns.items()}
    keep = [n for n in names if n in mapped or n not in mapped.values()]
    table = table.select(keep).rename_columns([mapped.get(n, n) for n in keep])
    return normalise(table, DatasetParams(path=params.path, batch_size=params.batch_size), HINT)


def _first_rows(dataset: Any, rows: int) -> pa.Table:
    import datasets

    if isinstance(dataset, datasets.IterableDataset):
        return next(iter(dataset.with_format("arrow").iter(batch_size=rows)), pa.table({}))
    return dataset.with_format("arrow")[: min(rows, len(dataset))]


def hf_dataset_schema(params: HfDatasetParams) -> pa.Schema:
    """The schema this source emits, from the split's first rows."""
    dataset = _open(params)
    first = _first_rows(dataset, 1)
    if first.num_rows == 0:
        raise InputError(f"split '{params.split}' of {params.path} is empty", path="path")
    if not params.streaming:  # a stream's length is not known without reading it all
        where = f"split '{params.split}' of {params.path}"
        check_batch_size(where, len(dataset), DatasetParams(where, params.batch_size))
    return to_our_columns(first, params).schema


class ArrowStream:
    """Rows [start, start + count) of an endless stream: epoch e is one pass over `dataset`
    with `set_epoch(e)` (which reseeds its shuffle). Reading on from where the last call
    stopped is O(count); any other start re-reads the stream from row 0."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset.with_format("arrow")
        self._restart()

    def _restart(self) -> None:
        self.position, self.epoch, self.in_epoch = 0, -1, 0
        self._pending, self._pending_index = pa.table({}), np.empty(0, np.int64)
        self._batches = iter(())

    def _next_chunk(self) -> pa.Table:
        while True:
            chunk = next(self._batches, None)
            if chunk is not None and chunk.num_rows:
                return chunk
            if chunk is None:  # the epoch is over: start the next one
                if self.epoch >= 0 and self.in_epoch == 0:
                    raise InputError("the dataset stream has no rows", path="path")
                self.epoch, self.in_epoch = self.epoch + 1, 0
                self.dataset.set_epoch(self.epoch)
                self._batches = iter(self.dataset.iter(batch_size=STREAM_CHUNK))

    def take(self, start: int, count: int) -> tuple[pa.Table, np.ndarray]:
        """The rows and each one's position within its epoch."""
        if start < self.position:
            self._restart()
        parts, index = [], []
        while self.position < start + count:
            if self._pending.num_rows == 0:
                self._pending = self._next_chunk()
                first = self.in_epoch
                self.in_epoch += self._pending.num_rows
                self._pending_index = np.arange(first, self.in_epoch)
            skip = max(0, start - self.position)
            n = min(self._pending.num_rows, start + count - self.position)
            if n > skip:
                parts.append(self._pending.slice(skip, n - skip))
                index.append(self._pending_index[skip:n])
            self._pending = self._pending.slice(n)
            self._pending_index = self._pending_index[n:]
            self.position += n
        return pa.concat_tables(parts), np.concatenate(index)


class HfDatasetSource:
    """Serves batch `ctx.batch_index` (the iteration's, unless refill rounds drew batches too);
    prompt ids are unique across the run (batch * batch_size + row)."""

    def __init__(self, params: HfDatasetParams) -> None:
        self.params = params
        self.dataset = _open(params)
        self._arrow = None if params.streaming else self.dataset.with_format("arrow")
        self._streams: dict[int, ArrowStream] = {}  # seed -> the stream (streaming only)
        if not params.streaming and len(self.dataset) == 0:
            raise InputError(f"split '{params.split}' of {params.path} is empty", path="path")

    def _stream(self, seed: int) -> ArrowStream:
        if seed not in self._streams:
            dataset = self.dataset
            if self.params.shuffle:
                dataset = dataset.shuffle(seed=seed, buffer_size=self.params.shuffle_buffer)
            self._streams[seed] = ArrowStream(dataset)
        return self._streams[seed]

    def rows(self, batch: int, seed: int) -> tuple[pa.Table, np.ndarray]:
        """Batch `batch`'s rows (the iteration's, unless refill rounds drew batches too), as
        stored, and their dataset indices."""
        size = self.params.batch_size
        if self.params.streaming:
            return self._stream(seed).take(batch * size, size)
        order = batch_indices(len(self.dataset), size, batch, seed, self.params.shuffle)
        return self._arrow[order.tolist()], order

    def __call__(self, inputs: dict, ctx: NodeContext) -> pa.Table:
        rows, index = self.rows(ctx.batch_index, ctx.seed)
        batch = to_our_columns(rows, self.params)
        start = ctx.batch_index * self.params.batch_size
        batch = batch.set_column(0, "prompt_id", pa.array(np.arange(start, start + len(index))))
        position = batch.schema.get_field_index("dataset_index")
        return batch.set_column(position, "dataset_index", pa.array(index, pa.int64()))


HF_DATASET = OperatorDef(
    name="hf_dataset",
    kind=NodeKind.source,
    factory=HfDatasetSource,
    adds=DATASET.adds,  # the same columns as the `dataset` source
    params=HfDatasetParams,
    stateful=True,
    draws=True,
    output_schema=hf_dataset_schema,
    description="Prompts from a Hugging Face datasets directory (save_to_disk or data files).",
)
