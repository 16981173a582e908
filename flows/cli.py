"""The `rldag` command: validate | plan | run | deploy a pipeline.yaml with key=value
overrides; `rldag inspect RUN` shows a stored run; `rldag sandbox FILE.py` runs one program
the way a sandbox node does.

This is the composition root: the one module allowed to import every layer (the core
`rldag`, the Prefect `flows` and `tasks`, the `operators`); the layering contracts in
pyproject.toml say so.

Exit codes: 0 ok, 1 the run failed, 2 bad input (nothing ran, nothing written); a run
stopped at a safe point (resumable): 143 by SIGTERM, 130 by SIGINT or a cancel in Prefect.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from flows.api_outage import bound_api_requests
from rldag.compute.allocator import cap_malloc_arenas
from rldag.compute.cluster import placement_for
from rldag.config.errors import InputError, RunError, describe
from rldag.config.model_paths import hub_offline_by_default
from rldag.config.moved import MovedPathWarning
from rldag.config.overrides import blame_override, read_overrides_file
from rldag.config.spec import LoadedPipeline, load_pipeline
from rldag.console.plan import print_execution, print_nodes, print_placement
from rldag.console.progress import RunProgress
from rldag.engine import checkpoints
from rldag.engine.stop import CANCEL_EXIT, SIGNAL_EXIT, StopRequest
from rldag.graph.dag import Graph, build_graph
from rldag.storage.run_lock import RunLock
from rldag.storage.store import open_storage

err_console = Console(stderr=True, soft_wrap=True)
console = Console(soft_wrap=True)


def _load(args: argparse.Namespace) -> tuple[LoadedPipeline, Graph]:
    """The validated pipeline and its graph; a bad value an override gave is blamed on it."""
    try:
        loaded = load_pipeline(args.pipeline, args.overrides)
        return loaded, build_graph(loaded)
    except InputError as err:
        origins = getattr(args, "override_origins", {})
        raise blame_override(err, str(Path(args.pipeline)), args.overrides, origins) from None


def cmd_validate(args: argparse.Namespace) -> int:
    loaded, graph = _load(args)
    edges = sum(len(n.inputs) + (n.weights_from is not None) for n in graph.nodes.values())
    console.print(f"[green]ok[/green] {args.pipeline}: {len(graph.nodes)} nodes, {edges} edges")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.profile or args.costs or args.auto or args.apply:
        _load(args)  # bad input first, blamed on the override that gave it
        from rldag.console.auto_plan import PlanRequest, plan_command
        from rldag.planning.auto_plan import Limits

        limits = Limits(max_staleness=args.max_staleness, gpu_memory_gb=args.gpu_memory_gb)
        request = PlanRequest(
            args.profile, args.costs, args.auto, args.cluster, limits, args.apply, args.top
        )
        return plan_command(console, args.pipeline, list(args.overrides), request)
    loaded, graph = _load(args)
    placement = placement_for(loaded, graph)
    print_nodes(console, loaded, graph)
    print_placement(console, loaded, graph, placement)
    print_execution(console, loaded, graph)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Validate, start Prefect (and, from the flow, Ray and the pools' workers) and run, saying
    what it is doing from the start. From the start of Prefect's server on, SIGTERM and
    SIGINT stop the run at a safe point (rldag.engine.stop) and everything it started ends."""
    with RunProgress(console) as progress:
        progress.starting(f"validating {args.pipeline}")
        return _run(args, progress)


