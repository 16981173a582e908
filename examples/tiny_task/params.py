"""The build parameters of the tiny task, kept free of heavy imports.

Everything that changes the built artefacts lives here; ``build.json`` records these values and
the cache is hit only when they (and the builder version) match exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelParams:
    """Architecture and init seed of the tiny Qwen2 (the vocabulary comes from the tokenizer)."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_position_embeddings: int = 64
    init_seed: int = 0


@dataclass(frozen=True)
class WarmupParams:
    """Length, optimiser and target-smoothing settings of the supervised warm-up."""

    steps: int = 200
    learning_rate: float = 2e-3
    weight_decay: float = 0.0
    digit_smoothing: float = 0.75
    seed: int = 0


@dataclass(frozen=True)
class EvalParams:
    """How the warmed-up policy's starting accuracy is measured (recorded in ``build.json``)."""

    samples_per_problem: int = 16
    temperature: float = 1.0
    max_new_tokens: int = 4
    seed: int = 0


@dataclass(frozen=True)
class TinyTaskParams:
    """All parameters of one tiny-task build."""

    model: ModelParams = field(default_factory=ModelParams)
    warmup: WarmupParams = field(default_factory=WarmupParams)
    eval: EvalParams = field(default_factory=EvalParams)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
