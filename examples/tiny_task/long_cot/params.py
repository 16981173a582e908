"""The build parameters of the long chain-of-thought task, kept free of heavy imports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from examples.tiny_task.params import EvalParams, ModelParams

LONG_COT_TASK = "long_cot"
LONG_COT_BUILDER_VERSION = 1  # bump when the builder's artefacts change for the same params


@dataclass(frozen=True)
class LongCotDataParams:
    """How many problems each split holds and how their sizes (digits per operand) are drawn:
    ``short_share`` of them uniformly from 1..``short_max``, the rest uniformly from
    ``short_max + 1``..``max_digits`` (the tail)."""

    train_problems: int = 1024
    test_problems: int = 256
    short_max: int = 4
    short_share: float = 0.8
    max_digits: int = 24
    seed: int = 0


@dataclass(frozen=True)
class LongCotWarmupParams:
    """The supervised warm-up: short problems only (1..``max_digits`` digits), drawn fresh
    each step from ``seed``."""

    steps: int = 300
    batch_size: int = 32
    max_digits: int = 4
    learning_rate: float = 1e-3
    seed: int = 0


def _model() -> ModelParams:
    return ModelParams(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=320,
    )


def _eval() -> EvalParams:
    return EvalParams(samples_per_problem=1, temperature=1.0, max_new_tokens=256, seed=0)


@dataclass(frozen=True)
class LongCotTaskParams:
    """All parameters of one long-CoT build."""

    data: LongCotDataParams = field(default_factory=LongCotDataParams)
    model: ModelParams = field(default_factory=_model)
    warmup: LongCotWarmupParams = field(default_factory=LongCotWarmupParams)
    eval: EvalParams = field(default_factory=_eval)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
