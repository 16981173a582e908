"""Refill rounds (DAPO's "keep generating", veRL's `filter_groups` loop): when the refilling
node (a `dynamic_sampling` filter with `max_rounds` > 1) says it lacks prompt groups, its
step runs the sub-graph before it (source -> generate -> score -> ...) again for the same
iteration, round r = 1, 2, ..., on a fresh batch of prompts, and the node runs again over
the rows of every round so far, until it has enough or its bound is reached.

Which batch of the prompt stream a source serves (`NodeContext.batch_index`), k =
`async.max_staleness`, N = `iterations`, F(i) = refill rounds of the iterations before i:

- round 0 of iteration j: j + F(j - k)
- round r >= 1 of iteration i: min(i + k + 1, N) + F(i) + r - 1

that is, the stream is consumed in the order batch(0..k), refills(0), batch(k + 1),
refills(1), ...: each batch once, without gap. Iteration j's first batch is known when it
opens (iteration j-k-1 has finished, so F(j - k) is), and the filter runs its iterations in
order (F(i) is known when it runs), so the order does not depend on timing. A batch is a
function of the seed, the iteration and the rounds of earlier iterations; those are in
`metrics.parquet` (`refill/rounds`), so a resumed run draws exactly what the run that was
never killed drew. Round r >= 1 stores its tables under `iter=<i>/round=<r>/<node>.parquet`;
the refilling node's own table holds the rows it kept of every round.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rldag.config.spec import NodeKind, PipelineSpec
from rldag.engine.scheduler import Step
from rldag.engine.streams import EdgeStream
from rldag.graph.dag import Graph, Node
from rldag.graph.refill import max_rounds, refill_node, shortfall, upstream
from rldag.graph.reported import with_reported_metrics
from rldag.storage.kill_points import kill_point

if TYPE_CHECKING:
    from rldag.engine.run import Run

ROUNDS = "refill/rounds"  # the metric that is also the record of each iteration's rounds


@dataclass
class Refill:
    """The refill rounds of a run: which node refills, what a round runs again, the rounds
    each iteration ran and the locks that keep a round's calls from overlapping the steps of
    later iterations on the same node (k > 0)."""

    node: Node | None  # the refilling node; None: the run has none
    rerun: list[str]  # what a round runs again, in graph order
    k: int
    iterations: int
    rounds: dict[int, int] = field(default_factory=dict)  # iteration -> rounds it ran
    _locks: dict[str, threading.Lock] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: Graph, spec: PipelineSpec) -> Refill:
        """The refill rounds of a run of `graph` (none when no node refills)."""
        node = refill_node(graph)
        rerun = upstream(graph, node.name) if node is not None else []
        locks = {name: threading.Lock() for name in rerun}
        return cls(node, rerun, spec.async_.max_staleness, spec.iterations, _locks=locks)

    def refills(self, name: str) -> bool:
        return self.node is not None and name == self.node.name

    @contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Hold `name` while a step or a round of it syncs weights and runs: a round of
        iteration i and the step of iteration i+1 never share its operator at once."""
        lock = self._locks.get(name)
        if lock is None:
            yield
            return
        with lock:
            yield

    def draw(self, step: Step, node: Node, metrics: list[dict[str, float]]) -> int | None:
        """The batch of the prompt stream source step `step` serves (None: no refill, so its
        iteration's, as always)."""
        if self.node is None or node.kind != NodeKind.source:
            return None
        i, r = step.iteration, step.round
        if r == 0:
            return i + self._extra_before(i - self.k, metrics)
        return min(i + self.k + 1, self.iterations) + self._extra_before(i, metrics) + r - 1

    def _extra_before(self, iteration: int, metrics: list[dict[str, float]]) -> int:
        """F(iteration): the refill rounds of iterations 0..iteration-1 (from this process's
        record, else from the metrics rows a resumed run loaded)."""
        stored = {int(m["iteration"]): int(m.get(ROUNDS, 1)) for m in metrics}
        extra = 0
        for i in range(max(0, iteration)):
            rounds = self.rounds.get(i, stored.get(i))
            if rounds is None:
                raise RuntimeError(f"the refill rounds of iteration {i} are not known yet")
            extra += rounds - 1
        return extra

    def produce(
        self, run: Run, step: Step, node: Node, inputs: Mapping[str, EdgeStream], out: EdgeStream
    ) -> None:
        """Run the refilling node's step: round 0 on its inputs, then rounds while it lacks
        groups and its bound allows; emit its table with the rounds' counts."""
        ports = {p: [s.table()] for p, s in inputs.items()}  # port -> its table of each round
        kept = run.runner.run(node, {p: t[0] for p, t in ports.items()}, run._ctx(step))
        refilled: list[dict[str, pa.Table]] = []  # rounds >= 1: node -> table
        start = time.perf_counter()
        while shortfall(kept, node.name) and len(refilled) + 1 < max_rounds(node):
            this = Step(step.iteration, step.node, len(refilled) + 1)
            kill_point("refill", f"{this}")
            refilled.append(self._run_round(run, this))
            for port, up in node.inputs.items():
                ports[port].append(refilled[-1][up])
            joined = {p: pa.concat_tables(t) for p, t in ports.items()}
            kept = run.runner.run(node, joined, run._ctx(this))
        self.rounds[step.iteration] = len(refilled) + 1
        counts = {ROUNDS: len(refilled) + 1, **_generated(run.graph, refilled)}
        counts["timing_s/refill"] = time.perf_counter() - start if refilled else 0.0
        out.append(run._checked(node, with_reported_metrics(kept, node.name, counts)))

    def _run_round(self, run: Run, step: Step) -> dict[str, pa.Table]:
        """One refill round: every node before the refilling one, for `step`'s iteration and
        round, in graph order, through the run's own step path (weights sync, streaming,
        schema checks); their tables by name, each stored under iter=<i>/round=<r>/."""
        streams: dict[str, EdgeStream] = {}
        for name in self.rerun:
            node = run.graph.nodes[name]
            this = Step(step.iteration, name, step.round)
            streams[name] = out = EdgeStream()
            with self.exclusive(name):
                run._sync_weights(this, node)
                run._produce(this, node, {p: streams[up] for p, up in node.inputs.items()}, out)
            out.close()
            run._persist(this, out.table())
        return {name: stream.table() for name, stream in streams.items()}


def _generated(graph: Graph, refilled: list[dict[str, pa.Table]]) -> dict[str, float]:
    """What the rounds after the first drew and generated: prompts, rows and response
    tokens (the extra generation refill costs)."""
    prompts = rows = tokens = 0
    for tables in refilled:
        for name, table in tables.items():
            kind = graph.nodes[name].kind
            if kind == NodeKind.source:
                prompts += table.num_rows
            elif kind == NodeKind.generate:
                rows += table.num_rows
                if "response_ids" in table.column_names:
                    tokens += pc.sum(pc.list_value_length(table["response_ids"])).as_py() or 0
    return {
        "refill/extra_prompts": prompts,
        "refill/extra_rows": rows,
        "refill/extra_tokens": tokens,
    }
