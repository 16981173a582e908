"""The execution scheduler: which node of which iteration may start now, over the graph
unrolled across iterations. Pure: it sees only the graph, the staleness bound and what has
started and finished; both drivers (inline, Prefect) ask it and run what it allows.

The rules, for step (i, node) with k = `async.max_staleness`:

- its table inputs of iteration i have finished, or, when streaming is on, the node
  consumes chunks (`OperatorDef.streams`) and the producer emits them, have started;
- iteration i opens only when iteration i-1-k has finished: at most k+1 iterations are in
  flight, and generate of iteration i runs on the weights train of iteration i-1-k made
  (policy version >= i - k), so the bound is enforced by admission, never by discarding rows;
- a node runs its iterations one at a time, in order: its operator instance (a pool
  worker's, or the driver's) serves one call at a time. In continuous mode
  (`async.mode: continuous`) a node whose operator is `continuous` (the torch engine's
  generate) starts step i once step i-1 has started: iteration i's prompts join the engine's
  running batch and take the slots iteration i-1's finished sequences free;
- with refill rounds (rldag.engine.refill), a node a round runs again starts iteration i
  once the refilling node has finished iteration i-1 (its rounds ran on the nodes first).

k = 0 is the synchronous loop: iteration i starts after iteration i-1 has finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rldag.graph.dag import Graph, Node
from rldag.graph.refill import waits_for_refill


@dataclass(frozen=True, order=True)
class Step:
    """One node of one iteration: the unit the scheduler starts (a refill round r >= 1 of it
    runs inside the refilling node's step: rldag.engine.refill)."""

    iteration: int
    node: str
    round: int = 0


class StepState(StrEnum):
    """Where a step is."""

    waiting = "waiting"
    running = "running"
    finished = "finished"


def emits_chunks(node: Node) -> bool:
    """Whether consumers can start on a node's first chunk: a generate node streams prompt
    groups as they finish; a node that runs per chunk passes its input's chunks on."""
    return node.op.emits_chunks or node.op.streams


def weights_version(iteration: int, max_staleness: int) -> int:
    """The policy version generate of `iteration` runs on: the one train of iteration
    iteration-1-k produced (version 0 is the initial policy)."""
    return max(0, iteration - max_staleness)


class Scheduler:
    """Steps of iterations `first`..`last - 1` in an order the rules above allow."""

    def __init__(
        self,
        graph: Graph,
        first: int,
        last: int,
        max_staleness: int = 0,
        streaming: bool = True,
        continuous: bool = False,
    ) -> None:
        self.graph = graph
        self.first, self.last, self.k = first, last, max_staleness
        self.streaming = streaming
        self.continuous = continuous and max_staleness > 0
        self.after = waits_for_refill(graph)  # node -> node its previous iteration waits for
        self.state: dict[Step, StepState] = {
            Step(i, name): StepState.waiting for i in range(first, last) for name in graph.order
        }
        self._open_from = first  # lowest iteration with unfinished steps

    def iteration_finished(self, iteration: int) -> bool:
        """True when every step of `iteration` has finished (or it precedes the run)."""
        if iteration < self.first:
            return True
        return all(self.state[Step(iteration, n)] == StepState.finished for n in self.graph.order)

    def all_started(self, iteration: int) -> bool:
        """True when no step of `iteration` is still waiting (it can finish without another
        launch: what a stopping run lets finish)."""
        return all(self.state[Step(iteration, n)] != StepState.waiting for n in self.graph.order)

    @property
    def done(self) -> bool:
        return all(s == StepState.finished for s in self.state.values())

    def _input_ready(self, step: Step, upstream: str) -> bool:
        state = self.state[Step(step.iteration, upstream)]
        if state == StepState.finished:
            return True
        node = self.graph.nodes[step.node]
        return (
            self.streaming
            and state == StepState.running
            and node.op.streams
            and emits_chunks(self.graph.nodes[upstream])
        )

    def _may_start(self, step: Step) -> bool:
        node = self.graph.nodes[step.node]
        i = step.iteration
        if not self.iteration_finished(i - 1 - self.k):
            return False
        if i > self.first and not self._previous_allows(Step(i - 1, step.node), node):
            return False
        after = self.after.get(step.node)
        if after and i > self.first and self.state[Step(i - 1, after)] != StepState.finished:
            return False
        return all(self._input_ready(step, up) for up in node.inputs.values())

    def _previous_allows(self, previous: Step, node: Node) -> bool:
        """Whether the node's step of the previous iteration lets this one start: finished,
        or, for a continuous operator in continuous mode, started."""
        state = self.state[previous]
        if self.continuous and node.op.continuous:
            return state != StepState.waiting
        return state == StepState.finished

    def ready(self) -> list[Step]:
        """Waiting steps that may start now, oldest iteration first, in graph order."""
        out = []
        horizon = min(self.last, self._open_from + self.k + 1)
        for i in range(self._open_from, horizon):
            for name in self.graph.order:
                step = Step(i, name)
                if self.state[step] == StepState.waiting and self._may_start(step):
                    out.append(step)
        return out

    def start(self, step: Step) -> None:
        if self.state[step] != StepState.waiting:
            raise ValueError(f"{step} is {self.state[step].value}, not waiting")
        self.state[step] = StepState.running

    def finish(self, step: Step) -> None:
        if self.state[step] != StepState.running:
            raise ValueError(f"{step} is {self.state[step].value}, not running")
        self.state[step] = StepState.finished
        while self._open_from < self.last and self.iteration_finished(self._open_from):
            self._open_from += 1
