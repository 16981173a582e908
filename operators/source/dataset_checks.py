"""Reading a dataset file and checking that its rows can be served as prompts.

Every problem is an InputError (key `path`, the graph adds `nodes.<node>.params.`) naming
the file, the column and the row (for JSONL also the line): an unreadable or empty file,
invalid UTF-8, a missing or mistyped prompt column, null or empty prompts, chat messages
without a role or content, ground truths that cannot be read as text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from rldag import MESSAGES, InputError, type_name

JSONL_SUFFIXES = (".jsonl", ".json")
# Columns the source converts to strings: these types convert, nested ones do not.
_SCALAR = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer)
_SCALAR += (pa.types.is_floating, pa.types.is_boolean, pa.types.is_null)


def _bad(path: Path, what: str) -> InputError:
    return InputError(f"{path}: {what}", path="path")


def _jsonl_line(data: bytes, row: int) -> int:
    """The 1-based line of JSONL row `row` (pyarrow skips blank lines)."""
    lines = [n for n, text in enumerate(data.split(b"\n"), 1) if text.strip()]
    return lines[row] if row < len(lines) else len(lines)


def _read_jsonl(path: Path) -> tuple[pa.Table, bytes]:
    data = path.read_bytes()
    if not data.strip():
        raise _bad(path, "the file is empty (no rows)")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        byte = err.start - data.rfind(b"\n", 0, err.start)
        what = f"line {line} is not valid UTF-8 ({err.reason} at byte {byte} of the line)"
        raise _bad(path, what) from None
    try:
        return pajson.read_json(pa.BufferReader(data)), data
    except pa.ArrowException as err:
        message = str(err)
        found = re.search(r" in row (\d+)$", message)
        if found is None:
            raise _bad(path, f"not valid JSON lines: {message}") from None
        line = _jsonl_line(data, int(found.group(1)))
        raise _bad(path, f"line {line}: {message[: found.start()]}") from None


def _unreadable(path: Path, err: Exception) -> InputError:
    if path.stat().st_size == 0:
        return _bad(path, "the file is empty (0 bytes)")
    return _bad(path, f"not a readable Parquet file ({err})")


def read_table(path: Path, columns: list[str] | None = None) -> tuple[pa.Table, bytes | None]:
    """The file's rows (only `columns` of a Parquet file, if given) and, for JSONL, its
    bytes (to name lines in later errors)."""
    if path.suffix in JSONL_SUFFIXES:
        return _read_jsonl(path)
    try:
        return pq.read_table(path, columns=columns), None
    except (pa.ArrowException, OSError) as err:
        raise _unreadable(path, err) from None


def read_schema(path: Path) -> pa.Schema:
    """The file's schema: from a Parquet file's metadata, from all the rows of JSONL."""
    if path.suffix in JSONL_SUFFIXES:
        return _read_jsonl(path)[0].schema
    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        raise _unreadable(path, err) from None


def _where(row: int, data: bytes | None) -> str:
    return f"row {row}" + (f" (line {_jsonl_line(data, row)})" if data is not None else "")


def _first(mask: pa.ChunkedArray | pa.Array) -> int | None:
    """Index of the first true value of a boolean array (nulls count as false)."""
    hits = pc.indices_nonzero(pc.fill_null(mask, False))
    return hits[0].as_py() if len(hits) else None


def _invalid_utf8(strings: pa.ChunkedArray | pa.Array) -> int | None:
    """Index of the first value of a string array that is not valid UTF-8 (Parquet files
    can hold such bytes; Arrow checks only when asked)."""
    try:
        (strings if isinstance(strings, pa.Array) else strings.combine_chunks()).validate(full=True)
        return None
    except pa.ArrowInvalid:
        values = pc.cast(strings, pa.binary()).to_pylist()
        return next(i for i, v in enumerate(values) if v is not None and not _decodes(v))


def _decodes(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def is_messages(t: pa.DataType) -> bool:
    """A list of structs with string `role` and `content` (more fields are dropped)."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    item = t.value_type
    if not pa.types.is_struct(item):
        return False
    names = {item.field(i).name: item.field(i).type for i in range(item.num_fields)}
    return all(pa.types.is_string(names.get(k, pa.null())) for k in ("role", "content"))


# Where the answers are when `ground_truth_key` names no column: ours, then veRL's.
DEFAULT_ANSWERS = ("ground_truth", "reward_model.ground_truth")


