"""`bench/engine_vs_hf.py --profile`: where the torch engine's time per generated token goes,
by part (matmuls, attention, KV writes, other layer ops, sampling, prefill, bookkeeping),
measured by wrapping the functions that do each part."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from pathlib import Path

from engine_vs_hf import Scenario, load_model, run_ours

from operators.rollout import TorchEngine


class _Clock:
    """Seconds spent in named parts of our engine, by wrapping the functions that do them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.inside: str | None = None  # the outer part now running (decode or prefill)

    def wrap(self, owner, name: str, part: str, outer: bool = False) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            if not outer and self.inside != "decode":  # a matmul of a prefill: the prefill's
                return inner(*args, **kwargs)
            if outer:
                self.inside = part
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
                if outer:
                    self.inside = None

        setattr(owner, name, timed)


def breakdown(scenario: Scenario, model_dir: Path, repeats: int) -> dict[str, dict[str, float]]:
    """Microseconds per generated token in each part of our engine (the fastest of ``repeats``
    timed runs after a warm-up), with the total, with matmuls through the default BLAS
    (``F.linear``: the engine before oneDNN) and as the engine runs them, alternating; by that
    label. ``other layer ops``: the decode's norms, RoPE, embedding and residual adds;
    ``bookkeeping``: the batcher's per-step work outside the model and the sampler."""
    from operators.model import cpu_linear
    from operators.rollout import batcher as batcher_module
    from operators.rollout import llama_decoder
    from operators.rollout.kv_cache import SlotKVCache

    engine = TorchEngine(load_model(scenario, model_dir))
    run_ours(engine, scenario, seed=0)
    decoder, batcher = engine.batcher.decoder, engine.batcher
    saved = (llama_decoder.linear, llama_decoder._decode_attention, SlotKVCache.store,
             batcher_module.sample_rows)  # fmt: skip
    best: dict[str, dict[str, float]] = {"F.linear": {}, "engine": {}}
    onednn = cpu_linear._ONEDNN
    for r, label in itertools.product(range(repeats), best):
        cpu_linear._ONEDNN = onednn and label == "engine"
        clock = _Clock()
        try:
            clock.wrap(decoder, "decode", "decode", outer=True)
            clock.wrap(decoder, "prefill", "prefill", outer=True)
            clock.wrap(decoder, "extend", "prefill", outer=True)
            clock.wrap(llama_decoder, "linear", "matmuls")
            clock.wrap(llama_decoder, "_decode_attention", "attention")
            clock.wrap(SlotKVCache, "store", "KV writes")
            clock.wrap(batcher_module, "sample_rows", "sampling")
            batcher_module.sample_rows = _always(batcher_module.sample_rows, clock)
            clock.wrap(batcher, "step", "step", outer=True)
            start = time.perf_counter()
            tokens = run_ours(engine, scenario, seed=1 + r)
            total = time.perf_counter() - start
        finally:
            for owner in (decoder, batcher):  # drop the instance wrappers
                for name in ("decode", "prefill", "extend", "step"):
                    owner.__dict__.pop(name, None)
            llama_decoder.linear, llama_decoder._decode_attention = saved[0], saved[1]
            SlotKVCache.store, batcher_module.sample_rows = saved[2], saved[3]
            cpu_linear._ONEDNN = onednn
        t = clock.seconds
        parts = {
            "matmuls": t["matmuls"],
            "attention": t["attention"],
            "KV writes": t["KV writes"],
            "other layer ops": t["decode"] - t["matmuls"] - t["attention"] - t["KV writes"],
            "sampling": t["sampling"],
            "prefill": t["prefill"],
            "bookkeeping": total - t["decode"] - t["sampling"] - t["prefill"],
        }
        out = {name: 1e6 * seconds / tokens for name, seconds in parts.items()}
        out["total"] = 1e6 * total / tokens
        if not best[label] or out["total"] < best[label]["total"]:
            best[label] = out
    return best


def _always(sample, clock: _Clock):
    """``sample_rows`` timed wherever it runs (admission and decode alike)."""

    def timed(*args, **kwargs):
        outer, clock.inside = clock.inside, "decode"
        try:
            return sample(*args, **kwargs)
        finally:
            clock.inside = outer

    return timed


def print_breakdown(name: str, modes: dict[str, dict[str, float]], hf_us: float) -> None:
    print(f"  {name}: HF generate {hf_us:.2f} us per token (its best run)")
    for label, parts in modes.items():
        total = parts["total"]
        cells = "  ".join(
            f"{k} {v:.2f} ({100 * v / total:.0f}%)" for k, v in parts.items() if k != "total"
        )
        print(f"    matmuls via {label:<8} total {total:6.2f} us/token: {cells}", flush=True)
