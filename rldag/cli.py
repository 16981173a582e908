"""The `rldag` command: validate | plan | run a pipeline.yaml with key=value overrides;
`rldag sandbox FILE.py` runs one program the way a sandbox node does.

Exit codes: 0 ok, 1 the run failed, 2 bad input (nothing ran, nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from rldag.errors import InputError, RunError
from rldag.graph import Graph, build_graph
from rldag.spec import LoadedPipeline, load_pipeline

err_console = Console(stderr=True, soft_wrap=True)
console = Console(soft_wrap=True)


def _load(args: argparse.Namespace) -> tuple[LoadedPipeline, Graph]:
    loaded = load_pipeline(args.pipeline, args.overrides)
    return loaded, build_graph(loaded)


def cmd_validate(args: argparse.Namespace) -> int:
    loaded, graph = _load(args)
    edges = sum(len(n.inputs) + (n.weights_from is not None) for n in graph.nodes.values())
    console.print(f"[green]ok[/green] {args.pipeline}: {len(graph.nodes)} nodes, {edges} edges")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    loaded, graph = _load(args)
    spec = loaded.spec
    console.print(
        f"[bold]{spec.name}[/bold]: {len(graph.nodes)} nodes, {spec.iterations} iterations, "
        f"storage {spec.storage.uri}",
        highlight=False,
    )
    for i, (name, node) in enumerate(graph.nodes.items()):
        console.print(
            f"{i:>2} [bold]{name}[/bold]  kind={node.kind.value}  op={node.op.name}  "
            f"pool={node.pool.value}  {'stateful' if node.op.stateful else 'stateless'}",
            highlight=False,
        )
        ports = {p.name: p for p in node.op.ports}
        for port, upstream in node.inputs.items():
            needs = ", ".join(c.name for c in ports[port].columns)
            console.print(f"     in   {port} <- {upstream}  (needs {needs})", highlight=False)
        if node.weights_from:
            console.print(f"     in   weights <- {node.weights_from}[i-1]", markup=False)
        added = {c.name for c in node.op.adds}
        new = [f.name for f in node.output if f.name in added or not node.inputs]
        kept = len(node.output) - len(new)
        more = f"  (+ {kept} columns passed through)" if kept else ""
        console.print(f"     out  {', '.join(new)}{more}", highlight=False)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    _load(args)  # bad input fails here, before Prefect or any compute starts
    # Prefect's console handler would repeat every log and traceback; the run's logs still
    # reach the Prefect API/UI. --verbose shows them here too.
    if not args.verbose:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
    from flows.rl_loop import rldag_run
    from rldag.progress import RunProgress

    with RunProgress(console):
        try:
            rldag_run(args.pipeline, list(args.overrides))
        except RunError as err:
            err_console.print(f"[red]run failed:[/red] {err}", highlight=False, soft_wrap=True)
            return 1
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
        p.set_defaults(fn=fn)
        if name == "run":
            p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    box = sub.add_parser("sandbox", help="run one program in the sandbox; print the result JSON")
    box.add_argument("program", metavar="FILE.py")
    box.add_argument("--tests", help="tests file: assert source, JSON cases, MBPP/APPS shapes")
    box.add_argument("--timeout", type=float, default=5.0, help="wall and CPU seconds")
    box.add_argument("--memory", type=int, default=256, help="memory limit in MB")
    box.add_argument("--stdin", default="", help="text fed to the program's stdin")
    box.add_argument("--isolation", choices=("full", "none"), default="full")
    box.set_defaults(fn=cmd_sandbox)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except InputError as err:
        err_console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/yellow]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
