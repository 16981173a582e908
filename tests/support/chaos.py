"""The chaos harness of exactly-once resume, shared by tests/e2e/test_chaos.py and
bench/chaos_resume.py: `rldag run` (the real CLI, in a session of its own) is SIGKILLed with
its process group at seeded kill points (rldag/storage/kill_points.py), resumed with
`--resume RUN_ID` until it completes, and the stored run is checked against the invariants:
every prompt of the epoch consumed once (over the refill rounds too: rldag/engine/refill.py),
no row missing or duplicated, no torn or temporary file, and the rows of the uninterrupted
run (scripts/compare_runs.py)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from operators.source.cursor import batch_indices
from rldag.storage.kill_points import ENV, POINTS
from rldag.storage.store import TMP_PREFIX
from scripts.compare_runs import compare
from tests.support.paths import ROOT

PIPELINE = ROOT / "examples" / "dapo.yaml"  # DAPO's dynamic sampling over an oversampling source


@dataclass(frozen=True)
class Shape:
    """The chaos run's size: `iterations` of `batch_size` x `oversample` prompts, `n` samples
    each, from a dataset of exactly one epoch of first rounds (refill rounds draw on into the
    next), so every row is consumed once before any is again."""

    k: int  # async.max_staleness
    iterations: int = 5
    batch_size: int = 4
    oversample: float = 1.5
    n: int = 4
    every: int = 2  # checkpoint.every
    chunk_groups: int = 2  # async.chunk_groups: score streams generate's prompt groups
    seed: int = 0
    ray: bool = True  # False: every node in the driver process (ray.enabled=false)
    max_rounds: int | None = None  # the filter's refill bound (None: the pipeline's)

    @property
    def prompts_per_iteration(self) -> int:
        return math.ceil(self.batch_size * self.oversample)  # as the dataset source counts

    @property
    def rows(self) -> int:
        return self.iterations * self.prompts_per_iteration

    def hits_per_iteration(self, point: str) -> float:
        """About how often an iteration reaches `point` (to spread the kills over a run)."""
        nodes = 7  # prompts, generate, score, filter, overlong, advantage, train
        chunks = -(-self.prompts_per_iteration // self.chunk_groups)
        synced = (self.iterations - self.k) / self.iterations  # k > 0: not the first k
        per = {"parquet": nodes + 1, "checkpoint": 1 / self.every, "weight_sync": synced}
        per["refill"] = 0.5  # about every other iteration runs a refill round
        return per.get(point, 2.0 * chunks)  # stream_chunk: generate's chunks and score's

    def overrides(self, tiny_task: Path, data: Path, storage: Path) -> list[str]:
        pools = ["pools.colocate=[]"] if self.k else []  # split pools, so iterations overlap
        pools += [] if self.ray else ["ray.enabled=false"]
        pools += [f"nodes.filter.params.max_rounds={self.max_rounds}"] if self.max_rounds else []
        return [
            *pools,
            f"async.max_staleness={self.k}",
            f"async.chunk_groups={self.chunk_groups}",
            f"model.path={tiny_task / 'model'}",
            f"nodes.prompts.params.path={data}",
            f"nodes.prompts.params.batch_size={self.batch_size}",
            f"nodes.prompts.params.oversample={self.oversample}",
            f"nodes.generate.params.n={self.n}",
            f"storage.uri={storage}",
            f"iterations={self.iterations}",
            f"checkpoint.every={self.every}",
            f"seed={self.seed}",
        ]


def write_epoch(tiny_task: Path, shape: Shape, path: Path) -> Path:
    """The first `shape.rows` rows of the tiny task's training set: one epoch of the run."""
    pq.write_table(pq.read_table(tiny_task / "train.parquet").slice(0, shape.rows), path)
    return path


@dataclass(frozen=True)
class Kill:
    """Kill `rldag run` the `n`-th time it reaches `point`."""

    point: str
    n: int

    def __str__(self) -> str:
        return f"{self.point}:{self.n}"


def draw_kills(rng: random.Random, shape: Shape, count: int) -> list[Kill]:
    """`count` seeded kills at random points: the first one not before the iterations of the
    first checkpoint have run (a run killed before its first checkpoint has nothing to resume
    from), the others within about the iterations a resumed run has left."""
    kills = []
    for i in range(count):
        point = rng.choice(POINTS)
        per = shape.hits_per_iteration(point)
        if i == 0:  # the whole run but the hits before its first commit
            low, high = shape.every * per, shape.iterations * per
        else:  # about the iterations a resumed run has left
            low, high = 0.0, (shape.iterations - shape.every) * per
        kills.append(Kill(point, int(low) + 1 + rng.randrange(max(1, int(high - low)))))
    return kills


