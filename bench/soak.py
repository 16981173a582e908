"""Soak: many iterations of the default pipeline under `rldag run`, watching for leaks.

Every 10 iterations it samples the driver process (the `rldag run` process, which hosts the
Prefect client and the scheduler) and its worker processes (Ray workers and anything else it
started, summed, and their RSS by process: the embedded Prefect server, Ray's GCS and raylet,
the pool workers...): RSS, open file descriptors and threads; the iteration times come from
the run's metrics.parquet. Prints the growth per 100 iterations after warm-up, writes the
samples as JSON and the curves as a PNG.

    nice -n 10 python bench/soak.py --iterations 300 --png docs/soak.png
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
EVERY = 10  # iterations between samples
WARMUP = 30  # iterations left out of the growth figures
FLOOR = 5  # samples per window of the RSS floor


def _usage(procs: list[psutil.Process]) -> dict[str, float]:
    rss = fds = threads = 0
    for p in procs:
        try:
            with p.oneshot():
                rss += p.memory_info().rss
                fds += p.num_fds()
                threads += p.num_threads()
        except psutil.Error:  # a process that just ended
            continue
    return {"rss_mb": rss / 2**20, "fds": fds, "threads": threads}


# Which started process is which, by its command line (the first match names it).
ROLES = (
    ("uvicorn", "Prefect server"),
    ("gcs_server", "Ray GCS"),
    ("raylet", "Ray raylet"),
    ("ray::PoolWorker", "pool workers"),
    ("ray::IDLE", "Ray idle workers"),
    ("ray::", "Ray agents"),  # the dashboard and runtime-env agents
    ("ray", "Ray services"),  # the dashboard head, the monitor, the log monitor
)


def _role(proc: psutil.Process, driver_cmd: list[str]) -> str:
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "other"
    if cmd == driver_cmd:  # forked, not exec'd: the score node's worker (its pages shared)
        return "driver's forks"
    return next((name for key, name in ROLES if key in " ".join(cmd)), "other")


def _rss_by_role(procs: list[psutil.Process], driver_cmd: list[str]) -> dict[str, float]:
    by_role: dict[str, float] = {}
    for p in procs:
        try:
            rss = p.memory_info().rss / 2**20
        except psutil.Error:
            continue
        role = _role(p, driver_cmd)
        by_role[role] = by_role.get(role, 0.0) + rss
    return by_role


def _iterations_done(storage: Path) -> tuple[int, list[float]]:
    files = list(storage.glob("*/metrics.parquet"))
    if not files:
        return 0, []
    try:
        times = pq.read_table(files[0], columns=["timing_s/iteration"]).column(0).to_pylist()
    except Exception:  # replaced while we read it
        return -1, []
    return len(times), times


# The driver: `rldag run` (or, "inline", the same loop without Prefect); with a first traced
# iteration > 0, printing (to stderr) the top tracebacks of what was allocated between the end
# of that iteration and the end of the last one and is still alive. Tracing starts at that
# iteration: traced from the start, the imports and the server start-up took minutes.
DRIVER = """
import gc, sys, tracemalloc
from rldag.engine.events import IterationFinished, add_listener
first, last, frames, mode = int(sys.argv[1]), int(sys.argv[2]) - 1, int(sys.argv[3]), sys.argv[4]
def snap(event):
    if not isinstance(event, IterationFinished):
        return
    if event.iteration == first:
        gc.collect()
        tracemalloc.start(frames)
    elif event.iteration == last and tracemalloc.is_tracing():
        gc.collect()
        own = tracemalloc.Filter(False, tracemalloc.__file__)
        stats = tracemalloc.take_snapshot().filter_traces([own]).statistics("traceback")
        grown = sum(s.size for s in stats) / 2**20
        lines = [f"{s}\\n  " + "\\n  ".join(s.traceback.format()[::-1]) for s in stats[:25]]
        print(f"tracemalloc: {grown:+.2f} MB between iterations {first} and {last}:",
              *lines, sep="\\n", file=sys.stderr, flush=True)