def _run(args: argparse.Namespace, progress: RunProgress) -> int:
    loaded, graph = _load(args)  # bad input fails here, before Prefect or any compute starts
    # so does a placement that cannot fit; the flow runs on this one (flows.prepared)
    placement = placement_for(loaded, graph) if loaded.spec.ray.enabled else None
    storage = open_storage(loaded.spec.storage, loaded.spec.faults)
    storage.check()  # an unreachable bucket too
    if args.resume and checkpoints.latest(storage, args.resume) is None:
        raise InputError(
            f"run {args.resume!r} under {storage.root} has no checkpoint to resume from",
            path="--resume",
        )
    lock = RunLock(storage, args.resume or "", loaded.spec.storage.lock_lease_s)
    if args.resume and (refusal := lock.refusal()):  # another live process runs it
        raise InputError(f"{refusal}; a second run of it is refused", path="--resume")
    # Prefect's console handler would repeat every log and traceback; the run's logs still
    # reach the Prefect API/UI. --verbose shows them here too.
    if not args.verbose:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
    bound_api_requests(loaded.spec.faults)  # before Prefect reads its settings
    from prefect.exceptions import CancelledRun, TerminationSignal

    from flows.embedded_server import start_embedded_server, stop_embedded_server
    from flows.prepared import Prepared, keep, take
    from flows.rl_loop import rldag_run

    api = os.environ.get("PREFECT_API_URL")
    progress.starting(f"using the Prefect server at {api}" if api else "starting Prefect's server")
    stop = StopRequest()
    keep(args.pipeline, args.overrides, Prepared(loaded, graph, placement, stop))
    try:
        with stop.on_signals():  # the flow takes them again from Prefect's engine
            start_embedded_server()  # unless PREFECT_API_URL names a server
            progress.starting("starting the flow run")
            rldag_run(args.pipeline, list(args.overrides), resume=args.resume)
    except InputError:  # found once the run started (its lock was just taken): exit 2
        raise
    except CancelledRun as err:  # stopped at a safe point: a signal, or a cancel in Prefect
        err_console.print(f"[yellow]stopped:[/yellow] {err}", highlight=False, soft_wrap=True)
        return stop.exit_code or CANCEL_EXIT
    except TerminationSignal:  # SIGTERM while Prefect's engine held it (its start or end)
        err_console.print("[yellow]stopped:[/yellow] SIGTERM while the flow run started or ended")
        return SIGNAL_EXIT[signal.SIGTERM]
    except RunError as err:
        err_console.print(f"[red]run failed:[/red] {err}", highlight=False, soft_wrap=True)
        return 1
    except Exception as err:  # a crash outside any node: say what, not a traceback
        err_console.print(
            f"[red]run failed:[/red] {describe(err)} (rerun with -v for details)",
            highlight=False,
        )
        return 1
    finally:
        take(args.pipeline, args.overrides)  # not left behind if the flow never started
        with stop.on_signals():  # a second signal does not leave the server behind
            stop_embedded_server()
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    """Register the pipeline as a Prefect deployment (process work pool, or --serve)."""
    loaded, _ = _load(args)
    open_storage(loaded.spec.storage, loaded.spec.faults).check()
    os.environ.setdefault("PREFECT_RUNNER_POLL_FREQUENCY", str(args.poll))
    from prefect.settings import PREFECT_API_URL

    from flows.deploy import FLOW_NAME, build_deployment, deploy_to_pool, serve_deployment
    from flows.pipeline_param import pipeline_parameter

    if not PREFECT_API_URL.value():
        message = (
            "no Prefect server to deploy to: start one and set PREFECT_API_URL "
            "(docs/guides/prefect.md)"
        )
        raise InputError(message, path="PREFECT_API_URL")
    name = args.name or loaded.spec.name
    parameters = {
        "pipeline": pipeline_parameter(args.pipeline, loaded, args.embed),
        "overrides": [] if args.embed else list(args.overrides),
    }
    description = f"rldag pipeline {loaded.spec.name!r} from {Path(args.pipeline).resolve()}"
    try:
        deployment = build_deployment(name, parameters, Path.cwd(), description)
    except ValueError as err:  # pydantic: a name Prefect does not accept
        raise InputError(str(err).splitlines()[0], path="--name") from None
    ref = f"{FLOW_NAME}/{name}"
    if args.serve:
        console.print(f"serving [bold]{ref}[/bold]; start a run: prefect deployment run {ref}")
        serve_deployment(deployment, args.poll)
        return 0
    deployment_id = deploy_to_pool(deployment, args.pool)
    console.print(f"deployment [bold]{ref}[/bold] ({deployment_id}) on pool {args.pool!r}")
    console.print(f"start a worker: prefect worker start --pool {args.pool}", highlight=False)
    console.print(f"start a run:    prefect deployment run {ref}", highlight=False)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Show a stored run: row counts, metrics, or sample rows of one node's table."""
    from rldag.console.inspect import print_episode, print_rows, print_run
    from rldag.storage.stored_run import StoredRun

    run = StoredRun.open(args.run, args.storage, endpoint_url=args.endpoint_url)
    if args.trajectory is not None:
        if not args.node:
            raise InputError("--trajectory needs --node (the multi-turn node)", path="--node")
        print_episode(console, run, args.node, args.iter, args.trajectory)
    elif args.node:
        print_rows(console, run, args.node, args.iter, args.rows, args.columns)
    else:
        print_run(console, run, args.metrics)
    return 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    """Run one program in the sandbox exactly as a sandbox node would; print JSON."""
    from operators.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, TestSpec

    def read(path: str, key: str) -> str:
        try:
            return Path(path).read_text()
        except OSError as err:
            raise InputError(f"cannot read {path}: {err.strerror}", path=key) from None

    program = read(args.program, "FILE")
    tests = TestSpec.parse(read(args.tests, "--tests")) if args.tests else None
    try:
        limits = SandboxLimits(
            wall_seconds=args.timeout, cpu_seconds=args.timeout, memory_mb=args.memory
        )
    except ValueError as err:
        raise InputError(str(err), path="--timeout/--memory") from None
    try:
        with Sandbox(limits, concurrency=1, isolation=args.isolation) as sandbox:
            result = sandbox.run(program, tests, stdin=args.stdin)
    except SandboxUnavailable as err:
        err_console.print(f"[red]sandbox unavailable:[/red] {err}", highlight=False)
        return 1
    print(json.dumps(result.to_dict(), indent=2))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a run's last checkpointed policy as a Hugging Face directory."""
    loaded, graph = _load(args)
    from rldag.engine.export import export_checkpoint

    for path in export_checkpoint(loaded, graph, args.run):
        console.print(f"exported {path}", highlight=False)
    return 0


