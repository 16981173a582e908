"""`policy_gradient` train operator: GRPO / PPO-clip updates of an HF causal LM.

Consumes rollouts with advantages, runs `epochs` passes of mini-batch AdamW steps (gradient
accumulation over micro-batches, token-mean by default), and emits one metrics row per
optimizer step. It owns the policy weights and their version (the weights edge's source).
Micro-batches hold rows of similar length up to a padded-token budget, and run each GRPO
group's prompt once (operators.train.prefix_forward) when that saves tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from omegaconf import MISSING

from operators.hf import load_causal_lm
from operators.train import checkpoint
from operators.train import distributed as dist_utils
from operators.train.batch import PackedBatch, pack
from operators.train.loss import (
    aggregate,
    behaviour_weights,
    entropy_from_logits,
    kl_penalty,
    masked_mean,
    ppo_clip_loss,
    token_logprobs,
)
from operators.train.micro_batches import plan_micro_batches
from operators.train.prefix_forward import response_logits, supports_shared_prefix
from rldag.operator import NodeContext, OperatorDef, Port
from rldag.schema import col, columns
from rldag.spec import NodeKind, check_choice, check_positive

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_ESTIMATORS = ("k1", "k2", "k3", "abs", "mse", "low_var_kl")


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
    loss_agg_mode: str = "token-mean"  # token-mean | seq-mean-token-sum | seq-mean-token-mean
    epochs: int = 1  # passes over each iteration's batch
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
    off_policy: str = "none"  # decoupled: clip against the current policy, IS-correct to behaviour
    is_cap: float = 5.0  # decoupled: cap of the behaviour importance weight
    max_staleness: int = -1  # drop rows generated more than k versions ago (-1: keep all)
    precision: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16 (autocast)
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_choice("loss_agg_mode", self.loss_agg_mode, LOSS_AGG_MODES)
        check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        check_choice("off_policy", self.off_policy, ("none", "decoupled"))
        check_choice("precision", self.precision, ("auto", "fp32", "bf16"))
        check_positive("is_cap", self.is_cap)
        check_positive("lr", self.lr)
        check_positive("temperature", self.temperature)
        check_positive("epochs", self.epochs)
        check_positive("micro_batch_size", self.micro_batch_size, allow_zero=True)
        check_positive("micro_batch_tokens", self.micro_batch_tokens, allow_zero=True)
        check_positive("mini_batch_size", self.mini_batch_size, allow_zero=True)


class PolicyGradientTrainer:
    """Holds the policy, optional frozen reference and the optimizer for the whole run."""

    def __init__(self, params: PolicyGradientParams) -> None:
        self.p = params
        self.distributed = dist_utils.init_process_group(params.device)
        self.rank, self.world_size = dist_utils.world()
        self.model = load_causal_lm(params.model_path, device=params.device)
        self.model.train()
        if self.distributed:
            dist_utils.shard(self.model)
        self.ref = (
            load_causal_lm(params.model_path, device=params.device).eval()
            if params.kl_coef
            else None
        )
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=params.lr, weight_decay=params.weight_decay
        )
        self.policy_version = 0
        self.pad_id = self.model.config.pad_token_id or 0
        self.device_type = params.device.split(":")[0]
        precision = params.precision
        if precision == "auto":
            precision = "bf16" if self.device_type == "cuda" else "fp32"
        self.bf16 = precision == "bf16"
        self.shared_prefix = params.shared_prefix and supports_shared_prefix(self.model)

    def export_weights(self) -> dict[str, torch.Tensor]:
        """The full policy weights (references on one worker; gathered on every rank of a
        sharded group, so all ranks must call it)."""
        return dist_utils.full_state_dict(self.model, self.distributed)

    def load_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        dist_utils.load_full_state_dict(self.model, weights, self.distributed)
        self.policy_version = version

    def save_checkpoint(self, path: str) -> None:
        """Sharded model + optimizer state, policy version and RNG (every rank calls it)."""
        checkpoint.save(path, self.model, self.optimizer, self.policy_version, self.rank)

    def load_checkpoint(self, path: str) -> None:
        self.policy_version = checkpoint.load(path, self.model, self.optimizer, self.rank)

    def export_hf(self, path: str) -> None:
        """The policy as a Hugging Face directory (weights gathered; rank 0 writes)."""
        weights = self.export_weights()
        if self.rank == 0:
            checkpoint.export_hf(path, self.model, weights, self.p.model_path)

    def _forward(self, mb: PackedBatch, shared: bool) -> torch.Tensor:
        """Response logits, under bf16 autocast when asked."""
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.bf16):
            return response_logits(self.model, mb, self.pad_id, shared)

    def _ref_logprobs(self, mb: PackedBatch, shared: bool) -> torch.Tensor | None:
        if mb.ref_logprobs is not None:
            return mb.ref_logprobs
        if self.ref is None:
            return None
        with torch.no_grad():
            logits = response_logits(self.ref, mb, self.pad_id, shared)
        return token_logprobs(logits, mb.response_ids, self.p.temperature)

    def _micro_loss(self, mb: PackedBatch, scale: float, shared: bool) -> dict[str, float]:
        p = self.p
        logits = self._forward(mb, shared)
        logp = token_logprobs(logits, mb.response_ids, p.temperature)
        adv = mb.advantages.unsqueeze(-1) * mb.mask
        old, weights = mb.old_logprobs, None
        if mb.prox_logprobs is not None:  # decoupled PPO
            old = mb.prox_logprobs
            weights = behaviour_weights(mb.prox_logprobs, mb.old_logprobs, p.is_cap)
        pg_loss, clipfrac, approx_kl = ppo_clip_loss(
            logp,
            old,
            adv,
            mb.mask,
            clip_ratio_low=p.clip_ratio_low,
            clip_ratio_high=p.clip_ratio_high,
            clip_ratio_c=p.clip_ratio_c,
            loss_agg_mode=p.loss_agg_mode,
            weights=weights,
        )
        entropy = aggregate(entropy_from_logits(logits, p.temperature), mb.mask, p.loss_agg_mode)
        loss = pg_loss - p.entropy_coef * entropy
        kl = torch.zeros(())
        ref_logp = self._ref_logprobs(mb, shared) if p.kl_coef else None
        if ref_logp is not None:
            kl = aggregate(kl_penalty(logp, ref_logp, p.kl_estimator), mb.mask, p.loss_agg_mode)
            loss = loss + p.kl_coef * kl
        (loss * scale).backward()
        stats = {"loss": loss, "pg_loss": pg_loss, "pg_clipfrac": clipfrac}
        stats |= {"approx_kl": approx_kl, "entropy": entropy, "kl": kl}
        stats["mean_logprob"] = masked_mean(logp.detach(), mb.mask)
        return {k: float(v.detach()) * scale for k, v in stats.items()}

    def _plan(
        self, batch: PackedBatch, live: bool = True
    ) -> tuple[list[tuple[torch.Tensor, bool]], bool, float, float]:
        """This rank's micro-batches as (row indices, live), padded with zero-weighted
        fillers (row 0, not live) so every rank runs as many; whether they share prompts
        (agreed by the group: when that saves padded tokens over all ranks); and the group's
        response tokens and rows."""
        p = self.p
        modes = (False, True) if self.shared_prefix else (False,)
        plans = {
            m: plan_micro_batches(batch, p.micro_batch_tokens, p.micro_batch_size, m) for m in modes
        }
        local = [float(batch.response_lens.sum()), float(batch.rows)]
        local += [float(plans[m][1]) for m in modes]
        tokens, rows, *cost = dist_utils.all_reduce(local if live else [0.0] * len(local))
        shared = len(cost) == 2 and cost[1] < cost[0]
        micro = [(index, True) for index in plans[shared][0]] if live else []
        count = int(dist_utils.all_reduce([float(max(len(micro), 1))], "max")[0])
        filler = (torch.zeros(1, dtype=torch.long), False)
        return micro + [filler] * (count - len(micro)), shared, tokens, rows

    def _proximal(self, batch: PackedBatch) -> torch.Tensor:
        """Log-probs of the current policy before this iteration's updates (no grad)."""
        out = torch.zeros_like(batch.old_logprobs)
        micro, shared, _, _ = self._plan(batch)
        with torch.no_grad():
            for index, live in micro:
                mb = batch.select(index)
                logp = token_logprobs(
                    self._forward(mb, shared), mb.response_ids, self.p.temperature
                )
                if live:
                    out[index.to(out.device), : logp.shape[1]] = logp.float() * mb.mask
        return out

    def _fresh(self, table: pa.Table) -> pa.Table:
        """Rows within `max_staleness` versions of the current policy."""
        if self.p.max_staleness < 0 or "policy_version" not in table.column_names:
            return table
        oldest = self.policy_version - self.p.max_staleness
        return table.filter(pc.greater_equal(table["policy_version"], oldest))

    def _step(self, batch: PackedBatch, live: bool = True) -> dict[str, float]:
        """One optimizer step over this rank's rows (`live=False`: this rank has none for
        the step and joins with a zero-weighted row). Losses are normalised by the group's
        tokens (or sequences), so W ranks match one worker on all rows; every rank runs the
        same number of micro-batches to keep FSDP's collectives aligned."""
        micro, shared, tokens, rows = self._plan(batch, live)
        totals: dict[str, float] = {}
        self.optimizer.zero_grad(set_to_none=True)
        for index, live_rows in micro:
            mb = batch.select(index)
            share = float(mb.response_lens.sum()) / max(tokens, 1.0)
            if self.p.loss_agg_mode != "token-mean":
                share = mb.rows / max(rows, 1.0)
            scale = share * self.world_size if live_rows else 0.0
            for k, v in self._micro_loss(mb, scale, shared).items():
                totals[k] = totals.get(k, 0.0) + v
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.p.grad_clip)
        self.optimizer.step()
        keys = list(totals)
        reduced = dist_utils.all_reduce([totals[k] for k in keys])
        totals = {k: v / self.world_size for k, v in zip(keys, reduced, strict=True)}
        totals |= {
            "grad_norm": dist_utils.as_float(norm),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        return totals | {"tokens": tokens}

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        start = time.perf_counter()
        table = self._fresh(inputs["batch"])
        if table.num_rows == 0:
            raise ValueError(
                "this training worker got no fresh rows: fewer training workers "
                "or a larger max_staleness"
            )
        batch = pack(table, self.pad_id, self.p.device)
        if self.p.off_policy == "decoupled":
            batch.prox_logprobs = self._proximal(batch)
        total_rows = int(dist_utils.all_reduce([float(batch.rows)])[0])
        steps = -(-total_rows // (self.p.mini_batch_size or total_rows))
        rows: list[dict[str, float]] = []
        for _ in range(self.p.epochs):
            for part in np.array_split(np.arange(batch.rows), steps):
                if len(part):
                    rows.append(self._step(batch.slice(int(part[0]), int(part[-1]) + 1)))
                else:
                    rows.append(self._step(batch.slice(0, 1), live=False))
        self.policy_version += 1
        seconds = time.perf_counter() - start
        tokens_per_s = sum(r["tokens"] for r in rows) / max(seconds, 1e-9)
        if self.rank != 0:
            rows = []  # the group's metrics are reduced: rank 0 reports them once
        return pa.table(
            {
                "step": pa.array(range(len(rows)), pa.int64()),
                "policy_version": pa.array([self.policy_version] * len(rows), pa.int64()),
                **{k: pa.array([r[k] for r in rows], pa.float32()) for k in METRICS},
                "tokens_per_s": pa.array([tokens_per_s] * len(rows), pa.float32()),
            }
        )


METRICS = ("loss", "pg_loss", "pg_clipfrac", "approx_kl", "entropy", "kl", "mean_logprob")
METRICS += ("grad_norm", "lr", "tokens")

POLICY_GRADIENT = OperatorDef(
    name="policy_gradient",
    kind=NodeKind.train,
    factory=PolicyGradientTrainer,
    ports=(Port("batch", columns("prompt_ids", "response_ids", "response_logprobs", "advantage")),),
    adds=(
        col("step", pa.int64()),
        col("policy_version"),
        *(col(name, pa.float32()) for name in METRICS),
        col("tokens_per_s", pa.float32()),
    ),
    passthrough=False,
    params=PolicyGradientParams,
    stateful=True,
    checkpointable=True,
    dispatch="balanced",
    description="GRPO/PPO-clip policy-gradient trainer (AdamW, grad clip, optional KL).",
)
