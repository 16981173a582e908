"""A discrete-event simulation of a run: the real `Scheduler` decides what may start, a cost
model says how long each step takes, and simulated time replaces the clock.

What it models, as the drivers run it: each step starts when the scheduler allows it and,
when its node's worker group is busy with another node, when that group is free; a generate
node emits its chunks evenly over its call; a streaming reader handles each chunk once it
has arrived and its previous chunk is done; generate first loads the weights its iteration
runs on (every iteration at k = 0, from version 1 on at k > 0); after an iteration's last
step the driver spends its own time (metrics, closing) before it starts anything new.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from rldag.engine.scheduler import Scheduler, Step, emits_chunks, weights_version
from rldag.graph.dag import Graph
from rldag.planning.costs import CostModel

DRIVER = "driver"  # the group of nodes that run on the driver: never busy with each other
STEADY_SKIP = 2  # samples/s is measured from the end of this iteration on (as bench/ does)


@dataclass(frozen=True)
class SimPlan:
    """Where and how a run executes: node -> worker group (DRIVER for the driver's nodes),
    group -> workers, the staleness bound, chunking, and whether weights cross pools."""

    groups: Mapping[str, str]
    workers: Mapping[str, int]
    max_staleness: int = 0
    chunk_groups: int = 0
    split_weights: bool = True


@dataclass
class SimResult:
    """What a simulated run did."""

    samples_per_s: float
    idle: dict[str, float]  # worker group -> fraction of the steady window it was idle
    staleness: dict[int, float]  # lag of the trained batch -> share of iterations
    weight_sync_s: float  # seconds of one weight sync
    iteration_ends: list[float] = field(default_factory=list)


@dataclass
class _Running:
    finish: float
    emits: list[float]
    busy: list[tuple[float, float]]  # intervals the step kept its group busy


def _chunks(costs: CostModel, chunk_groups: int) -> int:
    return max(1, math.ceil(costs.groups / chunk_groups)) if chunk_groups else 1


class Simulation:
    """One simulated run of `graph` under `plan` with `costs`."""

    def __init__(self, graph: Graph, costs: CostModel, plan: SimPlan) -> None:
        self.graph, self.costs, self.plan = graph, costs, plan
        self.sync_s = costs.sync_s(plan.split_weights)
        self.group_free: dict[str, float] = {}
        self.running: dict[Step, _Running] = {}
        self.busy: dict[str, list[tuple[float, float]]] = {}

    def _call_s(self, name: str) -> float:
        cost = self.costs.nodes.get(name)
        if cost is None:
            return 0.0
        return cost.seconds(workers=self.plan.workers.get(self.plan.groups[name], cost.workers))

    def _streams_from(self, step: Step) -> Step | None:
        """The running producer whose chunks `step` reads one by one, if any."""
        node = self.graph.nodes[step.node]
        if not (self.plan.chunk_groups and node.op.streams):
            return None
        for upstream in node.inputs.values():
            if emits_chunks(self.graph.nodes[upstream]):
                return Step(step.iteration, upstream)
        return None

    def start(self, step: Step, now: float) -> float:
        """Start `step` at `now` (or when its group frees); returns its finish time."""
        name = step.node
        group = self.plan.groups[name]
        start = now if group == DRIVER else max(now, self.group_free.get(group, 0.0))
        node = self.graph.nodes[name]
        work = self._call_s(name)
        begin = start
        if node.weights_from and (
            not self.plan.max_staleness or weights_version(step.iteration, self.plan.max_staleness)
        ):
            begin += self.sync_s
        producer = self._streams_from(step)
        if producer is not None:
            arrivals = self.running[producer].emits
            per = work / len(arrivals)
            emits, t, busy = [], begin, []
            for arrival in arrivals:
                t0 = max(t, arrival)
                t = t0 + per
                emits.append(t)
                busy.append((t0, t))
        else:
            n = _chunks(self.costs, self.plan.chunk_groups) if node.op.emits_chunks else 1
            emits = [begin + work * (j + 1) / n for j in range(n)]
            busy = [(start, begin + work)]
        finish = emits[-1]
        if group != DRIVER:
            self.group_free[group] = finish
        self.busy.setdefault(group, []).extend(busy)
        self.running[step] = _Running(finish, emits, busy)
        return finish

    def run(self, iterations: int) -> SimResult:
        """Simulate iterations 0..iterations-1."""
        plan = self.plan
        scheduler = Scheduler(
            self.graph, 0, iterations, plan.max_staleness, streaming=plan.chunk_groups > 0
        )
        events: list[tuple[float, Step]] = []
        now, closing, ends = 0.0, 0, []
        driver_s = self.costs.driver_s
        while not scheduler.done:
            while steps := scheduler.ready():
                for step in steps:
                    scheduler.start(step)
                    heapq.heappush(events, (self.start(step, now), step))
            if not events:
                raise RuntimeError("the simulated scheduler has nothing to run")  # a bug
            now = max(now, events[0][0])
            while events and events[0][0] <= now:
                _, step = heapq.heappop(events)
                scheduler.finish(step)
            while closing < iterations and scheduler.iteration_finished(closing):
                now += driver_s
                ends.append(now)
                closing += 1
        return self._result(ends, iterations)

    def _result(self, ends: list[float], iterations: int) -> SimResult:
        skip = min(STEADY_SKIP, iterations - 1)
        t0 = ends[skip - 1] if skip else 0.0
        window = ends[-1] - t0
        rate = self.costs.samples * (iterations - skip) / window if window > 0 else 0.0
        idle = {}
        for group, intervals in self.busy.items():
            if group == DRIVER:
                continue
            busy = sum(max(0.0, min(b, ends[-1]) - max(a, t0)) for a, b in intervals)
            idle[group] = max(0.0, 1.0 - busy / window) if window > 0 else 0.0
        k = self.plan.max_staleness
        lags = [i - weights_version(i, k) for i in range(iterations)]
        staleness = {lag: lags.count(lag) / len(lags) for lag in sorted(set(lags))}
        return SimResult(rate, idle, staleness, self.sync_s, ends)


def simulate(graph: Graph, costs: CostModel, plan: SimPlan, iterations: int = 12) -> SimResult:
    """Simulate `iterations` iterations of `graph` under `plan`."""
    return Simulation(graph, costs, plan).run(iterations)
