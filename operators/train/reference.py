"""`reference_logprobs`: a frozen copy of the initial policy on the training pool that adds
`ref_logprobs` (per response token) for KL control, in the loss or in the reward."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import torch
from omegaconf import MISSING

from operators.algorithms.logprobs import token_logprobs
from operators.model.cpu_linear import route_linears
from operators.model.hf import load_causal_lm
from operators.train.batch import PackedBatch, pack
from operators.train.micro_batches import plan_micro_batches
from operators.train.prefix_forward import response_logits, supports_shared_prefix
from rldag import NodeContext, NodeKind, OperatorDef, PoolName, Port, check_positive, col, columns


@dataclass
class ReferenceParams:
    """Parameters of `reference_logprobs`."""

    model_path: str = MISSING  # the reference (usually the initial policy)
    temperature: float = 1.0  # the generate node's temperature
    micro_batch_tokens: int = 16384  # padded tokens per forward; 0 = no limit
    micro_batch_size: int = 0  # rows per forward; 0 = no limit
    shared_prefix: bool = True  # forward each group's shared prompt once, when it saves tokens
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_positive("temperature", self.temperature)
        check_positive("micro_batch_tokens", self.micro_batch_tokens, allow_zero=True)
        check_positive("micro_batch_size", self.micro_batch_size, allow_zero=True)


class ReferencePolicy:
    """Scores each response under the frozen reference model."""

    column = "ref_logprobs"  # the per-token column it adds

    def __init__(self, params: ReferenceParams) -> None:
        self.p = params
        self.model = self._load()
        self.pad_id = self.model.config.pad_token_id or 0
        self.shared_prefix = params.shared_prefix and supports_shared_prefix(self.model)

    def _load(self) -> torch.nn.Module:
        return route_linears(load_causal_lm(self.p.model_path, device=self.p.device).eval())

    def _score(self, mb: PackedBatch, shared: bool) -> torch.Tensor:
        """[rows, response tokens] values of a micro-batch."""
        logits = response_logits(self.model, mb, self.pad_id, shared)
        return token_logprobs(logits, mb.response_ids, self.p.temperature)

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        batch = pack(table, self.pad_id, self.p.device)
        p = self.p
        modes = (False, True) if self.shared_prefix else (False,)
        plans = [
            (plan_micro_batches(batch, p.micro_batch_tokens, p.micro_batch_size, m), m)
            for m in modes
        ]
        (micro, _), shared = min(plans, key=lambda plan: plan[0][1])  # fewest padded tokens
        out: list[list[float]] = [[] for _ in range(batch.rows)]
        with torch.no_grad():
            for index in micro:
                mb = batch.select(index)
                scores = self._score(mb, shared)
                lens = mb.response_lens.tolist()
                for row, values, n in zip(index.tolist(), scores.tolist(), lens, strict=True):
                    out[row] = values[:n]
        return table.append_column(self.column, pa.array(out, pa.list_(pa.float32())))


REFERENCE_LOGPROBS = OperatorDef(
    name="reference_logprobs",
    kind=NodeKind.transform,
    factory=ReferencePolicy,
    ports=(Port("rollouts", columns("prompt_ids", "response_ids")),),
    adds=(col("ref_logprobs"),),
    params=ReferenceParams,
    stateful=True,
    pool=PoolName.training,
    description="Frozen reference policy: adds ref_logprobs for KL control.",
)