@dataclass
class Launch:
    """One `rldag run` process: its kill, the checkpoint it resumed from, how it ended."""

    kill: Kill | None
    resumed_from: int | None  # the checkpointed iteration (None: a new run)
    returncode: int
    killed_at: str = ""  # the kill point's own line: "parquet:3 <run>/iter=2/generate.parquet"
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def describe(self) -> str:
        start = "new run" if self.resumed_from is None else f"resume after iter={self.resumed_from}"
        end = f"killed at {self.killed_at}" if self.killed else f"exit {self.returncode}"
        if self.kill is not None and not self.killed:
            end += f" (armed at {self.kill}, not reached)"
        return f"{start}: {end} in {self.seconds:.0f} s"


def run_cli(
    overrides: list[str],
    kill: Kill | None,
    log: Path,
    resume: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> tuple[int, str, float]:
    """`rldag run` in a session of its own (its Ray and Prefect servers in its process group),
    killed at `kill`; its exit status, its kill line and seconds. The group is killed after
    it ends, so nothing it started outlives it."""
    env = {**(env or os.environ)}
    env.pop(ENV, None)
    if kill is not None:
        env[ENV] = str(kill)
    args = [sys.executable, "-m", "flows.cli", "run", str(PIPELINE), *overrides]
    args += ["--resume", resume] if resume else []
    start = time.monotonic()
    with log.open("ab") as out:
        out.write(f"\n$ {ENV}={kill} {' '.join(args[3:])}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    marker = "chaos: killed at "
    lines = [line for line in log.read_text(errors="replace").splitlines() if marker in line]
    killed_at = lines[-1].split(marker, 1)[1] if code == -signal.SIGKILL and lines else ""
    return code, killed_at, time.monotonic() - start


def checkpointed(run_dir: Path) -> int | None:
    marker = run_dir / "checkpoints" / "latest.json"
    return json.loads(marker.read_text())["iteration"] if marker.exists() else None


@dataclass
class ChaosRun:
    """A run killed and resumed until it completed; `launches` in order."""

    storage: Path
    launches: list[Launch] = field(default_factory=list)
    run_id: str = ""

    @property
    def run_dir(self) -> Path:
        return self.storage / self.run_id

    @property
    def kills(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.killed]

    @property
    def resumes(self) -> int:
        """Kills the run was resumed after (a kill before its first checkpoint starts a new
        run instead); every launch but the first follows a kill."""
        return sum(launch.resumed_from is not None for launch in self.launches[1:])

    @property
    def completed(self) -> bool:
        return bool(self.launches) and self.launches[-1].returncode == 0


def chaos_run(
    overrides: list[str],
    storage: Path,
    kills: list[Kill],
    env: dict[str, str] | None = None,
    on_launch: Callable[[Launch], object] = lambda launch: None,
    max_launches: int = 60,
) -> ChaosRun:
    """Start the run (`overrides` name `storage`) killed at kills[0]; resume it killed at the
    next kill, and so on, then unarmed, until a launch completes it or fails otherwise (the
    caller checks `completed`). A run killed before its first checkpoint cannot be resumed:
    a new run starts, with the next kill."""
    storage.mkdir(parents=True, exist_ok=True)
    result, log = ChaosRun(storage), storage / "chaos.log"
    armed: Iterator[Kill] = iter(kills)
    while len(result.launches) < max_launches:
        kill = next(armed, None)
        resumed_from = checkpointed(result.run_dir) if result.run_id else None
        if resumed_from is None:
            result.run_id = ""  # a new run
        before = {p.name for p in storage.iterdir()}
        code, killed_at, seconds = run_cli(overrides, kill, log, result.run_id or None, env)
        if not result.run_id:
            new = [p.name for p in storage.iterdir() if p.is_dir() and p.name not in before]
            assert len(new) == 1, f"run directories made by one launch: {new}"
            result.run_id = new[0]
        launch = Launch(kill, resumed_from, code, killed_at, seconds)
        result.launches.append(launch)
        on_launch(launch)
        if not launch.killed:
            return result
    return result


INVARIANTS = ("prompts once", "rows once", "no torn or temporary file", "uninterrupted rows")


def check(run_dir: Path, reference: Path, shape: Shape) -> dict[str, list[str]]:
    """Each invariant's violations in the stored run (empty lists: it holds)."""
    return {
        "prompts once": _prompts_once(run_dir, shape),
        "rows once": _rows_once(run_dir, shape),
        "no torn or temporary file": _files_whole(run_dir),
        "uninterrupted rows": compare(run_dir, reference),
    }


def _table(run_dir: Path, iteration: int, node: str, round: int = 0) -> pa.Table:
    refill = f"round={round}/" if round else ""
    return pq.read_table(run_dir / f"iter={iteration}" / f"{refill}{node}.parquet")


def _rounds(run_dir: Path, iteration: int) -> list[int]:
    """The refill rounds the iteration stored: 0, then each `round=<r>/`."""
    found = [p.name.removeprefix("round=") for p in (run_dir / f"iter={iteration}").glob("round=*")]
    return [0, *sorted(int(r) for r in found)]


def _prompts_once(run_dir: Path, shape: Shape) -> list[str]:
    """The prompts tables of every round hold whole batches of the cursor's seeded stream:
    ordered by prompt id, the ids are 0.. without gap or repeat and their dataset rows are
    the stream's (each epoch's rows once each, in its seeded order)."""
    size = shape.prompts_per_iteration
    ids, rows, problems = [], [], []
    for i in range(shape.iterations):
        for r in _rounds(run_dir, i):
            prompts = _table(run_dir, i, "prompts", r)
            batch = prompts["prompt_id"].to_pylist()
            if not batch or batch[0] % size or batch != list(range(batch[0], batch[0] + size)):
                problems.append(f"iter={i} round {r}: prompt ids {batch} are not a whole batch")
            ids += batch
            rows += prompts["dataset_index"].to_pylist()
    order = sorted(range(len(ids)), key=ids.__getitem__)
    if sorted(ids) != list(range(len(ids))):
        problems.append(f"prompt ids {sorted(ids)} are not 0..{len(ids) - 1} once each")
    batches = -(-len(ids) // size)
    stream = [
        b for n in range(batches) for b in batch_indices(shape.rows, size, n, shape.seed, True)
    ]
    if [rows[j] for j in order] != stream[: len(ids)]:
        problems.append(f"dataset rows {[rows[j] for j in order]}, the cursor says {stream}")
    return problems


def _rows_once(run_dir: Path, shape: Shape) -> list[str]:
    """generate holds n samples of every prompt of its round once; every other table keyed
    by (prompt, sample) holds each key at most once and only generated ones (score: all of
    its round's); one metrics row per iteration."""
    problems = []
    for i in range(shape.iterations):
        generated: set[tuple[int, int]] = set()
        paths = []
        for r in _rounds(run_dir, i):
            prompts = set(_table(run_dir, i, "prompts", r)["prompt_id"].to_pylist())
            want = sorted((p, s) for p in prompts for s in range(shape.n))
            generated |= set(want)
            folder = run_dir / f"iter={i}" / (f"round={r}" if r else "")
            paths += [(path, want) for path in sorted(folder.glob("*.parquet"))]
        for path, want in paths:
            table = pq.read_table(path)
            if not {"prompt_id", "sample_idx"} <= set(table.column_names):
                continue
            pids, samples = table["prompt_id"].to_pylist(), table["sample_idx"].to_pylist()
            keys = sorted(zip(pids, samples, strict=True))
            where = path.relative_to(run_dir)
            if len(set(keys)) != len(keys):
                problems.append(f"{where}: duplicated rows")
            if path.stem in ("generate", "score") and keys != want:
                problems.append(f"{where}: {len(keys)} rows, {len(want)} expected")
            elif not set(keys) <= generated:
                problems.append(f"{where}: rows of no generated sample")
    iterations = pq.read_table(run_dir / "metrics.parquet")["iteration"].to_pylist()
    if iterations != list(range(shape.iterations)):
        problems.append(f"metrics.parquet has iterations {iterations}")
    return problems


def _files_whole(run_dir: Path) -> list[str]:
    """Every Parquet file under the run reads whole; no temporary file is left."""
    problems = [f"left behind: {p.relative_to(run_dir)}" for p in run_dir.rglob(f"{TMP_PREFIX}*")]
    for path in sorted(run_dir.rglob("*.parquet")):
        try:
            pq.read_table(path)
        except Exception as err:  # pyarrow's errors for a torn file vary
            problems.append(f"torn: {path.relative_to(run_dir)}: {err}")
    return problems
