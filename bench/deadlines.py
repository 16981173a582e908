"""A whole run whose S3 endpoint goes silent mid-run (a real S3-protocol server behind a proxy
that accepts connections and never answers, from the end of iteration 0): the run must stop
within its bound with exit 1's error naming the node and the object, and a `--resume` (the
server answering again) must complete it with the rows of an undisturbed run. The fast
subset of the deadline cases is tests/e2e/test_deadlines.py; this is the one that needs whole
runs (three, ~10 s each here), too slow for CI.

    python bench/deadlines.py [--timeout 2]

Prints the case's bound and measured seconds, the error and PASS/FAIL per check; exit 0
when every check held.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support, scripts, examples: not installed
from examples.tiny_task import build_tiny_task  # noqa: E402
from rldag.config.errors import RunError  # noqa: E402
from rldag.engine import checkpoints  # noqa: E402
from rldag.engine.driver import InlineLauncher, drive  # noqa: E402
from rldag.engine.events import IterationFinished, add_listener  # noqa: E402
from rldag.storage.store import MIN_WRITE_BYTES_PER_S, S3_ATTEMPTS, S3_BACKOFF_S  # noqa: E402
from scripts.compare_runs import compare  # noqa: E402
from tests.support.black_hole import BlackHoleProxy  # noqa: E402
from tests.support.runs import drive_inline, small_default, start_run  # noqa: E402
from tests.support.s3 import CREDENTIALS  # noqa: E402

ITERATIONS = 3
STEP_S = 10.0  # the bound also allows the step in progress when the endpoint went silent
# storage calls that wait out their deadline once the endpoint is silent: the one that finds
# it, and one already in flight in another thread (an edge table's writer, the lock's
# heartbeat); the calls after them fail at once (rldag.storage.store.Storage._naming)
CALLS = 2


def _overrides(tiny: Path, uri: str, *extra: str) -> list[str]:
    return [*small_default(tiny, uri, ITERATIONS), "ray.enabled=false", *extra]


def _silenced_run(tiny: Path, uri: str, proxy: BlackHoleProxy, timeout_s: float) -> tuple:
    """A run through `proxy`, silenced once iteration 0 is stored: (its run id, the seconds
    from the silence to its error, the error)."""
    extra = (f"storage.endpoint_url={proxy.url}", f"faults.storage_timeout_s={timeout_s:g}")
    run = start_run(ROOT / "pipeline.yaml", *_overrides(tiny, uri, *extra))
    silenced: list[float] = []

    def silence(event: object) -> None:
        if isinstance(event, IterationFinished) and event.iteration == 0:
            proxy.silence()
            silenced.append(time.monotonic())

    remove = add_listener(silence)
    try:
        drive_inline(run)
        return run.run_id, float("nan"), ""
    except RunError as err:
        return run.run_id, time.monotonic() - silenced[0], str(err)
    finally:
        remove()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=2.0, help="faults.storage_timeout_s")
    args = parser.parse_args()
    from moto.server import ThreadedMotoServer
    from s3fs import S3FileSystem

    print(describe(), load_line("start"), sep="\n")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.update(CREDENTIALS)
    tiny = build_tiny_task(ROOT / ".cache" / "tiny")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    direct, uri = f"http://{host}:{port}", "s3://deadlines/runs"
    S3FileSystem(endpoint_url=direct, skip_instance_cache=True).mkdir("deadlines")
    proxy = BlackHoleProxy((host, port))
    with tempfile.TemporaryDirectory(prefix="rldag-deadlines-") as tmp:
        pipeline = ROOT / "pipeline.yaml"
        reference = drive_inline(start_run(pipeline, *_overrides(tiny, f"{tmp}/reference")))
        run_id, seconds, error = _silenced_run(tiny, uri, proxy, args.timeout)
        proxy.close()
        again = _overrides(tiny, uri, f"storage.endpoint_url={direct}")  # answering again
        resumed = start_run(pipeline, *again, run_id=run_id)
        drive(resumed, InlineLauncher(resumed), checkpoints.resume(resumed))
        with resumed.storage.fetch_dir(run_id) as local:
            differences = compare(Path(local), reference.run_dir)
    server.stop()
    deadline = S3_ATTEMPTS * args.timeout + S3_BACKOFF_S + 1e6 / MIN_WRITE_BYTES_PER_S
    limit = CALLS * deadline + STEP_S
    print(f"\ncase: S3 endpoint silent mid-run; bound {limit:.1f} s ({CALLS} storage calls of")
    print(f"  {deadline:.1f} s + a step of {STEP_S:g} s), measured {seconds:.1f} s")
    print(f"error: {error}", load_line("end"), sep="\n")
    checks = {
        "ended within its bound": seconds <= limit,
        "exit 1's error names the node and the object": "node '" in error and f"{uri}/" in error,
        "resumed to the undisturbed rows": not differences,
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    for line in differences[:10]:
        print(f"  {line}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
