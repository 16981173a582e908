"""Refill rounds (DAPO's "keep generating", veRL's `filter_groups` loop): when the refilling
node (a `dynamic_sampling` filter with `max_rounds` > 1) says it lacks prompt groups, its
step runs the sub-graph before it (source -> generate -> score -> ...) again for the same
iteration, round r = 1, 2, ..., on a fresh batch of prompts, and the node runs again over
the rows of every round so far, until it has enough or its bound is reached.

Which batch of the prompt stream a source serves (`NodeContext.batch_index`): the stream is
consumed in order, batch(0), refills(0), batch(1), refills(1), ..., as veRL's DAPO recipe
pulls the next batch from its dataloader: round r of iteration i takes batch i + F(i) + r,
F(i) = the refill rounds of iterations 0..i-1. Each batch is drawn once, without gap, and
the order does not depend on timing: the scheduler starts the nodes a round runs again for
iteration i only once the refilling node has finished i-1 (rldag.engine.scheduler), so F(i)
is known when they start, and a round of i-1 runs before iteration i can move the rollout
engine to newer weights (it samples i-1's policy version; with k > 0 generation still
overlaps training). A batch is a function of the seed, the iteration and the rounds of
earlier iterations; those are in `metrics.parquet` (`refill/rounds`), so a resumed run
draws exactly what the run that was never killed drew. Round r >= 1 stores its tables under
`iter=<i>/round=<r>/<node>.parquet`; the refilling node's own table holds the rows it kept
of every round.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rldag.config.spec import NodeKind
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
    """The refill rounds of a run: which node refills, what a round runs again and the
    rounds each iteration ran."""

    node: Node | None  # the refilling node; None: the run has none
    rerun: list[str]  # what a round runs again, in graph order
    rounds: dict[int, int] = field(default_factory=dict)  # iteration -> rounds it ran

    @classmethod
    def of(cls, graph: Graph) -> Refill:
        """The refill rounds of a run of `graph` (none when no node refills)."""
        node = refill_node(graph)
        return cls(node, upstream(graph, node.name) if node is not None else [])

    def refills(self, name: str) -> bool:
        """Whether `name` is the refilling node (its step runs the rounds)."""
        return self.node is not None and name == self.node.name

    def draw(self, step: Step, node: Node, metrics: list[dict[str, float]]) -> int | None:
        """The batch of the prompt stream source step `step` serves (None: no refill, so its
        iteration's, as always)."""
        if self.node is None or node.kind != NodeKind.source:
            return None
        return step.iteration + self._extra_before(step.iteration, metrics) + step.round

    def _extra_before(self, iteration: int, metrics: list[dict[str, float]]) -> int:
        """F(iteration): the refill rounds of iterations 0..iteration-1 (from this process's
        record, else from the metrics rows a resumed run loaded)."""
        stored = {int(m["iteration"]): int(m.get(ROUNDS, 1)) for m in metrics}
        extra = 0
        for i in range(iteration):
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
        _remove_later_rounds(run, step.iteration, len(refilled) + 1)
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
            run._sync_weights(this, node)
            run._produce(this, node, {p: streams[up] for p, up in node.inputs.items()}, out)
            out.close()
            run._persist(this, out.table())
        return {name: stream.table() for name, stream in streams.items()}


def _remove_later_rounds(run: Run, iteration: int, rounds: int) -> None:
    """Delete the tables of rounds >= `rounds` that a killed process stored for this
    iteration (a resumed run that needs fewer rounds must not leave them to readers)."""
    base = f"{run.run_id}/iter={iteration}"
    for name in run.storage.list(base):
        if name.startswith("round=") and int(name.removeprefix("round=")) >= rounds:
            run.storage.remove(f"{base}/{name}")


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
