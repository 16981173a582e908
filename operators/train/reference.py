"""`reference_logprobs`: a frozen copy of the initial policy on the training pool that adds
`ref_logprobs` (per response token) for KL control, in the loss or in the reward."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import torch
from omegaconf import MISSING

from operators.hf import load_causal_lm
from operators.train.batch import pack
from operators.train.loss import token_logprobs
from rldag.operator import NodeContext, OperatorDef, Port
from rldag.schema import col, columns
from rldag.spec import NodeKind, PoolName, check_positive


@dataclass
class ReferenceParams:
    """Parameters of `reference_logprobs`."""

    model_path: str = MISSING  # the reference (usually the initial policy)
    temperature: float = 1.0  # the generate node's temperature
    micro_batch_size: int = 64
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_positive("temperature", self.temperature)
        check_positive("micro_batch_size", self.micro_batch_size)


class ReferencePolicy:
    """Scores each response under the frozen reference model."""

    def __init__(self, params: ReferenceParams) -> None:
        self.p = params
        self.model = load_causal_lm(params.model_path, device=params.device).eval()
        self.pad_id = self.model.config.pad_token_id or 0

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        batch = pack(table, self.pad_id, self.p.device)
        out: list[list[float]] = []
        with torch.no_grad():
            for lo in range(0, batch.rows, self.p.micro_batch_size):
                mb = batch.slice(lo, lo + self.p.micro_batch_size)
                logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask)
                logp = token_logprobs(logits.logits[:, :-1], mb.targets, self.p.temperature)
                for row, mask in zip(logp, mb.mask, strict=True):
                    out.append(row[mask.bool()].tolist())
        return table.append_column("ref_logprobs", pa.array(out, pa.list_(pa.float32())))


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