if first > 0:
    add_listener(snap)
if mode == "prefect":
    from flows.cli import main
    sys.exit(main(["run", *sys.argv[5:]]))
from rldag.graph.dag import build_graph
from rldag.engine.driver import run_inline
from rldag.engine.run import Run
from rldag.report.reward_curve import store_reward_curve
from rldag.config.spec import load_pipeline
loaded = load_pipeline(sys.argv[5], sys.argv[6:])
run_inline(Run.start(loaded, build_graph(loaded)), on_close=(store_reward_curve,))
"""


def soak(
    iterations: int,
    max_minutes: float,
    storage: Path,
    inline: bool = False,
    trace_from: int = 0,
    trace_frames: int = 1,
    overrides: tuple[str, ...] = (),
) -> dict:
    """Run and sample; `inline`: the same loop without Prefect (rldag.engine.driver's threads), to
    tell the orchestrator's growth from the core's; `trace_from` > 0: the driver runs under
    tracemalloc and prints what it allocated from that iteration on."""
    overrides = (
        f"iterations={iterations}",
        f"storage.uri={storage}",
        "checkpoint.export_hf=false",
        *overrides,
    )
    pipeline = str(ROOT / "pipeline.yaml")
    mode = "inline" if inline else "prefect"
    traced = [str(trace_from), str(iterations), str(trace_frames), mode]
    cmd = [sys.executable, "-c", DRIVER, *traced, pipeline, *overrides]
    # a Prefect home of its own: the embedded server starts on an empty database, as on a new
    # machine, not on whatever earlier runs left in ~/.prefect
    env = dict(os.environ, PYTHONPATH=str(ROOT), PREFECT_HOME=str(storage.parent / "prefect-home"))
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, start_new_session=True
    )
    driver = psutil.Process(proc.pid)
    samples: list[dict] = []
    deadline = time.monotonic() + max_minutes * 60
    times: list[float] = []
    while proc.poll() is None and time.monotonic() < deadline:
        done, seen = _iterations_done(storage)
        times = seen or times
        if iterations > done >= (len(samples) + 1) * EVERY:  # not while the run shuts down
            workers = [c for c in driver.children(recursive=True)]
            samples.append(
                {
                    "iteration": done,
                    "driver": _usage([driver]),
                    "workers": _usage(workers),
                    "rss_mb_by_process": _rss_by_role(workers, driver.cmdline()),
                }
            )
            print(json.dumps(samples[-1]), flush=True)
        time.sleep(0.5)
    if proc.poll() is None:  # out of time: stop it, keep what was sampled
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    return {"samples": samples, "iteration_s": times, "returncode": proc.returncode}


def _after_warmup(samples: list[dict]) -> list[dict]:
    return [s for s in samples if s["iteration"] > WARMUP]


def growth_per_100(samples: list[dict], who: str, key: str) -> float:
    """Least-squares slope of `key` over iterations after warm-up, per 100 iterations."""
    return _slope([(s["iteration"], s[who][key]) for s in _after_warmup(samples)])


def _roles(samples: list[dict]) -> list[str]:
    return sorted({r for s in samples for r in s["rss_mb_by_process"]})


def growth_by_process_per_100(samples: list[dict]) -> dict[str, float]:
    """The same slope of each started process's RSS (summed by role)."""
    after = _after_warmup(samples)
    return {
        r: _slope([(s["iteration"], s["rss_mb_by_process"].get(r, 0.0)) for s in after])
        for r in _roles(after)
    }


def floor_growth_per_100(samples: list[dict], who: str, window: int = FLOOR) -> float:
    """The same slope over the lowest RSS of each `window` consecutive samples: a sample falls
    at any point of an iteration, with or without its tensors and tables (tens of MB)."""
    after = _after_warmup(samples)
    groups = [after[i : i + window] for i in range(0, len(after) - window + 1, window)]
    lows = [min(g, key=lambda s: s[who]["rss_mb"]) for g in groups]
    return _slope([(s["iteration"], s[who]["rss_mb"]) for s in lows])


def _slope(pts: list[tuple[float, float]]) -> float:
    if len(pts) < 2:
        return float("nan")
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    var = sum((x - mx) ** 2 for x, _ in pts)
    return 100 * sum((x - mx) * (y - my) for x, y in pts) / var


def plot(result: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    its = [s["iteration"] for s in samples]
    fig, axes = plt.subplots(1, 5, figsize=(20, 3.5))
    for ax, key, label in zip(
        axes[:3], ("rss_mb", "fds", "threads"), ("RSS (MB)", "open fds", "threads"), strict=True
    ):
        for who in ("driver", "workers"):
            ax.plot(its, [s[who][key] for s in samples], marker=".", label=who)
        ax.set_xlabel("iteration")
        ax.set_title(label)
        ax.legend()
    axes[3].plot(range(len(result["iteration_s"])), result["iteration_s"], lw=0.8)
    axes[3].set_xlabel("iteration")
    axes[3].set_title("iteration time (s)")
    after = _after_warmup(samples)
    for role in _roles(after):
        rss = [s["rss_mb_by_process"].get(role, 0.0) for s in after]
        axes[4].plot([s["iteration"] for s in after], [r - rss[0] for r in rss], label=role)
    axes[4].set_xlabel("iteration")
    axes[4].set_title(f"RSS change by process after iteration {WARMUP} (MB)")
    axes[4].legend(fontsize=7)
    fig.suptitle("rldag soak: the default pipeline under `rldag run`")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--max-minutes", type=float, default=30.0)
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "soak.png")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--inline", action="store_true", help="without Prefect (comparison)")
    parser.add_argument(
        "--trace-from",
        type=int,
        default=0,
        metavar="I",
        help="run the driver under tracemalloc; print what it allocated after iteration I",
    )
    parser.add_argument("--trace-frames", type=int, default=1, help="frames per traceback")
    parser.add_argument("overrides", nargs="*", help="pipeline overrides, e.g. ray.enabled=false")
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    with tempfile.TemporaryDirectory(prefix="rldag-soak-") as tmp:
        result = soak(
            args.iterations,
            args.max_minutes,
            Path(tmp) / "runs",
            args.inline,
            args.trace_from,
            args.trace_frames,
            tuple(args.overrides),
        )
    print(load_line("end"))
    if args.json:
        args.json.write_text(json.dumps(result))
    plot(result, args.png)
    done = result["samples"][-1]["iteration"] if result["samples"] else 0
    print(f"iterations sampled: {done} of {args.iterations} (exit {result['returncode']})")
    for who in ("driver", "workers"):
        figures = {
            k: growth_per_100(result["samples"], who, k) for k in ("rss_mb", "fds", "threads")
        }
        print(who, "growth per 100 iterations after warm-up:", json.dumps(figures))
        floor = floor_growth_per_100(result["samples"], who)
        print(f"{who} RSS floor (lowest of each {FLOOR * EVERY} iterations): {floor:+.2f} MB/100")
    last = result["samples"][-1]["rss_mb_by_process"] if result["samples"] else {}
    for role, growth in growth_by_process_per_100(result["samples"]).items():
        print(f"  {role}: {growth:+.2f} MB/100 (last {last.get(role, 0.0):.0f} MB)")
    times = result["iteration_s"][WARMUP:]
    if len(times) >= 20:
        half = len(times) // 2
        first, second = sum(times[:half]) / half, sum(times[half:]) / (len(times) - half)
        print(f"iteration time after warm-up: first half {first:.2f} s, second half {second:.2f} s")


if __name__ == "__main__":
    main()
