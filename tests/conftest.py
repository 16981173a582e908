"""Shared fixtures: small pipeline files and datasets written into tmp dirs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.paths import ROOT

pytest_plugins = ["tests.support.deadlines"]

if TYPE_CHECKING:
    from rldag.compute.runner import NodeRunner
    from tests.support.runs import StoredRunView

# Seconds each test file took (setup, call and teardown of its tests), recorded by a run with
# --record-durations. The longest files are collected first, so that `make test`'s two
# workers (pytest -n 2 --dist loadfile) start on them and do not end with one worker running a
# long file alone; files not in the record come last, in their own order.
DURATIONS = Path(__file__).with_name("durations.json")  # keyed by file name


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test file's seconds to {DURATIONS.name} (orders later runs)",
    )


E2E = Path(__file__).parent / "e2e"  # whole runs end to end: all slow


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.slow)
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))  # stable


class FileSeconds:
    """Adds up each test file's seconds (on the controller, from every worker's reports) and
    writes them to DURATIONS at the end, longest first."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = Path(report.nodeid.split("::")[0]).name  # file names are unique
        self.totals[name] = self.totals.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        ranked = sorted(self.totals.items(), key=lambda kv: -kv[1])
        DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in ranked}, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileSeconds(), "file-seconds")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A veRL-format parquet with 6 addition prompts."""
    rows = [(a, b) for a in range(2) for b in range(3)]
    table = pa.table(
        {
            "prompt": [f"{a}+{b}=" for a, b in rows],
            "data_source": ["arithmetic"] * len(rows),
            "reward_model": [{"ground_truth": str(a + b), "style": "rule"} for a, b in rows],
            "extra_info": [{"split": "train", "index": i} for i in range(len(rows))],
        }
    )
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    return path


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write a dict (or raw text) as pipeline.yaml and return its path."""

    def write(content: dict | str, name: str = "pipeline.yaml") -> Path:
        path = tmp_path / name
        path.write_text(
            content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        )
        return path

    return write


@pytest.fixture
def run_pipeline(tmp_path: Path, write_yaml) -> Callable[..., StoredRunView]:
    """tests.support.runs.run_pipeline with `storage.uri=file://<tmp_path>/runs` (overrides
    after it win); a dict pipeline is written with write_yaml first."""
    from tests.support import runs

    def run(
        pipeline: Path | dict,
        *overrides: str,
        iterations: int | None = None,
        runner: NodeRunner | None = None,
    ) -> StoredRunView:
        path = write_yaml(pipeline) if isinstance(pipeline, dict) else pipeline
        storage = f"storage.uri=file://{tmp_path}/runs"
        return runs.run_pipeline(path, storage, *overrides, iterations=iterations, runner=runner)

    return run


@pytest.fixture
def read_run() -> Callable[..., StoredRunView]:
    """tests.support.runs.read_run: a stored run, by its directory or URI."""
    from tests.support.runs import read_run

    return read_run


@pytest.fixture(scope="session")
def prefect_api():
    """A real temporary Prefect server (SQLite) for the whole test session. Its URL is also
    exported as PREFECT_API_URL, so `rldag run` subprocesses report to it as a user's run
    reports to their server, instead of each starting an ephemeral server of its own."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    import flows  # noqa: F401  (sets the server-side defaults before the server starts)

    with prefect_test_harness(server_startup_timeout=120):
        before = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = PREFECT_API_URL.value()
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("PREFECT_API_URL")
            else:
                os.environ["PREFECT_API_URL"] = before


@pytest.fixture(scope="session")
def tiny_task() -> Path:
    """The tiny model, tokenizer and addition data, built once (cached under .cache/)."""
    from examples.tiny_task import build_tiny_task

    return build_tiny_task(ROOT / ".cache" / "tiny")


RAY_LOCAL_CPUS = 6


@pytest.fixture
def ray_local():
    """An embedded local Ray (started once, kept for later tests), with logical CPUs for
    several small pools. Function-scoped so it comes back after a multi-node test, and after
    a test whose run started Ray as `rldag run` does (one CPU per core, too few for them)."""
    import ray

    if ray.is_initialized() and ray.cluster_resources().get("CPU", 0) < RAY_LOCAL_CPUS:
        ray.shutdown()
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=RAY_LOCAL_CPUS,
            include_dashboard=False,
            logging_level="WARNING",
        )
    yield ray


@pytest.fixture(scope="session")
def tiny_rm() -> Path:
    """The tiny reward model (right vs wrong sums of the addition task), built once (cached
    under .cache/) as `make model` builds it."""
    from examples.tiny_task.reward_model import build_tiny_reward_model

    return build_tiny_reward_model(ROOT / ".cache" / "tiny_rm")


@pytest.fixture
def user_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a new user's own package lives (tests/support/byo.py: user_package), importable in this
    process as `python -m` makes the working directory importable; forgotten afterwards."""
    import sys

    root = tmp_path / "user"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


@pytest.fixture(scope="session")
def byo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's own random-init Llama with a byte-level BPE tokenizer and a chat template."""
    from tests.support.byo import build_model

    return build_model(tmp_path_factory.mktemp("byo") / "my-llama")
