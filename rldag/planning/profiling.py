"""`rldag plan --profile N`: a short run that measures every stage alone (synchronous, no
streaming, so nothing overlaps), then the cost model fitted from it, stored next to the run.
`costs_of_stored_run` fits one from a run that already finished.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rldag.config.spec import LoadedPipeline, load_pipeline
from rldag.engine.events import IterationFinished, RunStarted, add_listener
from rldag.graph.dag import Graph, build_graph
from rldag.planning.auto_plan import declared_pools
from rldag.planning.costs import CostModel, fit_costs, observe_stored_run
from rldag.storage.store import Storage

if TYPE_CHECKING:
    from rldag.engine.driver import OnClose
    from rldag.engine.run import Run

# what a profiling run sets on top of the user's overrides: each stage alone
PROFILE_OVERRIDES = ("async.max_staleness=0", "async.chunk_groups=0", "checkpoint.export_hf=false")


def count_params(model_path: str) -> int:
    """Parameters of a Hugging Face model directory, from its safetensors headers (0 when it
    has none: the weight sync is then not priced per parameter)."""
    total = 0
    for file in sorted(Path(model_path).glob("*.safetensors")):
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    return total


def pool_workers(loaded: LoadedPipeline) -> dict[str, int]:
    """Pool name -> workers, for every pool the spec declares."""
    return {name: pool.workers for name, pool in declared_pools(loaded.spec).items()}


def _colocated(loaded: LoadedPipeline, graph: Graph) -> bool:
    """Whether the weights edge stays inside one worker group."""
    sets = [set(s) for s in loaded.spec.pools.colocate]
    for node in graph.nodes.values():
        if node.weights_from:
            pools = {str(node.pool), str(graph.nodes[node.weights_from].pool)}
            return len(pools) == 1 or any(pools <= s for s in sets)
    return False


def _params(loaded: LoadedPipeline) -> int:
    try:
        return count_params(loaded.spec.model.path)
    except (OSError, ValueError, KeyError):
        return 0


def costs_of_stored_run(
    loaded: LoadedPipeline,
    graph: Graph,
    storage: Storage,
    run_id: str,
    ends: tuple[float, ...] = (),
    synchronous: bool | None = None,
) -> CostModel:
    """Fit and store the cost model of a finished run of `loaded` (its pipeline)."""
    obs = observe_stored_run(storage, run_id, graph, ends)
    if synchronous is None:
        spec = loaded.spec.async_
        synchronous = spec.max_staleness == 0 and spec.chunk_groups == 0
    model = fit_costs(
        graph, obs, pool_workers(loaded), _params(loaded), _colocated(loaded, graph), synchronous
    )
    model.save(storage, run_id)
    return model


@dataclass(frozen=True)
class Profile:
    """A profiling run: its id, where it is stored, and the cost model fitted from it."""

    run_id: str
    uri: str
    costs: CostModel


def timed_inline_run(
    loaded: LoadedPipeline, graph: Graph, on_close: Sequence[OnClose] = ()
) -> tuple[Run, tuple[float, ...]]:
    """Run a pipeline inline to the end (`on_close`: the driver's closing hooks); the run and
    the wall-clock seconds at each iteration's end, from the run's start."""
    from rldag.engine.driver import run_inline
    from rldag.engine.run import Run

    marks: list[float] = []

    def listen(event: object) -> None:
        if isinstance(event, RunStarted | IterationFinished):
            marks.append(time.perf_counter())

    run = Run.start(loaded, graph)
    remove = add_listener(listen)
    try:
        run_inline(run, on_close=on_close)
    finally:
        remove()
    return run, tuple(m - marks[0] for m in marks[1:])


def profile(
    path: str, overrides: list[str], iterations: int, on_close: Sequence[OnClose] = ()
) -> Profile:
    """Run `iterations` iterations of the pipeline, stages one after another, timing each
    iteration's end (`on_close`: the driver's closing hooks); fit the cost model and store
    it as `<run>/costs.parquet`."""
    loaded = load_pipeline(path, [*overrides, *PROFILE_OVERRIDES, f"iterations={iterations}"])
    graph = build_graph(loaded)
    run, ends = timed_inline_run(loaded, graph, on_close)
    model = costs_of_stored_run(loaded, graph, run.storage, run.run_id, ends, synchronous=True)
    return Profile(run.run_id, run.uri, model)
