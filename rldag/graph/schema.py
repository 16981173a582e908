"""Arrow schemas of edges: the shared column vocabulary and the compatibility check.

A consumer port requires columns (each with one or more acceptable Arrow types); a
producer offers a concrete schema. Extra columns pass through untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from rldag.config.errors import SchemaError

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))

# The edge columns of DESIGN.md: one name means one thing everywhere.
VOCABULARY: dict[str, tuple[pa.DataType, ...]] = {
    "prompt_id": (pa.int64(),),
    "prompt": (pa.string(), MESSAGES),
    "data_source": (pa.string(),),
    "ground_truth": (pa.string(),),
    "extra_info": (pa.string(),),
    "sample_idx": (pa.int32(),),
    "response": (pa.string(),),
    "prompt_ids": (pa.list_(pa.int32()),),
    "response_ids": (pa.list_(pa.int32()),),
    "response_logprobs": (pa.list_(pa.float32()),),
    "ref_logprobs": (pa.list_(pa.float32()),),
    "finish_reason": (pa.string(),),
    "policy_version": (pa.int64(),),  # the oldest version that generated the row
    "policy_version_max": (pa.int64(),),  # the newest (rollout servers: it may span updates)
    "response_versions": (pa.list_(pa.int32()),),  # the version that sampled each token
    "weights_digest": (pa.string(),),  # digest of the weights that generated the row
    "response_mask": (pa.list_(pa.int8()),),  # 1 model token, 0 environment token (agents)
    "num_turns": (pa.int32(),),
    "turn_rewards": (pa.list_(pa.float32()),),
    "exec_status": (pa.string(),),
    "exit_code": (pa.int32(),),
    "stdout": (pa.string(),),
    "stderr": (pa.string(),),
    "tests_passed": (pa.int32(),),
    "tests_total": (pa.int32(),),
    "exec_seconds": (pa.float32(),),
    "reward": (pa.float32(),),
    "reward_info": (pa.string(),),
    "advantage": (pa.float32(),),
}


@dataclass(frozen=True)
class Column:
    """A required or produced column: a name and the Arrow types accepted for it."""

    name: str
    types: tuple[pa.DataType, ...]

    @property
    def type(self) -> pa.DataType:
        """The canonical type (what a producer of this column emits)."""
        return self.types[0]


def col(name: str, *types: pa.DataType) -> Column:
    """A column by vocabulary name (types default to the vocabulary's) or with explicit types."""
    if types:
        return Column(name, tuple(types))
    if name not in VOCABULARY:
        raise KeyError(f"column {name!r} is not in the vocabulary; give its Arrow type")
    return Column(name, VOCABULARY[name])


def columns(*names: str) -> tuple[Column, ...]:
    """Vocabulary columns by name."""
    return tuple(col(n) for n in names)


def to_schema(cols: Iterable[Column]) -> pa.Schema:
    """The concrete Arrow schema a producer of these columns emits."""
    return pa.schema([pa.field(c.name, c.type) for c in cols])


# Field metadata of a column a source emits without values (all null), saying why: a
# dataset without an answer column still emits `ground_truth`; a consumer that needs the values
# refuses it at validation with this reason.
NO_VALUES = b"rldag.no_values"


def without_values(field: pa.Field, reason: str) -> pa.Field:
    """`field` marked as holding no values (every row null), for `reason`."""
    return field.with_metadata({NO_VALUES: reason.encode()})


def no_values_reason(schema: pa.Schema, name: str) -> str | None:
    """Why column `name` of `schema` holds no values, or None when it has them (or is absent)."""
    index = schema.get_field_index(name)
    metadata = schema.field(index).metadata if index >= 0 else None
    reason = (metadata or {}).get(NO_VALUES)
    return reason.decode() if reason is not None else None


def extend(base: pa.Schema, added: Iterable[Column]) -> pa.Schema:
    """`base` with `added` columns appended (or replaced, keeping their position)."""
    fields = {f.name: f for f in base}
    for c in added:
        fields[c.name] = pa.field(c.name, c.type)
    return pa.schema(list(fields.values()))


def type_name(t: pa.DataType) -> str:
    """A short readable name of an Arrow type for error messages."""
    return str(t).replace("element: ", "").replace("item: ", "")


def missing_or_mismatched(required: Iterable[Column], offered: pa.Schema) -> list[str]:
    """Human-readable problems with `offered` for a consumer requiring `required`."""
    problems = []
    for c in required:
        idx = offered.get_field_index(c.name)
        wanted = " or ".join(type_name(t) for t in c.types)
        if idx < 0:
            have = ", ".join(offered.names) or "no columns"
            problems.append(f"column '{c.name}' ({wanted}) is missing; upstream has: {have}")
        elif not any(offered.field(idx).type.equals(t) for t in c.types):
            got = type_name(offered.field(idx).type)
            problems.append(f"column '{c.name}' is {got}, expected {wanted}")
    return problems


def check_edge(
    required: Iterable[Column],
    offered: pa.Schema,
    *,
    consumer: str,
    port: str,
    producer: str,
    where: str = "",
) -> None:
    """Raise SchemaError when `offered` lacks a required column or has a wrong type."""
    problems = missing_or_mismatched(required, offered)
    if problems:
        raise SchemaError(
            f"node '{consumer}' port '{port}' <- node '{producer}': " + "; ".join(problems),
            path=f"nodes.{consumer}.inputs.{port}",
            where=where,
        )


def check_table(table: pa.Table, produced: Mapping[str, pa.DataType], node: str) -> list[str]:
    """Problems of a table an operator returned against the schema it declared."""
    declared = [Column(name, (t,)) for name, t in produced.items()]
    return missing_or_mismatched(declared, table.schema)
