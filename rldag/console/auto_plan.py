"""What `rldag plan --profile/--costs/--auto/--apply` prints and writes: the cost table, the
ranked placements, and the chosen one as an overrides file for `rldag run -f FILE`."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.csv
import pyarrow.parquet as pq
import yaml
from rich.console import Console
from rich.table import Table

from rldag.compute.cluster import cluster_for
from rldag.compute.placement import Cluster
from rldag.config.errors import InputError
from rldag.config.spec import LoadedPipeline, load_pipeline
from rldag.graph.dag import Graph, build_graph
from rldag.planning.auto_plan import Limits, Ranked, Search, parse_cluster, search
from rldag.planning.costs import COSTS_FILE, CostModel


@dataclass(frozen=True)
class PlanRequest:
    """The `rldag plan` options beyond the plain placement view."""

    profile: int = 0  # run this many iterations to measure costs
    costs: str = ""  # a stored run (id or URI) or a .parquet/.csv cost table
    auto: bool = False
    cluster: str = ""  # a declared cluster (e.g. 8x8gpu); default: ray.address or this machine
    limits: Limits = Limits()
    apply: str = ""  # write the best placement here as an overrides file
    top: int = 10


def load_costs(source: str, loaded: LoadedPipeline) -> CostModel:
    """A cost table file, a stored run's costs.parquet, or one fitted from a stored run."""
    path = Path(source)
    if path.suffix in (".parquet", ".csv"):
        if not path.is_file():
            raise InputError(f"cost table not found: {path}", path="--costs")
        table = pq.read_table(path) if path.suffix == ".parquet" else pyarrow.csv.read_csv(path)
        return CostModel.from_table(table, str(path))
    from rldag.planning.profiling import costs_of_stored_run
    from rldag.storage.stored_run import StoredRun

    run = StoredRun.open(source, loaded.spec.storage.uri, loaded.spec.storage.endpoint_url)
    if run.storage.exists(f"{run.run_id}/{COSTS_FILE}"):
        return CostModel.load(run.storage, run.run_id)
    with tempfile.TemporaryDirectory() as tmp:  # the run's own pipeline, as it ran
        stored = Path(tmp) / "pipeline.yaml"
        stored.write_text(run.storage.read_text(f"{run.run_id}/pipeline.yaml"))
        ran = load_pipeline(stored)
        return costs_of_stored_run(ran, build_graph(ran), run.storage, run.run_id)


def print_costs(console: Console, costs: CostModel, where: str) -> None:
    table = Table(title=f"cost model ({where})", title_justify="left")
    columns = ("node", "kind", "pool", "fixed s", "s/row", "s/token", "rows", "tokens")
    for col in (*columns, "workers", "s/call"):
        table.add_column(col, justify="left" if col in ("node", "kind", "pool") else "right")
    for c in costs.nodes.values():
        table.add_row(
            c.node,
            c.kind,
            c.pool,
            f"{c.per_row_s:.3g}",
            f"{c.per_token_s:.3g}",
            f"{c.rows:g}",
            f"{c.tokens:g}",
            str(c.workers),
            f"{c.seconds():.4f}",
        )
    console.print(table)
    sync = ", ".join(f"{m} {v * costs.params:.4f} s" for m, v in costs.sync_per_param_s.items())
    console.print(
        f"weight sync ({costs.params:,} parameters): {sync or 'none'}; driver "
        f"{costs.driver_s:.4f} s per iteration; {costs.samples:g} samples in "
        f"{costs.groups:g} groups per iteration",
        highlight=False,
    )


