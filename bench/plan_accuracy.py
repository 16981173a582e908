"""Does the simulator predict what runs measure? For the default pipeline (with the heavy
environment of bench/async_vs_sync.py) and the code-sandbox pipeline: one profiling run
(`rldag plan --profile`: stages alone) gives the cost model; then, back to back, each
placement / staleness setting is simulated from it and run, and the steady samples/s of both
are printed as a markdown table with the error.

    .venv/bin/python bench/plan_accuracy.py [--repeats 3] [--only default|code] [--record F]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.slow_env, referenced by the pipeline as module:function

HEAVY_ENV = (  # as bench/async_vs_sync.py: 16 prompts x 8, long-tailed answers, slow env
    "nodes.prompts.params.batch_size=16",
    "nodes.env.kind=transform",
    "nodes.env.op=bench.slow_env:SLOW_ENV",
    "nodes.env.inputs.rollouts=generate",
    "nodes.score.inputs.rollouts=env",
    "nodes.generate.params.max_new_tokens=24",
    "nodes.generate.params.temperature=1.3",
)
WORKLOADS = {
    "default": ("pipeline.yaml", HEAVY_ENV, 16),
    "code": ("examples/code_sandbox.yaml", ("nodes.execute.params.concurrency=2",), 2),
}
SPLIT = "pools.colocate=[]"


def settings(chunk: int) -> dict[str, tuple[str, ...]]:
    """Placement / staleness settings, by label."""
    stream = f"async.chunk_groups={chunk}"
    return {
        "colocated, k=0, whole tables": ("async.chunk_groups=0",),
        "colocated, k=0, streaming": (stream,),
        "split, k=0, streaming": (SPLIT, stream),
        "split, k=1": (SPLIT, stream, "async.max_staleness=1"),
        "split, k=2": (SPLIT, stream, "async.max_staleness=2"),
    }


def measured_rate(path: Path, overrides: list[str]) -> float:
    """Steady samples/s of a run, from the wall-clock ends of its iterations (as the
    simulator counts them: from the end of iteration STEADY_SKIP - 1 on)."""
    from rldag.config.spec import load_pipeline
    from rldag.graph.dag import build_graph
    from rldag.planning.profiling import timed_inline_run
    from rldag.planning.simulator import STEADY_SKIP
    from rldag.report.reward_curve import store_reward_curve

    loaded = load_pipeline(path, overrides)
    graph = build_graph(loaded)
    run, ends = timed_inline_run(loaded, graph, on_close=(store_reward_curve,))
    train = next(n for n in graph.order if graph.nodes[n].kind == "train")
    batch = next(iter(graph.nodes[train].inputs.values()))
    samples = run.storage.table_rows(f"{run.run_id}/iter=0/{batch}.parquet")
    return samples * (len(ends) - STEADY_SKIP) / (ends[-1] - ends[STEADY_SKIP - 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=16)
    parser.add_argument("--profile", type=int, default=8, help="profiling iterations")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over all settings")
    parser.add_argument("--only", choices=sorted(WORKLOADS))
    parser.add_argument("--record", help="JSON file of earlier rounds to add to (and update)")
    args = parser.parse_args()
    record = json.loads(Path(args.record).read_text()) if args.record else {}
    print(describe())
    print(load_line("start"), flush=True)
    import pyarrow as pa
    import ray

    from rldag.config.spec import load_pipeline
    from rldag.graph.dag import build_graph
    from rldag.planning.auto_plan import sim_plan
    from rldag.planning.costs import CostModel
    from rldag.planning.profiling import profile
    from rldag.planning.simulator import simulate
    from rldag.report.reward_curve import store_reward_curve

    if args.repeats:  # --repeats 0 --record F: only the table of the recorded rounds
        ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING")
    rows = []
    for name, (file, extra, chunk) in WORKLOADS.items():
        if args.only and name != args.only:
            continue
        path = ROOT / file
        with tempfile.TemporaryDirectory() as out:
            base = [f"storage.uri={out}", "checkpoint.export_hf=false", *extra]
            cases = {
                label: [*base, *overrides, f"iterations={args.iterations}"]
                for label, overrides in settings(chunk).items()
            }
            seen = record.setdefault(name, {"models": [], "measured": {}})
            measured = {label: seen["measured"].setdefault(label, []) for label in cases}
            for _ in range(args.repeats):  # round robin: every setting sees the same load
                seen["models"].append(
                    profile(str(path), base, args.profile, on_close=(store_reward_curve,))
                    .costs.to_table()
                    .to_pylist()
                )
                for label, overrides in cases.items():
                    measured[label].append(measured_rate(path, overrides))
                if args.record:
                    Path(args.record).write_text(json.dumps(record, indent=1))
            models = [CostModel.from_table(pa.Table.from_pylist(m)) for m in seen["models"]]
            plans = {}
            for label, overrides in cases.items():
                loaded = load_pipeline(path, overrides)
                graph = build_graph(loaded)
                plans[label] = (graph, sim_plan(loaded, graph))
            graph, plan = plans[next(iter(plans))]  # the profile's own setting
            # the least loaded profile: the one whose stages ran fastest
            model = max(
                models, key=lambda m: simulate(graph, m, plan, args.iterations).samples_per_s
            )
            for label, (graph, plan) in plans.items():
                predicted = simulate(graph, model, plan, args.iterations).samples_per_s
                best = max(measured[label])
                rows.append((name, label, predicted, best, min(measured[label])))
                print(f"{name} | {label} | {predicted:.0f} | {measured[label]}", flush=True)
    print(load_line("end"))
    print(
        "| pipeline | setting | predicted samples/s | measured (best of runs) | slowest run "
        "| error |"
    )
    print("|---|---|---|---|---|---|")
    for name, label, predicted, best, worst in rows:
        print(
            f"| {name} | {label} | {predicted:.0f} | {best:.0f} | {worst:.0f} "
            f"| {predicted / best - 1:+.0%} |"
        )


if __name__ == "__main__":
    main()
