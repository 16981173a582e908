"""Weight sync train -> rollout: seconds of one `RayPools.sync_weights` (rldag's weights
edge: version check, export, load on the rollout worker), colocated (in-process copy inside
the hybrid worker) and split (through Ray's object store, and as a bucketed broadcast over
the weight group: `weights.transport`), vs. a raw in-process `state_dict()` copy of the
same model; and with LoRA on the trainer (`lora.rank`), where the edge carries only the
adapters and the rollout engine merges them into its base. Measured in interleaved rounds,
one of each per round (medians), so other work on the machine weighs on all alike.

    .venv/bin/python bench/weight_sync.py [--hidden 512] [--layers 6] [--rounds 10] [--rank 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from machine import describe, load_line
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples.tiny_task: the demo builders are not installed

from examples.tiny_task import build_tiny_task  # noqa: E402
from rldag.compute.ray_pools import RayPools, start_pools  # noqa: E402
from rldag.config.spec import load_pipeline  # noqa: E402
from rldag.graph.dag import Node, build_graph  # noqa: E402

EDGES = {  # label -> (weights.transport on split pools (None: colocated), LoRA)
    "rldag colocated (hybrid worker)": (None, False),
    "rldag split (object store)": ("object_store", False),
    "rldag split (broadcast group)": ("collective", False),
    "LoRA colocated": (None, True),
    "LoRA split (broadcast group)": ("collective", True),
}


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


def raw_copy_seconds(src: torch.nn.Module, dst: torch.nn.Module) -> float:
    """One `dst.load_state_dict(src.state_dict())` between two in-memory models."""
    start = time.perf_counter()
    dst.load_state_dict(src.state_dict())
    return time.perf_counter() - start


def weights_edge(
    model: Path, data: Path, transport: str | None, lora_rank: int
) -> tuple[RayPools, Node, Node]:
    """Pools for the default pipeline on `model` (LoRA of `lora_rank` on the trainer when
    > 0), their train and generate nodes, and a trainer one version ahead (its own weights
    loaded back as version 1)."""
    import ray

    overrides = [f"model.path={model}", f"nodes.prompts.params.path={data}", "ray.num_cpus=12"]
    if transport is not None:
        overrides += ["pools.colocate=[]", f"weights.transport={transport}"]
    if lora_rank:
        overrides += [f"nodes.train.params.lora.rank={lora_rank}"]
    loaded = load_pipeline(ROOT / "pipeline.yaml", overrides)
    graph = build_graph(loaded)
    runner = start_pools(loaded.spec, graph)
    assert isinstance(runner, RayPools)
    train, generate = graph.nodes["train"], graph.nodes["generate"]
    trainer = _worker(runner, train)
    ray.get(trainer.load_weights.remote(train, trainer.export_weights.remote(train), 1))
    return runner, train, generate


def _worker(runner: RayPools, node: Node):
    return runner.workers(runner.placement.group_of(node.name).name)[0]


def edge_bytes(runner: RayPools, train: Node) -> int:
    """Bytes of the tensors the trainer puts on the weights edge."""
    import ray

    wire = ray.get(_worker(runner, train).export_weights.remote(train))
    return sum(array.nbytes for _, array, _ in wire.values())


def sync_seconds(runner: RayPools, train: Node, generate: Node) -> float:
    """One sync of version 1 into a rollout engine set back to version 0 (its weights stay:
    an empty dict loads nothing)."""
    import ray

    ray.get(_worker(runner, generate).load_weights.remote(generate, {}, 0))
    version, seconds = runner.sync_weights(train, generate)
    assert version == 1 and seconds > 0
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank of the LoRA edges")
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    tmp = Path(tempfile.mkdtemp())
    model = build_model(tmp / "model", args.hidden, args.layers)
    data = ROOT / ".cache" / "tiny" / "train.parquet"
    src, dst = (AutoModelForCausalLM.from_pretrained(model) for _ in range(2))
    edges = {
        label: weights_edge(model, data, t, args.rank if lora else 0)
        for label, (t, lora) in EDGES.items()
    }
    sizes = {label: edge_bytes(runner, train) for label, (runner, train, _) in edges.items()}
    samples: dict[str, list[float]] = {"raw": [], **{label: [] for label in edges}}
    for _ in range(args.rounds + 1):  # round 0 warms up (and forms the broadcast group)
        samples["raw"].append(raw_copy_seconds(src, dst))
        for label, edge in edges.items():
            samples[label].append(sync_seconds(*edge))
    for runner, *_ in edges.values():
        runner.close()
    print(load_line("end"))
    median = {label: statistics.median(values[1:]) for label, values in samples.items()}
    params = sum(p.numel() for p in src.parameters())
    print(f"model: {params / 1e6:.1f}M parameters ({params * 4 / 1e6:.0f} MB fp32)")
    print(f"medians of {args.rounds} interleaved rounds")
    raw = median.pop("raw")
    print(f"{'raw state_dict copy (in-process)':34s} {raw * 1e3:8.1f} ms")
    for label, value in median.items():
        size = f"{sizes[label] / 1e6:7.2f} MB on the edge"
        print(f"{label:34s} {value * 1e3:8.1f} ms  ratio vs raw: {value / raw:5.2f}x  {size}")


if __name__ == "__main__":
    main()