def _field_at(schema: pa.Schema, key: str) -> pa.DataType | None:
    """The type at dotted `key` (a column, or a field of a struct column), None if absent."""
    first, *rest = key.split(".")
    if first not in schema.names:
        return None
    t = schema.field(first).type
    for part in rest:
        if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
            return None
        t = t.field(part).type
    return t


def answer_key(path: Path, schema: pa.Schema, ground_truth_key: str | None) -> str | None:
    """The dotted key of the answer column: `ground_truth_key` (InputError naming the columns
    when the file has none such), else the first of DEFAULT_ANSWERS the file has, else None
    (the file holds no answers)."""
    if ground_truth_key is None:
        return next((k for k in DEFAULT_ANSWERS if _field_at(schema, k) is not None), None)
    if _field_at(schema, ground_truth_key) is None:
        raise InputError(
            f"{path} has no column '{ground_truth_key}' (columns: {describe_columns(schema)})",
            path="ground_truth_key",
        )
    return ground_truth_key


def describe_columns(schema: pa.Schema) -> str:
    """The columns of `schema`, a struct's fields shown as ``name{a, b}``."""

    def one(f: pa.Field) -> str:
        if pa.types.is_struct(f.type):
            names = ", ".join(f.type.field(i).name for i in range(f.type.num_fields))
            return f"{f.name}{{{names}}}"
        return f.name

    return ", ".join(one(f) for f in schema) or "none"


def check_schema(
    path: Path, schema: pa.Schema, prompt_key: str, ground_truth_key: str | None = None
) -> None:
    """The prompt column exists and holds text or chat messages; the answer column (if the
    file has one) and the other columns converted to strings are scalars."""
    if prompt_key not in schema.names:
        raise InputError(
            f"{path} has no column '{prompt_key}' (columns: {', '.join(schema.names)})",
            path="prompt_key",
        )
    t = schema.field(prompt_key).type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or is_messages(t)):
        raise _bad(
            path,
            f"column '{prompt_key}' is {type_name(t)}, expected a string or chat messages "
            f"{type_name(MESSAGES)}",
        )
    answer = answer_key(path, schema, ground_truth_key)
    for name in ("data_source", *([answer] if answer else [])):
        t = _field_at(schema, name)
        if t is not None and not any(is_scalar(t) for is_scalar in _SCALAR):
            raise _bad(path, f"column '{name}' is {type_name(t)}, expected a string or a number")


def _check_text(path: Path, text: pa.Array, key: str, data: bytes | None) -> None:
    row = _invalid_utf8(text)
    if row is not None:
        raise _bad(path, f"{_where(row, data)}: column '{key}' is not valid UTF-8")
    row = _first(pc.is_null(text))
    if row is not None:
        raise _bad(path, f"{_where(row, data)}: column '{key}' is null; every row needs a prompt")
    row = _first(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(text)), 0))
    if row is not None:
        raise _bad(path, f"{_where(row, data)}: column '{key}' is an empty prompt")


def _check_messages(path: Path, messages: pa.Array, key: str, data: bytes | None) -> None:
    row = _first(pc.is_null(messages))
    if row is not None:
        raise _bad(path, f"{_where(row, data)}: column '{key}' is null; every row needs a prompt")
    row = _first(pc.equal(pc.list_value_length(messages), 0))
    if row is not None:
        raise _bad(path, f"{_where(row, data)}: column '{key}' is an empty list of messages")
    flat, parents = pc.list_flatten(messages), pc.list_parent_indices(messages)
    for field in ("role", "content"):
        values = pc.struct_field(flat, field)
        bad = _first(pc.or_(pc.is_null(flat), pc.is_null(values)))
        what = f"has a message without '{field}'"
        if bad is None and (bad := _invalid_utf8(values)) is not None:
            what = f"has a message whose '{field}' is not valid UTF-8"
        if bad is not None:
            row = parents[bad].as_py()
            raise _bad(path, f"{_where(row, data)}: column '{key}' {what}")


def check_rows(path: Path, table: pa.Table, prompt_key: str, data: bytes | None) -> None:
    """The file has rows, and every row's prompt is usable (after check_schema)."""
    if table.num_rows == 0:
        raise _bad(path, "the file has no rows")
    prompts = table[prompt_key].combine_chunks()
    if is_messages(prompts.type):
        _check_messages(path, prompts, prompt_key, data)
    else:
        _check_text(path, prompts, prompt_key, data)
