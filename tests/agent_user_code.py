"""Operators referenced from agent test pipelines as `tests.agent_user_code:<name>`."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from operators.agent.template_check import check_model_template
from rldag.operator import OperatorDef, Port
from rldag.schema import columns
from rldag.spec import NodeKind


@dataclass
class ModelParams:
    model_path: str = MISSING


def _unused(_params: ModelParams):
    raise AssertionError("validation must not build the operator")


# A multi-turn-style generate operator that declares the chat-template preflight, as the
# agent loop does: validation renders its model's template before anything runs.
TEMPLATE_CHECKED = OperatorDef(
    name="template_checked",
    kind=NodeKind.generate,
    factory=_unused,
    ports=(Port("prompts", columns("prompt_id")),),
    params=ModelParams,
    preflight=lambda p: check_model_template(p.model_path),
)
