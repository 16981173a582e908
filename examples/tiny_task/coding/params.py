"""The build parameters of the code task, kept free of heavy imports.

The architecture and the sampling evaluation reuse the addition task's parameter types (with a
longer context and longer samples); the warm-up is plain cross-entropy, so it has its own type.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from examples.tiny_task.params import EvalParams, ModelParams

CODE_TASK = "code"
CODE_BUILDER_VERSION = 2  # bump when the code builder's artefacts change for the same params


@dataclass(frozen=True)
class CodeWarmupParams:
    """Length and optimiser of the supervised warm-up on the reference solutions."""

    steps: int = 300
    batch_size: int = 4  # problems per step (epochs of a seeded permutation)
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    seed: int = 0


def _model() -> ModelParams:
    return ModelParams(max_position_embeddings=256)


def _eval() -> EvalParams:
    return EvalParams(samples_per_problem=4, temperature=1.0, max_new_tokens=64, seed=0)


@dataclass(frozen=True)
class CodeTaskParams:
    """All parameters of one code-task build."""

    model: ModelParams = field(default_factory=_model)
    warmup: CodeWarmupParams = field(default_factory=CodeWarmupParams)
    eval: EvalParams = field(default_factory=_eval)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
