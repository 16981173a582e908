"""Exactly-once resume under chaos: `rldag run` (the real CLI) SIGKILLed with its process group
at seeded kill points (mid-checkpoint, mid-stream, at a weight sync, mid-Parquet write:
rldag/storage/kill_points.py) and resumed with `--resume RUN_ID` until it completes, for each
staleness bound k, with streaming (`async.chunk_groups`) and DAPO's dynamic sampling over an
oversampling source. Each completed run is checked against the invariants (tests/support/
chaos.py): every prompt of the epoch consumed once, no row missing or duplicated, no torn or
temporary file, and the rows of an uninterrupted run of the same pipeline on this machine.

    python bench/chaos_resume.py [--kills 20] [--ks 0 1 2] [--seed 0] [--per-run 5]

Prints each launch (its kill point, or its resume), then a PASS/FAIL line per invariant and
per k; exit 0 when every invariant held.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support, scripts, examples: not installed
from examples.tiny_task import build_tiny_task  # noqa: E402
from tests.support.chaos import (  # noqa: E402
    INVARIANTS,
    ChaosRun,
    Launch,
    Shape,
    chaos_run,
    check,
    draw_kills,
    write_epoch,
)
from tests.support.prefect_server import PrefectServer  # noqa: E402


def _print(launch: Launch) -> None:
    print(f"    {launch.describe()}", flush=True)


def chaos_k(
    k: int, kills: int, per_run: int, seed: int, root: Path, env: dict[str, str]
) -> tuple[list[ChaosRun], dict[str, list[str]]]:
    """Chaos runs at staleness `k` until `kills` kills happened; the violations found."""
    shape, tiny = Shape(k=k, seed=seed), build_tiny_task(ROOT / ".cache" / "tiny")
    data = write_epoch(tiny, shape, root / f"epoch-k{k}.parquet")
    print(f"k={k}: the uninterrupted run", flush=True)
    reference = chaos_run(
        shape.overrides(tiny, data, root / f"ref-k{k}"), root / f"ref-k{k}", [], env
    )
    _print(reference.launches[0])
    assert reference.completed, f"the uninterrupted run failed: see {reference.storage}/chaos.log"
    rng, runs = random.Random(f"{seed}-{k}"), []
    violations: dict[str, list[str]] = {name: [] for name in INVARIANTS}
    while sum(run.resumes for run in runs) < kills:  # kills that were resumed
        storage = root / f"chaos-k{k}-{len(runs)}"
        print(f"k={k}: chaos run {len(runs)}", flush=True)
        run = chaos_run(
            shape.overrides(tiny, data, storage),
            storage,
            draw_kills(rng, shape, per_run),
            env,
            _print,
        )
        runs.append(run)
        if not run.completed:
            violations["uninterrupted rows"].append(f"{storage}: a launch failed (chaos.log)")
            continue
        for name, found in check(run.run_dir, reference.run_dir, shape).items():
            violations[name] += [f"{run.run_dir.name}: {problem}" for problem in found]
    return runs, violations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="resumed kills per k, at least")
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--per-run", type=int, default=5, help="kills armed per chaos run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the runs here (default: a temp dir)")
    args = parser.parse_args(argv)
    print(describe())
    print(load_line("start"), flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="rldag-chaos-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        with PrefectServer(root / "prefect") as server:
            for k in args.ks:
                results[k] = chaos_k(k, args.kills, args.per_run, args.seed, root, server.env())
    print(load_line("end"))
    ok = True
    for k, (runs, violations) in results.items():
        launches = [launch for run in runs for launch in run.launches]
        kills = [launch for launch in launches if launch.killed]
        points = Counter(launch.killed_at.split(":")[0] for launch in kills)
        resumes = sum(run.resumes for run in runs)
        print(
            f"k={k}: {len(runs)} runs, {len(kills)} kills "
            f"({', '.join(f'{p} {n}' for p, n in sorted(points.items()))}), {resumes} resumed, "
            f"{len(kills) - resumes} before the first checkpoint (a new run), "
            f"{sum(launch.seconds for launch in launches):.0f} s of launches"
        )
        for name, found in violations.items():
            ok &= not found
            print(f"  {'PASS' if not found else 'FAIL'} {name}")
            for problem in found[:10]:
                print(f"      {problem}")
    print(f"chaos resume: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
