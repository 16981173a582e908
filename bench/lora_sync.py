"""LoRA on the weights edge: bytes and seconds of one policy update of a rollout engine, full
weights vs the adapters (which the engine merges into its base), in process (the colocated
edge) and through a checkpoint directory (what the weights edge does for rollout servers:
write it, the server reads it and loads it; HTTP left out). Interleaved rounds, medians.

    .venv/bin/python bench/lora_sync.py [--hidden 512] [--layers 6] [--rank 8] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from machine import describe, load_line
from weight_sync import build_model

from operators.model.lora_weights import nbytes
from operators.rollout.torch_engine import TorchEngine
from operators.rollout.weights import load_checkpoint, save_checkpoint
from operators.train.lora import LoraParams
from operators.train.policy_gradient import PolicyGradientTrainer
from operators.train.policy_gradient_params import PolicyGradientParams


def timed(fn: Callable[..., object], *args: object) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    tmp = Path(tempfile.mkdtemp())
    model = str(build_model(tmp / "model", args.hidden, args.layers))
    trainers = {
        "full weights": PolicyGradientTrainer(PolicyGradientParams(model)),
        f"LoRA rank {args.rank}": PolicyGradientTrainer(
            PolicyGradientParams(model, lora=LoraParams(rank=args.rank, alpha=2 * args.rank))
        ),
    }
    engines = {label: TorchEngine.from_pretrained(model) for label in trainers}  # own bases

    def in_process(trainer: PolicyGradientTrainer, engine: TorchEngine) -> None:
        engine.load_state_dict(trainer.export_weights())

    def via_disk(trainer: PolicyGradientTrainer, engine: TorchEngine) -> None:
        path = save_checkpoint(trainer.export_weights(), tmp / "push", like=model)
        engine.load_state_dict(load_checkpoint(path))

    paths = {"in process": in_process, "checkpoint dir": via_disk}
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds + 1):  # round 0 warms up (and keeps the engine's LoRA base)
        for label, trainer in trainers.items():
            for path, fn in paths.items():
                seconds = timed(fn, trainer, engines[label])
                samples.setdefault((label, path), []).append(seconds)
    print(load_line("end"))
    params = sum(p.numel() for p in engines[label].model.parameters())
    print(f"model: {params / 1e6:.1f}M parameters")
    for label, trainer in trainers.items():
        size = nbytes(trainer.export_weights())
        print(f"{label:14s} {size / 1e6:7.2f} MB on the edge")
        for path in paths:
            median = statistics.median(samples[(label, path)][1:])
            print(f"  {path:16s} {median * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
