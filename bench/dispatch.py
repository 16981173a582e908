"""Dispatch overhead: a 100k-row rollout table driver -> N pool workers -> back through
rldag's real pools (a pass-through node that adds a column), vs. the raw `ray.put` +
`ray.get` of the same table.

    .venv/bin/python bench/dispatch.py [--rows 100000] [--workers 2] [--repeat 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray
import yaml
from machine import describe, load_line

from rldag.compute.ray_pools import RayPools, start_pools
from rldag.config.spec import NodeKind, load_pipeline
from rldag.graph.dag import Node, build_graph
from rldag.graph.operator import NodeContext, OperatorDef, Port
from rldag.graph.schema import col


def rollout_table(rows: int, n: int = 8) -> pa.Table:
    """A table shaped like a generate node's output (ids, logprobs, text)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 64, size=rows)
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    tokens = rng.integers(0, 32000, size=offsets[-1]).astype(np.int32)
    return pa.table(
        {
            "prompt_id": np.arange(rows) // n,
            "sample_idx": (np.arange(rows) % n).astype(np.int32),
            "response_ids": pa.ListArray.from_arrays(offsets, tokens),
            "response_logprobs": pa.ListArray.from_arrays(
                offsets, -rng.random(offsets[-1]).astype(np.float32)
            ),
            "reward": rng.random(rows).astype(np.float32),
        }
    )


def _add_score(_params: object):
    def run(inputs: dict, ctx: NodeContext) -> pa.Table:
        table = inputs["rows"]
        return table.append_column("score", pa.array(np.ones(table.num_rows, np.float32)))

    return run


ADD_SCORE = OperatorDef(
    name="add_score",
    kind=NodeKind.transform,
    factory=_add_score,
    ports=(Port("rows"),),
    adds=(col("score", pa.float32()),),
)


def pools_for(path: Path, workers: int) -> tuple[RayPools, Node]:
    """Real rldag pools: a source plus a pass-through node on an N-worker rollout pool."""
    doc = {
        "model": {"path": "unused"},
        "pools": {"colocate": [], "rollout": {"workers": workers, "cpus_per_worker": 0.5}},
        "nodes": {
            "rows": {
                "kind": "source",
                "op": "dataset",
                "params": {"path": str(path), "batch_size": 8},  # the file's 8 rows
            },
            "score": {
                "kind": "transform",
                "op": "__main__:ADD_SCORE",
                "pool": "rollout",
                "inputs": {"rows": "rows"},
            },
        },
    }
    spec_path = path.with_suffix(".yaml")
    spec_path.write_text(yaml.safe_dump(doc))
    loaded = load_pipeline(spec_path)
    graph = build_graph(loaded)
    return start_pools(loaded.spec, graph), graph.nodes["score"]


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    ray.init(num_cpus=max(2, args.workers), include_dashboard=False, logging_level="ERROR")
    table = rollout_table(args.rows)
    tmp = Path(tempfile.mkdtemp())
    pq.write_table(
        table.slice(0, 8).append_column("prompt", pa.array(["x"] * 8)), tmp / "rows.parquet"
    )
    pools, node = pools_for(tmp / "rows.parquet", args.workers)
    ctx = NodeContext("score", 0, 0, str(tmp))
    pools.run(node, {"rows": table.slice(0, 16)}, ctx)  # start the actors and operators

    def raw() -> None:
        out = ray.get(ray.put(table))
        assert out.num_rows == table.num_rows

    def dispatched() -> None:
        out = pools.run(node, {"rows": table}, ctx)
        assert out.num_rows == table.num_rows and out.column_names[-1] == "score"

    raw_s, ours_s = best(raw, args.repeat), best(dispatched, args.repeat)
    mb = table.nbytes / 1e6
    print(f"table: {args.rows} rows, {mb:.1f} MB; workers: {args.workers}")
    print(f"raw ray.put + ray.get:          {raw_s * 1e3:8.1f} ms")
    print(f"rldag pools (split by group, N workers, join): {ours_s * 1e3:8.1f} ms")
    print(load_line("end"))
    print(f"ratio vs raw put/get: {ours_s / raw_s:.2f}x")
    pools.close()


if __name__ == "__main__":
    main()
