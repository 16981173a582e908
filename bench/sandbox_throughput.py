"""Sandbox throughput: rldag's zygote sandbox vs bubblewrap-per-run vs a plain subprocess.

All three run the same small program with one assert test, at the same concurrency, in the
same process, and print executions/s and the ratios. Quick (< 60 s on 2 cores):

    .venv/bin/python bench/sandbox_throughput.py [--seconds 8] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from machine import describe, load_line

from operators.sandbox import Job, Sandbox, SandboxLimits, TestSpec
from operators.sandbox.host import bwrap_path, find_interpreter

PROGRAM = "def total(n):\n    return sum(range(n))\n\nprint(total(10))\n"
TESTS = TestSpec(asserts="assert total(10) == 45")
# What the baselines run: the program, then the assert (judged by the exit code).
SCRIPT = PROGRAM + "assert total(10) == 45\n"


def measure(name: str, run_batch: Callable[[int], int], seconds: float, batch: int) -> float:
    """Executions per second of run_batch over about `seconds` (after one warm-up batch)."""
    run_batch(batch)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        done += run_batch(batch)
    rate = done / (time.perf_counter() - t0)
    print(f"  {name:<24} {rate:8.1f} executions/s  ({done} runs)", flush=True)
    return rate


def ours(sandbox: Sandbox) -> Callable[[int], int]:
    def batch(n: int) -> int:
        results = sandbox.run_many([Job(PROGRAM, TESTS)] * n)
        bad = [r for r in results if not r.passed]
        assert not bad, bad[0]
        return n

    return batch


def subprocess_runner(argv_prefix: list[str], concurrency: int) -> Callable[[int], int]:
    pool = ThreadPoolExecutor(concurrency)

    def one(_: int) -> None:
        proc = subprocess.run(
            [*argv_prefix, "-c", SCRIPT], capture_output=True, timeout=30, env={}, cwd="/tmp"
        )
        assert proc.returncode == 0 and proc.stdout == b"45\n", proc

    def batch(n: int) -> int:
        list(pool.map(one, range(n)))
        return n

    return batch


def bwrap_prefix(python: str) -> list[str]:
    """A fresh `bwrap --unshare-all` sandbox per run (read-only /usr, private /tmp)."""
    argv = [bwrap_path() or "bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    argv += ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin"]
    argv += ["--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--clearenv"]
    return [*argv, python, "-I"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring time per runner")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="also print a JSON line")
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    python = find_interpreter() or sys.executable
    c, batch = args.concurrency, 20
    print(f"sandbox throughput, concurrency {c}, program+1 assert, {args.seconds:.0f} s each")
    with Sandbox(SandboxLimits(wall_seconds=5), concurrency=c) as sandbox:
        rate_ours = measure("rldag sandbox (zygote)", ours(sandbox), args.seconds, batch * 5)
    rate_bwrap = measure(
        "bwrap per run", subprocess_runner(bwrap_prefix(python), c), args.seconds, batch
    )
    rate_plain = measure(
        "plain subprocess", subprocess_runner([python, "-I"], c), args.seconds, batch
    )
    print(load_line("end"))
    print(f"  ours / bwrap-per-run     {rate_ours / rate_bwrap:8.2f}x")
    print(f"  ours / plain subprocess  {rate_ours / rate_plain:8.2f}x")
    if args.json:
        rates = {"ours": rate_ours, "bwrap_per_run": rate_bwrap, "plain_subprocess": rate_plain}
        print(json.dumps({"concurrency": c, "executions_per_s": rates}))


if __name__ == "__main__":
    main()