def print_ranked(console: Console, found: Search, cluster: Cluster, top: int) -> None:
    table = Table(title=f"placements on {_summary(cluster)}", title_justify="left")
    for col in (
        "#",
        "colocate",
        "workers",
        "k",
        "samples/s",
        "idle per pool",
        "staleness",
        "sync s",
        "GB/worker",
    ):
        table.add_column(col, justify="right" if col in ("#", "k", "samples/s") else "left")
    for i, r in enumerate(found.ranked[:top], 1):
        c, res = r.candidate, r.result
        lag = sum(k * v for k, v in res.staleness.items())
        table.add_row(
            str(i),
            c.describe_colocate(),
            ", ".join(f"{p}={w}" for p, w in c.workers),
            str(c.max_staleness),
            f"{res.samples_per_s:,.1f}",
            ", ".join(f"{g} {v:.0%}" for g, v in res.idle.items()),
            f"mean {lag:.2f}, max {max(res.staleness)}",
            f"{res.weight_sync_s:.3g}",
            ", ".join(f"{p} {v:.2g}" for p, v in r.memory_gb.items()),
        )
    console.print(table)
    console.print(
        f"{len(found.ranked)} placements fit, {len(found.refused)} refused", highlight=False
    )


def _summary(cluster: Cluster) -> str:
    """`source (N x C CPU, G GPU)` when the machines are alike, else every machine."""
    kinds = {(n.cpus, n.gpus) for n in cluster.nodes}
    if len(cluster.nodes) > 1 and len(kinds) == 1:
        cpus, gpus = kinds.pop()
        return f"{cluster.source} ({len(cluster.nodes)} x {cpus:g} CPU, {gpus:g} GPU)"
    return cluster.describe()


def write_overrides(path: str, best: Ranked, pipeline: str) -> None:
    """The chosen placement as a YAML overrides file (nested keys), with its prediction."""
    data: dict = {}
    for item in best.candidate.overrides():
        key, _, value = item.partition("=")
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    header = (
        f"# rldag plan --auto for {pipeline}: predicted {best.result.samples_per_s:,.1f} "
        f"samples/s\n# use it: rldag run {pipeline} -f {path}\n"
    )
    Path(path).write_text(header + yaml.safe_dump(data, sort_keys=False))


def plan_command(console: Console, pipeline: str, overrides: list[str], req: PlanRequest) -> int:
    """`rldag plan` with --profile, --costs, --auto or --apply."""
    loaded = load_pipeline(pipeline, overrides)
    build_graph(loaded)  # bad input fails here, before anything is measured
    cluster = parse_cluster(req.cluster) if req.cluster else cluster_for(loaded)
    if req.profile:
        from rldag.planning.profiling import profile
        from rldag.report.reward_curve import store_reward_curve

        measured = profile(pipeline, overrides, req.profile, on_close=(store_reward_curve,))
        costs, where = measured.costs, f"{measured.uri}/{COSTS_FILE}"
    elif req.costs:
        costs, where = load_costs(req.costs, loaded), req.costs
    else:
        raise InputError("--auto needs a cost model: --profile N or --costs RUN", path="--costs")
    print_costs(console, costs, where)
    if not (req.auto or req.apply):
        return 0

    def load(extra: list[str]) -> tuple[LoadedPipeline, Graph]:
        candidate = load_pipeline(pipeline, [*overrides, *extra])
        return candidate, build_graph(candidate)

    limits = req.limits
    if not req.cluster and not limits.host_memory_gb:  # this machine: its memory is known
        limits = replace(
            limits, host_memory_gb=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
        )
    found = search(load, costs, cluster, limits)
    if not found.ranked:
        reasons = sorted({reason for _, reason in found.refused})
        raise InputError(
            f"no placement of {pipeline} fits {cluster.describe()}: " + "; ".join(reasons[:3]),
            path="--cluster" if req.cluster else "pools",
        )
    print_ranked(console, found, cluster, req.top)
    if req.apply:
        best = found.ranked[0]
        load(best.candidate.overrides())  # the file passes the same checks as `rldag run`
        write_overrides(req.apply, best, pipeline)
        console.print(f"wrote {req.apply}: rldag run {pipeline} -f {req.apply}", highlight=False)
    return 0
