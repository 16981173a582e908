"""The parameters of the `policy_gradient` trainer, with their checks, and what they imply:
the importance correction and why the trainer waits for its whole batch."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from omegaconf import MISSING

from operators.algorithms.aggregation import LOSS_AGGREGATIONS
from operators.algorithms.importance import ISConfig, ISLevel, ISMode
from operators.algorithms.kl import KL_ESTIMATORS
from operators.algorithms.policy_losses import POLICY_LOSSES
from operators.train import lora as lora_utils
from operators.train.streamed import one_pass_waits_for
from rldag import SpecError, check_positive


class OffPolicy(StrEnum):
    """How the trainer treats rows sampled by an older policy."""

    none = "none"  # the PPO ratio is taken against the rollout's log-probs
    decoupled = "decoupled"  # against the trainer's own, IS-weighted (tokens, min(w, is_cap))


class Precision(StrEnum):
    """Forward/backward precision: bf16 autocast on GPU and fp32 on CPU for `auto`."""

    auto = "auto"
    fp32 = "fp32"
    bf16 = "bf16"


@dataclass
class PolicyGradientParams:
    """Parameters of the `policy_gradient` trainer."""

    model_path: str = MISSING  # HF model directory of the initial policy
    lr: float = 1e-6  # AdamW learning rate
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global grad norm
    temperature: float = 1.0  # must equal the generate node's (logprobs are temperature-scaled)
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float | None = None  # dual-clip bound for negative advantages (e.g. 3.0)
    policy_loss: str = "ppo"  # ppo | gspo | cispo | module:function (operators.algorithms)
    loss_agg_mode: str = "token-mean"  # token-mean | seq-mean-token-sum | seq-mean-token-mean
    epochs: int = 1  # passes over each iteration's batch
    stream: bool = True  # step as chunks arrive (async.chunk_groups > 0; one epoch, one rank)
    mini_batch_size: int = 0  # sequences per optimizer step; 0 = the whole batch
    # A micro-batch (one forward/backward, gradients accumulate) holds rows of similar length
    # up to micro_batch_tokens padded tokens (veRL's ppo_max_token_len_per_gpu) and at most
    # micro_batch_size rows; 0 lifts either limit (both 0: the whole mini-batch at once).
    micro_batch_tokens: int = 16384
    micro_batch_size: int = 0
    shared_prefix: bool = True  # forward each group's shared prompt once, when it saves tokens
    kl_coef: float = 0.0  # KL to the initial policy as a loss term; 0 = no reference model
    kl_estimator: str = "k3"  # k1 | k2 (mse) | k3 (low_var_kl) | abs
    entropy_coef: float = 0.0  # bonus on token entropy
    off_policy: OffPolicy = OffPolicy.none  # decoupled: clip against the trainer's own logprobs
    is_cap: float = 5.0  # decoupled: cap of the behaviour importance weight
    # Truncated importance sampling between the rollout's and the trainer's log-probs
    # (operators.algorithms.importance): the ratio is taken against the trainer's own.
    tis: ISLevel = ISLevel.none  # none | token | sequence | geometric
    tis_mode: ISMode = ISMode.truncate  # truncate: min(w, tis_cap); mask: 0 outside the bound
    tis_cap: float = 2.0
    tis_low: float = 0.0  # mask mode: weights below this are dropped too
    max_staleness: int = -1  # drop rows generated more than k versions ago (-1: keep all)
    critic_warmup: int = 0  # with a critic: the policy waits for the first N iterations
    precision: Precision = Precision.auto  # auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16
    device: str = "cpu"
    lora: lora_utils.LoraParams | None = None  # train low-rank adapters only (peft)

    def __post_init__(self) -> None:
        if self.lora is not None:
            lora_utils.check_lora(self.lora)
        POLICY_LOSSES.check("policy_loss", self.policy_loss)
        LOSS_AGGREGATIONS.check("loss_agg_mode", self.loss_agg_mode)
        KL_ESTIMATORS.check("kl_estimator", self.kl_estimator)
        if self.tis != ISLevel.none and self.off_policy == OffPolicy.decoupled:
            raise SpecError(
                "off_policy: decoupled already weights tokens by min(ratio, is_cap); "
                "use one of tis and off_policy",
                path="tis",
            )
        check_positive("is_cap", self.is_cap)
        check_positive("tis_cap", self.tis_cap)
        check_positive("tis_low", self.tis_low, allow_zero=True)
        check_positive("temperature", self.temperature)
        check_positive("critic_warmup", self.critic_warmup, allow_zero=True)
        check_steps(self)


TrainerParams = Any  # a params dataclass with the shared trainer fields (PolicyGradientParams)


def check_steps(params: TrainerParams) -> None:
    """What every trainer's steps need: `lr` and `epochs` > 0, batch sizes >= 0 (0: none)."""
    check_positive("lr", params.lr)
    check_positive("epochs", params.epochs)
    for key in ("mini_batch_size", "micro_batch_tokens", "micro_batch_size"):
        check_positive(key, getattr(params, key), allow_zero=True)


def correction(params: PolicyGradientParams) -> ISConfig | None:
    """The importance sampling the params ask for: `tis`, decoupled PPO's token weights
    capped at `is_cap`, or none (the ratio is taken against the rollout's log-probs)."""
    if params.tis != ISLevel.none:
        return ISConfig(params.tis, params.tis_mode, params.tis_cap, params.tis_low)
    if params.off_policy == OffPolicy.decoupled:
        return ISConfig(ISLevel.token, ISMode.truncate, params.is_cap)
    return None


def waits_for(params: PolicyGradientParams) -> str:
    """Why a policy_gradient node waits for its whole batch (operators.train.streamed)."""
    if params.mini_batch_size and correction(params) is not None:
        return "its importance correction needs every row's log-probs before the first step"
    return one_pass_waits_for(params)
