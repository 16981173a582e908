"""Weight sync train -> rollout: seconds per iteration of rldag's weights edge, colocated
(in-process copy inside the hybrid worker) and split (object store broadcast to the rollout
worker), vs. a raw in-process `state_dict()` copy of the same model, in one run.

    .venv/bin/python bench/weight_sync.py [--hidden 512] [--layers 6] [--iterations 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

from operators.tiny_task import build_tiny_task
from rldag.graph import build_graph
from rldag.run import Run
from rldag.spec import load_pipeline

ROOT = Path(__file__).resolve().parents[1]


def build_model(out: Path, hidden: int, layers: int) -> Path:
    """A Qwen2 of the given size with the tiny task's tokenizer (random weights)."""
    tiny = build_tiny_task(ROOT / ".cache" / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(tiny / "model")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def raw_copy_seconds(path: Path, repeat: int = 5) -> tuple[float, int]:
    """Best time of `dst.load_state_dict(src.state_dict())` between two in-memory copies."""
    src, dst = (AutoModelForCausalLM.from_pretrained(path) for _ in range(2))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        dst.load_state_dict(src.state_dict())
        best = min(best, time.perf_counter() - start)
    return best, sum(p.numel() for p in src.parameters())


def rldag_sync_seconds(
    model: Path, data: Path, storage: Path, iterations: int, colocate: bool
) -> float:
    overrides = [
        f"model.path={model}",
        f"nodes.prompts.params.path={data}",
        f"storage.uri={storage}",
        f"iterations={iterations}",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=2",
        "checkpoint.export_hf=false",
    ]
    if not colocate:
        overrides.append("pools.colocate=[]")
    loaded = load_pipeline(ROOT / "pipeline.yaml", overrides)
    run = Run.start(loaded, build_graph(loaded))
    run.run_inline(iterations)
    metrics = pq.read_table(Path(run.uri) / "metrics.parquet").to_pylist()
    return statistics.median(m["timing_s/weight_sync"] for m in metrics[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model = build_model(tmp / "model", args.hidden, args.layers)
    data = ROOT / ".cache" / "tiny" / "train.parquet"
    raw, params = raw_copy_seconds(model)
    colocated = rldag_sync_seconds(model, data, tmp / "runs", args.iterations, colocate=True)
    split = rldag_sync_seconds(model, data, tmp / "runs", args.iterations, colocate=False)
    print(f"model: {params / 1e6:.1f}M parameters ({params * 4 / 1e6:.0f} MB fp32)")
    print(f"raw state_dict copy (in-process):     {raw * 1e3:8.1f} ms")
    print(
        f"rldag colocated (hybrid worker):      {colocated * 1e3:8.1f} ms  "
        f"ratio vs raw: {colocated / raw:.2f}x"
    )
    print(
        f"rldag split (object store broadcast): {split * 1e3:8.1f} ms  "
        f"ratio vs raw: {split / raw:.2f}x"
    )


if __name__ == "__main__":
    main()
