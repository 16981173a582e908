"""The operator contract: what a node runs, its typed ports and what it adds to the table.

Operators live in the `operators` package (or user code) and register here by name; rldag
only sees these declarations. A built operator is a callable over Arrow tables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import pyarrow as pa

from rldag.config.spec import NodeKind
from rldag.graph.schema import Column

Dispatch = Literal["group", "balanced", "replicate"]


@dataclass(frozen=True)
class Port:
    """An input of an operator: the columns it requires, or the weights edge."""

    name: str
    columns: tuple[Column, ...] = ()
    weights: bool = False  # loop-carried: fed by the train node of an earlier iteration
    optional: bool = False


@dataclass(frozen=True)
class PoolReservation:
    """A pool's Ray placement group lent to an operator for actors it starts itself (an agent's
    environments on the environment pool): ``cpus`` per bundle are free for them (0 when pool
    workers hold the bundles)."""

    pool: str
    placement_group: Any
    bundles: int
    cpus: float
    max_concurrency: int  # the pool's bound (0: none)


@dataclass
class NodeContext:
    """What an operator may know about where it runs; nothing about the orchestrator."""

    node: str
    iteration: int
    seed: int
    run_uri: str
    rank: int = 0  # this worker's index in its worker group
    world_size: int = 1  # workers in the group
    chunk_groups: int = 0  # a streaming operator emits this many prompt groups at a time
    continuous: bool = False  # a `continuous` operator's calls of later iterations overlap
    companion: PoolReservation | None = None  # on Ray: the operator's companion pool
    round: int = 0  # the refill round of the iteration (rldag.engine.refill); 0: the first
    draw: int | None = None  # which batch of the prompt stream a source serves (None: iteration)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("rldag.ops"))

    @property
    def batch_index(self) -> int:
        """The batch of the prompt stream a source serves: its iteration, unless refill rounds
        of earlier iterations drew batches of their own (docs/guides/dapo.md#refill)."""
        return self.iteration if self.draw is None else self.draw


class OperatorInstance(Protocol):
    """A built operator: maps its input tables (by port) to one output table."""

    def __call__(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table: ...


@runtime_checkable
class StreamingOperator(Protocol):
    """An operator that emits its output in chunks of whole prompt groups as they finish
    (a generate node): consumers that run per chunk start on the first one."""

    def stream(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> Iterator[pa.Table]: ...


@runtime_checkable
class ChunkConsumer(Protocol):
    """An operator that takes its primary input chunk by chunk as the chunks arrive and
    returns one table once they have ended (a trainer: its steps start on the first chunks).
    Every other input comes whole with each chunk."""

    def consume(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> None: ...

    def finish(self, ctx: NodeContext) -> pa.Table: ...


@runtime_checkable
class PolicyHolder(Protocol):
    """A stateful operator that owns policy weights (trainer, rollout engine)."""

    policy_version: int

    def export_weights(self) -> dict[str, Any]: ...

    def load_weights(self, weights: dict[str, Any], version: int) -> None: ...


@runtime_checkable
class AttestsWeights(Protocol):
    """A policy holder that can say which weights it holds: a digest of the policy it
    publishes (a trainer) or serves (a rollout engine); "" when it cannot tell."""

    def weights_digest(self) -> str: ...


@runtime_checkable
class Checkpointable(Protocol):
    """A stateful operator whose state a run checkpoint saves (trainers)."""

    def save_checkpoint(self, path: str) -> None: ...

    def load_checkpoint(self, path: str) -> None: ...

    def export_hf(self, path: str) -> None: ...


@runtime_checkable
class Closable(Protocol):
    """An operator holding resources (servers, sandboxes) released at the end of a run."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class OperatorDef:
    """A registered operator: ports, output columns, params type and a factory."""

    name: str
    kind: NodeKind
    factory: Callable[[Any], OperatorInstance]  # params -> runnable
    ports: tuple[Port, ...] = ()
    adds: tuple[Column, ...] = ()  # columns added to the primary (first) input's table
    passthrough: bool = True  # False: the output has only `adds` (e.g. train metrics)
    params: type | None = None  # a dataclass; pipeline params are validated against it
    stateful: bool = False  # lives in a pool worker for the whole run
    dispatch: Dispatch = "group"  # rows over workers: by prompt group, token-balanced, copied
    pool: str | None = None  # its pool when the node sets none (else by kind)
    max_workers: int | None = None  # most workers it can use (None: any)
    checkpointable: bool = False  # its instances are Checkpointable (trainers)
    streams: bool = False  # runs per chunk of prompt groups (starts on its input's first chunk)
    consumes_chunks: bool = False  # with streams: its instances are ChunkConsumers, fed every
    # chunk in one call each, one table at the end (a trainer), instead of a table per chunk
    waits_for: Callable[[Any], str] | None = None  # params -> why a node of this streaming
    # operator needs its whole input after all ("" when it streams): a batch-wide estimator
    emits_chunks: bool = False  # its instances are StreamingOperators (generate)
    continuous: bool = False  # with async.mode continuous its steps of consecutive iterations
    # run at once on one engine (calls to its instance overlap: it must be thread-safe)
    concurrency: Callable[[Any], int] | None = None  # calls at once per worker, from params
    companion_pool: str | None = None  # a pool it starts its own actors on (concurrency
    # is then bounded by that pool's max_concurrency): an agent's environments
    output_schema: Callable[[Any], pa.Schema] | None = None  # sources: schema from the data
    # params against the input schemas (port -> schema) at validation (a judge's template
    # variables, a combine's components); raises InputError whose path is a params key or
    # ``inputs.<port>``
    check_input: Callable[[Any, Mapping[str, pa.Schema]], None] | None = None
    named_ports: Port | None = None  # any other port name the node gives, needing these columns
    # more columns it adds, from params and input schemas (a combine's reward_<component>)
    adds_from_inputs: Callable[[Any, Mapping[str, pa.Schema]], tuple[Column, ...]] | None = None
    preflight: Callable[[Any], None] | None = None  # params -> checks before compute (the
    # model's chat template): raises InputError with a key path relative to the params
    draws: bool = False  # a source whose batch follows ctx.batch_index (refill rounds draw anew)
    # a filter that may ask for refill rounds: the params key of the most rounds an iteration
    # runs (1: none); it says how many groups it lacks with rldag.graph.refill.with_shortfall
    refill_rounds: str | None = None
    description: str = ""

    @property
    def table_ports(self) -> tuple[Port, ...]:
        """Ports that carry Arrow tables (everything but the weights edge)."""
        return tuple(p for p in self.ports if not p.weights)
