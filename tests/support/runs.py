"""Running a pipeline in this process and reading a finished run, for tests.

`drive_inline` is the one place in the tests that calls the inline driver; everything else
here goes through it. Runs are read through rldag's storage API, so the same view reads a
local directory and an object store."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import yaml

from rldag.compute.runner import NodeRunner
from rldag.config.spec import LoadedPipeline, load_pipeline
from rldag.engine.driver import run_inline
from rldag.engine.run import Run
from rldag.graph.dag import build_graph
from rldag.report.reward_curve import store_reward_curve
from rldag.storage.store import Storage
from rldag.storage.stored_run import StoredRun


@dataclass
class StoredRunView:
    """The run `run_id` under `storage`: `<run>/{pipeline.yaml, metrics.parquet, iter=<i>/}`."""

    storage: Storage
    run_id: str
    _stored: StoredRun = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._stored = StoredRun(self.storage, self.run_id)

    @property
    def uri(self) -> str:
        return self.storage.uri(self.run_id)

    @property
    def run_dir(self) -> Path:
        """The run's local directory (a run on an object store has none)."""
        assert self.storage.local, f"{self.uri} is not on this machine"
        return Path(self.uri)

    def metrics_table(self) -> pa.Table:
        """metrics.parquet: one row per finished iteration."""
        table = self._stored.metrics()
        assert table is not None, f"{self.uri} has no metrics.parquet"
        return table

    def metrics(self) -> list[dict]:
        """metrics.parquet's rows."""
        return self.metrics_table().to_pylist()

    def metric(self, key: str) -> list:
        """One metric, one value per finished iteration."""
        return self.metrics_table()[key].to_pylist()

    def iterations(self) -> list[int]:
        """The iterations that stored a table, in order."""
        return self._stored.iterations()

    def table(self, node: str, iteration: int = -1, round: int = 0) -> pa.Table:
        """`node`'s stored table of `iteration` (negative: counted from the last stored), of
        refill round `round`."""
        if iteration < 0:
            iteration = self.iterations()[iteration]
        return self._stored.table(iteration, node, round)

    def rounds(self, iteration: int) -> list[int]:
        """The refill rounds `iteration` ran (rldag.storage.stored_run.StoredRun.rounds)."""
        return self._stored.rounds(iteration)

    def all_rounds(self, node: str, iteration: int) -> pa.Table:
        """`node`'s tables of every refill round of `iteration`, joined in round order."""
        return pa.concat_tables(self.table(node, iteration, r) for r in self.rounds(iteration))


def _load(pipeline: str | Path | dict, *overrides: str) -> LoadedPipeline:
    """load_pipeline of a file, or of a dict (written to a temporary file first)."""
    if not isinstance(pipeline, dict):
        return load_pipeline(pipeline, overrides)
    with tempfile.TemporaryDirectory(prefix="rldag-test-") as tmp:
        path = Path(tmp) / "pipeline.yaml"
        path.write_text(yaml.safe_dump(pipeline, sort_keys=False))
        return load_pipeline(path, overrides)


def start_run(
    pipeline: str | Path | dict,
    *overrides: str,
    runner: NodeRunner | None = None,
    run_id: str | None = None,
) -> Run:
    """load_pipeline + build_graph + Run.start (`runner` None: the pipeline's pools)."""
    loaded = _load(pipeline, *overrides)
    return Run.start(loaded, build_graph(loaded), runner=runner, run_id=run_id)


def drive_inline(run: Run, iterations: int | None = None) -> StoredRunView:
    """Run iterations 0.. of a started run in this process (the inline driver, as `rldag
    run` without an orchestrator), closing it; the stored run."""
    run_inline(run, iterations, on_close=(store_reward_curve,))
    return StoredRunView(run.storage, run.run_id)


def run_pipeline(
    pipeline: str | Path | dict,
    *overrides: str,
    iterations: int | None = None,
    runner: NodeRunner | None = None,
) -> StoredRunView:
    """start_run + drive_inline: a whole run in this process, closed; the stored run."""
    return drive_inline(start_run(pipeline, *overrides, runner=runner), iterations)


def read_run(
    uri_or_dir: str | Path,
    run_id: str | None = None,
    endpoint_url: str | None = None,
    **options: object,
) -> StoredRunView:
    """A stored run (made by the CLI or the flow, say): its own directory or URI, or a storage
    root and `run_id`; `endpoint_url` and `options` open the storage as Storage does."""
    root = str(uri_or_dir).rstrip("/")
    if run_id is None:
        root, _, run_id = root.rpartition("/")
    view = StoredRunView(Storage(root, endpoint_url=endpoint_url, **options), run_id)
    assert view.storage.exists(f"{run_id}/pipeline.yaml"), f"no run at {view.uri}"
    return view


def small_default(tiny_task: Path, storage: Path | str, iterations: int) -> list[str]:
    """Overrides of the default pipeline (pipeline.yaml) for a small run on the tiny task:
    4 prompts x 2 samples, a checkpoint every iteration (no HF export), stored at `storage`."""
    return [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"storage.uri={storage}",
        f"iterations={iterations}",
        "checkpoint.every=1",
        "checkpoint.export_hf=false",
        "nodes.prompts.params.batch_size=4",
        "nodes.generate.params.n=2",
    ]
