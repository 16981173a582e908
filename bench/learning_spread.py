"""The spread of the suite's learning runs over seeds and CPU kernel paths: the
distributions the learning tests' bars are set below (each test's docstring quotes them).

Every (scenario, kernel path, seed) runs in a fresh process whose environment forces the
kernel path, as another processor would pick it: ATen's vectorised kernels
(`ATEN_CPU_CAPABILITY`), MKL's BLAS code path (`MKL_ENABLE_INSTRUCTIONS`, `MKL_CBWR`) and
oneDNN's (`ONEDNN_MAX_CPU_ISA`). The runs start from the shipped tiny models, so what
varies is only the RL run's floats and the seed.

    .venv/bin/python bench/learning_spread.py [--scenarios default,tool] [--seeds 0-4]
        [--kernels native,avx2,default] [--json results.jsonl]

Prints one line per run (first 3 and last 3 iterations' mean, their ratio, the extras, the
per-iteration curve), then per scenario the worst and best of each over every run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
KERNELS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    "default": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
}


def seeds(text: str) -> list[int]:
    """`0-4` or `0,2,5`."""
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def run_one(scenario: str, seed: int) -> dict:
    """Runs one scenario in this process; returns its figures."""
    sys.path.insert(0, str(ROOT))
    from tests.support.learning_runs import SCENARIOS

    with tempfile.TemporaryDirectory() as runs:
        curve = SCENARIOS[scenario](Path(runs), f"seed={seed}")
    first, last = curve.first(), curve.last()
    ratio = last / first if first else math.inf
    curve_values = [round(v, 4) for v in curve.values]
    return {"first": first, "last": last, "ratio": ratio, **curve.extra, "curve": curve_values}


def spawn(scenario: str, kernel: str, seed: int) -> dict:
    """One run in a fresh process with `kernel`'s environment."""
    env = {**os.environ, **KERNELS[kernel]}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--one", scenario, "--seed", str(seed)],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise SystemExit(f"{scenario} {kernel} seed {seed} failed:\n{out.stderr[-3000:]}")
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return {"scenario": scenario, "kernel": kernel, "seed": seed, **figures,
            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip


def summary(rows: list[dict]) -> None:
    """Per scenario: the worst and best first, last and ratio over its runs."""
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == scenario]
        parts = []
        for key in ("first", "last", "ratio"):
            values = [r[key] for r in mine]
            parts.append(f"{key} {min(values):.3f}..{max(values):.3f}")
        print(f"{scenario} ({len(mine)} runs): " + ", ".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="default")
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--kernels", default="native,avx2,default")
    parser.add_argument("--json", type=Path, help="append every run's figures to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.seed)))
        return
    print(describe())
    print(load_line("start"), flush=True)
    rows = []
    for scenario in args.scenarios.split(","):
        for kernel in args.kernels.split(","):
            for seed in seeds(args.seeds):
                row = spawn(scenario, kernel, seed)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    print(load_line("end"))
    summary(rows)


if __name__ == "__main__":
    main()
