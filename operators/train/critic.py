"""PPO's critic as two nodes on the training pool: `values` (a transform that adds each
response token's value under the critic of the previous iteration, fed by a weights edge
from the critic like a generate node from the policy) and `critic` (a train node that
fits the value model to the GAE returns, with PPO's value clipping).

The critic trains like the policy: FSDP2, token-budget micro-batches, the shared prompt
prefix, DCP checkpoints and `--resume`, an HF export (the backbone plus value_head.pt).
Its metrics rows are prefixed `critic_` (train/critic_vf_loss, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import torch
from omegaconf import MISSING

from operators.algorithms.aggregation import LOSS_AGGREGATIONS, masked_mean
from operators.algorithms.gae import gae
from operators.algorithms.value_loss import clipped_value_loss
from operators.train.batch import PackedBatch
from operators.train.policy_gradient import PolicyGradientTrainer
from operators.train.policy_gradient_params import Precision, check_steps
from operators.train.prefix_forward import response_logits
from operators.train.reference import ReferencePolicy
from operators.train.value_model import load_value_model
from rldag import (
    NodeContext,
    NodeKind,
    OperatorDef,
    PoolName,
    Port,
    SpecError,
    check_positive,
    col,
    columns,
)

VALUES_COLUMN = col("values", pa.list_(pa.float32()))


@dataclass
class ValuesParams:
    """Parameters of `values`."""

    model_path: str = MISSING  # the critic's initial backbone (usually the policy's)
    micro_batch_tokens: int = 16384  # padded tokens per forward; 0 = no limit
    micro_batch_size: int = 0  # rows per forward; 0 = no limit
    shared_prefix: bool = True
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_positive("micro_batch_tokens", self.micro_batch_tokens, allow_zero=True)
        check_positive("micro_batch_size", self.micro_batch_size, allow_zero=True)


class CriticValues(ReferencePolicy):
    """The critic's values of each response token (no gradient); follows the critic node's
    weights through the weights edge."""

    column = VALUES_COLUMN.name

    def __init__(self, params: ValuesParams) -> None:
        super().__init__(params)
        self.policy_version = 0

    def _load(self) -> torch.nn.Module:
        return load_value_model(self.p.model_path, device=self.p.device).eval()

    def _score(self, mb: PackedBatch, shared: bool) -> torch.Tensor:
        return response_logits(self.model, mb, self.pad_id, shared).squeeze(-1)

    def export_weights(self) -> dict[str, torch.Tensor]:
        """The value model's weights (a PolicyHolder, like the rollout engine)."""
        return self.model.state_dict()

    def load_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.model.load_state_dict(weights)
        self.policy_version = version


VALUES = OperatorDef(
    name="values",
    kind=NodeKind.transform,
    factory=CriticValues,
    ports=(Port("rollouts", columns("prompt_ids", "response_ids")), Port("weights", weights=True)),
    adds=(VALUES_COLUMN,),
    params=ValuesParams,
    stateful=True,
    pool=PoolName.training,
    description="The critic's value of every response token (for gae).",
)


@dataclass
class CriticParams:
    """Parameters of the `critic` trainer (the trainer keys mean what they mean for
    `policy_gradient`)."""

    model_path: str = MISSING  # the initial backbone (usually the policy's)
    lr: float = 1e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    gamma: float = 1.0  # as the advantage node's (the returns are GAE's)
    lam: float = 1.0
    cliprange_value: float = 0.5  # a value moves at most this far from its rollout value
    loss_agg_mode: str = "token-mean"
    epochs: int = 1
    mini_batch_size: int = 0
    micro_batch_tokens: int = 16384
    micro_batch_size: int = 0
    shared_prefix: bool = True
    precision: Precision = Precision.auto
    device: str = "cpu"

    def __post_init__(self) -> None:
        LOSS_AGGREGATIONS.check("loss_agg_mode", self.loss_agg_mode)
        for key in ("gamma", "lam"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise SpecError(f"must be in [0, 1], got {getattr(self, key)!r}", path=key)
        check_positive("cliprange_value", self.cliprange_value)
        check_steps(self)


class CriticTrainer(PolicyGradientTrainer):
    """Fits the value model to GAE returns computed from the rollout-time values."""

    def __init__(self, params: CriticParams) -> None:
        self._setup(params, lambda: load_value_model(params.model_path, device=params.device))

    def _trains(self, ctx: NodeContext) -> bool:
        return True  # from the first iteration (the policy may wait: critic_warmup)

    def _fresh(self, table: pa.Table) -> pa.Table:
        return table  # rows carry the policy's version, not the critic's: nothing to drop

    def _prepare(self, batch: PackedBatch, table: pa.Table) -> None:
        if batch.values is None:
            raise ValueError("the critic needs the `values` column: add a values node upstream")
        _, returns = gae(
            table["reward"].to_numpy(),
            batch.values.cpu().numpy(),
            batch.mask.cpu().numpy(),
            self.p.gamma,
            self.p.lam,
        )
        batch.returns = torch.from_numpy(returns).float().to(batch.values.device)

    def _micro_loss(self, mb: PackedBatch, scale: float, shared: bool) -> dict[str, float]:
        values = self._forward(mb, shared).squeeze(-1).float()
        loss, clipfrac = clipped_value_loss(
            values, mb.values, mb.returns, mb.mask, self.p.cliprange_value, self.aggregation
        )
        (loss * scale).backward()
        stats = {"vf_loss": loss, "vf_clipfrac": clipfrac}
        stats["value_mean"] = masked_mean(values.detach(), mb.mask)
        stats["return_mean"] = masked_mean(mb.returns, mb.mask)
        return {k: float(v.detach()) * scale for k, v in stats.items()}

    def _metrics(self) -> tuple[str, ...]:
        return CRITIC_METRICS

    def _table(self, rows: list[dict[str, float]], tokens_per_s: float) -> pa.Table:
        table = super()._table(rows, tokens_per_s)
        return table.rename_columns([f"critic_{name}" for name in table.column_names])


CRITIC_METRICS = ("vf_loss", "vf_clipfrac", "value_mean", "return_mean", "grad_norm", "lr")
CRITIC_METRICS += ("tokens",)

CRITIC = OperatorDef(
    name="critic",
    kind=NodeKind.train,
    factory=CriticTrainer,
    ports=(Port("batch", (*columns("prompt_ids", "response_ids", "reward"), VALUES_COLUMN)),),
    adds=(
        col("critic_step", pa.int64()),
        col("critic_policy_version", pa.int64()),
        *(col(f"critic_{name}", pa.float32()) for name in CRITIC_METRICS),
        col("critic_tokens_per_s", pa.float32()),
    ),
    passthrough=False,
    params=CriticParams,
    stateful=True,
    checkpointable=True,
    dispatch="balanced",
    description="PPO's critic: a value model fitted to GAE returns, value clipping.",
)