def add_auto_plan_arguments(p: argparse.ArgumentParser) -> None:
    """`rldag plan` options of the automatic placement (docs/guides/auto-plan.md)."""
    p.add_argument(
        "--profile", type=int, default=0, metavar="N", help="measure costs: N iterations"
    )
    p.add_argument("--costs", default="", metavar="RUN", help="costs of a stored run, or a table")
    p.add_argument("--auto", action="store_true", help="rank placements by predicted samples/s")
    p.add_argument("--cluster", default="", help="plan for a declared cluster, e.g. 8x8gpu")
    p.add_argument("--max-staleness", type=int, default=2, help="the largest k to consider")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0, help="memory of one GPU")
    p.add_argument("--apply", default="", metavar="FILE", help="write the best as overrides")
    p.add_argument("--top", type=int, default=10, help="placements to show")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rldag", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, help_text in (
        ("validate", cmd_validate, "check spec, graph and every edge schema; runs nothing"),
        ("plan", cmd_plan, "show nodes in order with kind, operator, pool and columns"),
        ("run", cmd_run, "run the pipeline under Prefect"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("pipeline", help="path to pipeline.yaml")
        p.add_argument("overrides", nargs="*", help="OmegaConf dotlist overrides: key=value")
        p.add_argument(
            "-f",
            "--overrides-file",
            action="append",
            default=[],
            metavar="FILE",
            help="a YAML file of overrides (e.g. from plan --apply), before key=value ones",
        )
        p.set_defaults(fn=fn)
        if name == "plan":
            add_auto_plan_arguments(p)
        if name == "run":
            p.add_argument("--resume", metavar="RUN_ID", help="continue a run from its checkpoint")
            p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    exp = sub.add_parser("export", help="export a run's last checkpoint as an HF directory")
    exp.add_argument("pipeline", help="the run's pipeline.yaml (for storage and nodes)")
    exp.add_argument("run", metavar="RUN", help="run id under the pipeline's storage")
    exp.add_argument("overrides", nargs="*", help="OmegaConf dotlist overrides: key=value")
    exp.set_defaults(fn=cmd_export)
    dep = sub.add_parser("deploy", help="register the pipeline as a Prefect deployment")
    dep.add_argument("pipeline", help="path to pipeline.yaml")
    dep.add_argument("overrides", nargs="*", help="OmegaConf dotlist overrides: key=value")
    dep.add_argument("--name", help="deployment name (default: the pipeline's name)")
    dep.add_argument("--pool", default="rldag", help="process work pool (created if missing)")
    dep.add_argument("--serve", action="store_true", help="execute runs in this process")
    dep.add_argument("--embed", action="store_true", help="deploy the resolved YAML text")
    dep.add_argument("--poll", type=float, default=2.0, help="--serve: seconds between polls")
    dep.set_defaults(fn=cmd_deploy)
    ins = sub.add_parser("inspect", help="show a stored run: rows, metrics, sample rows")
    ins.add_argument("run", metavar="RUN", help="run id under --storage, or the run's URI")
    ins.add_argument("--storage", default="file://./runs", help="storage root of run ids")
    ins.add_argument("--endpoint-url", help="S3-compatible endpoint (default AWS_ENDPOINT_URL)")
    ins.add_argument("--node", help="show sample rows of this node's table")
    ins.add_argument("--iter", type=int, help="iteration of --node (default: the last)")
    ins.add_argument("--rows", type=int, default=5, help="rows to show with --node")
    ins.add_argument("--columns", default="", help="comma-separated columns to show")
    ins.add_argument("--metrics", default="", help='metric keys to show, comma-separated, "all"')
    ins.add_argument(
        "--trajectory", type=int, metavar="K", help="with --node: row K's episode, turn by turn"
    )
    ins.set_defaults(fn=cmd_inspect)
    box = sub.add_parser("sandbox", help="run one program in the sandbox; print the result JSON")
    box.add_argument("program", metavar="FILE.py")
    box.add_argument("--tests", help="tests file: assert source, JSON cases, MBPP/APPS shapes")
    box.add_argument("--timeout", type=float, default=5.0, help="wall and CPU seconds")
    box.add_argument("--memory", type=int, default=256, help="memory limit in MB")
    box.add_argument("--stdin", default="", help="text fed to the program's stdin")
    box.add_argument("--isolation", choices=("full", "none"), default="full")
    box.set_defaults(fn=cmd_sandbox)
    return parser


# Commands that only read: their process ends without C++ static destructors (below).
READ_ONLY = ("validate", "plan", "inspect")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (`argv`, default sys.argv) -> exit code. Run as the `rldag` process
    (no `argv`), a read-only command then ends the process itself: pyarrow's thread pools
    abort a share of exits in their static destructors (``terminate called without an active
    exception``, exit 134) after everything was printed."""
    code = _main(argv)
    if argv is None and sys.argv[1:2] and sys.argv[1] in READ_ONLY:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _print_moved_paths() -> None:
    """A module path that moved (in a pipeline or a plugin) prints as one warning line naming
    the new path; other warnings print as Python prints them."""
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if not issubclass(category, MovedPathWarning):
            default(message, category, filename, lineno, file, line)
            return
        text = f"[yellow]warning:[/yellow] {escape(str(message))}"
        err_console.print(text, highlight=False, soft_wrap=True)

    warnings.showwarning = show


def _main(argv: Sequence[str] | None) -> int:
    _print_moved_paths()
    cap_malloc_arenas()  # before the threads a run starts (rldag/compute/allocator.py)
    hub_offline_by_default()  # a missing model fails at once, not after minutes of retries
    args = build_parser().parse_args(argv)
    try:
        if hasattr(args, "overrides"):  # commands over a pipeline: -f files, then key=value
            files = getattr(args, "overrides_file", [])
            from_files = {
                item: f"overrides file {f}" for f in files for item in read_overrides_file(f)
            }
            args.override_origins = from_files  # whom a bad value is blamed on
            args.overrides = list(from_files) + list(args.overrides)
        return args.fn(args)
    except InputError as err:
        message = escape(str(err))  # "[a, b]" in a message is text, not rich markup
        err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/yellow]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
