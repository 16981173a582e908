"""`policy_gradient` train operator: policy-gradient updates of an HF causal LM.

The policy loss, loss aggregation and KL estimator are picked by name from
operators.algorithms (PPO clip by default). Consumes rollouts with advantages (per sequence,
or `token_advantage` per token; `response_mask` 0 drops environment tokens), runs `epochs`
passes of mini-batch AdamW steps (gradient accumulation over micro-batches, token-mean by
default), and emits one metrics row per optimizer step; with streaming on, it steps as the
chunks of its batch arrive (operators.train.streamed). It owns the policy weights and
their version (the weights edge's source).
Micro-batches hold rows of similar length up to a padded-token budget, and run each GRPO
group's prompt once (operators.train.prefix_forward) when that saves tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from operators.algorithms.aggregation import LOSS_AGGREGATIONS, Unit, masked_mean
from operators.algorithms.importance import ISConfig, importance_weights
from operators.algorithms.kl import KL_ESTIMATORS
from operators.algorithms.logprobs import entropy_from_logits, token_logprobs
from operators.algorithms.policy_losses import POLICY_LOSSES, PolicyLossConfig
from operators.model.cpu_linear import route_linears
from operators.model.hf import load_causal_lm
from operators.train import distributed as dist_utils
from operators.train import lora as lora_utils
from operators.train.batch import PackedBatch, pack
from operators.train.micro_batches import plan_micro_batches
from operators.train.policy_gradient_params import (
    PolicyGradientParams,
    TrainerParams,
    correction,
    waits_for,
)
from operators.train.policy_state import PolicyState
from operators.train.prefix_forward import response_logits, supports_shared_prefix
from operators.train.streamed import NO_FRESH_ROWS, StreamedSteps
from rldag import NodeContext, NodeKind, OperatorDef, Port, col, columns


class PolicyGradientTrainer(StreamedSteps, PolicyState):
    """Holds the policy, optional frozen reference and the optimizer for the whole run."""

    def __init__(self, params: PolicyGradientParams) -> None:
        def build() -> torch.nn.Module:
            model = load_causal_lm(params.model_path, device=params.device)
            return model if params.lora is None else lora_utils.apply_lora(model, params.lora)

        self._setup(params, build)
        self.lora = params.lora
        self.ref = (  # with LoRA the reference is the base model: the policy, adapters off
            route_linears(load_causal_lm(params.model_path, device=params.device).eval())
            if params.kl_coef and params.lora is None
            else None
        )
        self.policy_loss = POLICY_LOSSES.get(params.policy_loss)
        self.loss_config = PolicyLossConfig(
            params.clip_ratio_low, params.clip_ratio_high, params.clip_ratio_c, params.loss_agg_mode
        )
        self.kl_estimator = KL_ESTIMATORS.get(params.kl_estimator)
        self.correction = correction(params)

    def _setup(self, params: TrainerParams, build: Callable[[], torch.nn.Module]) -> None:
        """What every trainer holds: the process group, the (sharded) model being trained,
        AdamW, the precision and the micro-batching mode."""
        self.p = params
        self.lora: lora_utils.LoraParams | None = None
        self.distributed = dist_utils.init_process_group(params.device)
        self.rank, self.world_size = dist_utils.world()
        self.model = route_linears(build())
        self.model.train()
        if self.distributed:
            dist_utils.shard(self.model)
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=params.lr,
            weight_decay=params.weight_decay,
        )
        self.policy_version = 0
        self.pad_id = self.model.config.pad_token_id or 0
        self.device_type = params.device.split(":")[0]
        precision = params.precision
        if precision == "auto":
            precision = "bf16" if self.device_type == "cuda" else "fp32"
        self.bf16 = precision == "bf16"
        self.shared_prefix = params.shared_prefix and supports_shared_prefix(self.model)
        self.aggregation = LOSS_AGGREGATIONS.get(params.loss_agg_mode)
        self.correction: ISConfig | None = None

    def _forward(self, mb: PackedBatch, shared: bool) -> torch.Tensor:
        """Response logits, under bf16 autocast when asked."""
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.bf16):
            return response_logits(self.model, mb, self.pad_id, shared)

    def _ref_logprobs(self, mb: PackedBatch, shared: bool) -> torch.Tensor | None:
        if mb.ref_logprobs is not None:
            return mb.ref_logprobs
        if self.ref is None and self.lora is None:
            return None
        base = self.model.disable_adapter() if self.ref is None else nullcontext()
        with torch.no_grad(), base:
            logits = response_logits(self.ref or self.model, mb, self.pad_id, shared)
        return token_logprobs(logits, mb.response_ids, self.p.temperature)

    def _micro_loss(self, mb: PackedBatch, scale: float, shared: bool) -> dict[str, float]:
        p = self.p
        logits = self._forward(mb, shared)
        logp = token_logprobs(logits, mb.response_ids, p.temperature)
        per_token = mb.token_advantages
        if per_token is None:  # one advantage per sequence
            per_token = mb.advantages.unsqueeze(-1)
        adv = per_token * mb.mask
        old, weights, is_stats = mb.old_logprobs, None, {}
        if mb.prox_logprobs is not None:  # the ratio against the trainer's own log-probs
            old = mb.prox_logprobs
            weights, is_stats = importance_weights(
                mb.prox_logprobs, mb.old_logprobs, mb.mask, self.correction
            )
        pg_loss, clipfrac, approx_kl = self.policy_loss(
            logp, old, adv, mb.mask, self.loss_config, weights
        )
        entropy = self.aggregation(entropy_from_logits(logits, p.temperature), mb.mask)
        loss = pg_loss - p.entropy_coef * entropy
        kl = torch.zeros(())
        ref_logp = self._ref_logprobs(mb, shared) if p.kl_coef else None
        if ref_logp is not None:
            kl = self.aggregation(self.kl_estimator(logp, ref_logp), mb.mask)
            loss = loss + p.kl_coef * kl
        (loss * scale).backward()
        stats = {"loss": loss, "pg_loss": pg_loss, "pg_clipfrac": clipfrac}
        stats |= {"approx_kl": approx_kl, "entropy": entropy, "kl": kl} | is_stats
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
        local = [float(batch.mask.sum()), float(batch.rows)]
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
        the step and joins with a zero-weighted row)."""
        self.optimizer.zero_grad(set_to_none=True)
        totals, tokens, _ = self._accumulate(batch, live)
        return self._apply(totals, tokens)

    def _accumulate(
        self, batch: PackedBatch, live: bool = True, normalise: bool = True
    ) -> tuple[dict[str, float], float, float]:
        """Forward/backward of this rank's micro-batches, gradients accumulating: each loss
        weighs by its tokens (or sequences) over the group's total (W ranks match one worker;
        every rank runs as many micro-batches, for FSDP), or unnormalised (`normalise=False`:
        the caller divides before the step). The metric sums, the group's tokens and rows."""
        micro, shared, tokens, rows = self._plan(batch, live)
        total = (rows if self.aggregation.unit == Unit.sequence else tokens) if normalise else 1.0
        totals: dict[str, float] = {}
        for index, live_rows in micro:
            mb = batch.select(index)
            weight = mb.rows if self.aggregation.unit == Unit.sequence else float(mb.mask.sum())
            scale = weight / max(total, 1.0) * self.world_size if live_rows else 0.0
            for k, v in self._micro_loss(mb, scale, shared).items():
                totals[k] = totals.get(k, 0.0) + v
        return totals, tokens, rows

    def _apply(
        self, totals: dict[str, float], tokens: float, over: float = 1.0
    ) -> dict[str, float]:
        """The optimizer step on the accumulated gradients, divided by `over` first (the
        step's tokens or sequences, when they were accumulated unnormalised); the step's
        metrics (`totals`: weighted sums, divided by `over` too)."""
        for param in (p for p in self.model.parameters() if p.grad is not None):
            param.grad.div_(over)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.p.grad_clip)
        self.optimizer.step()
        keys = list(totals)
        reduced = dist_utils.all_reduce([totals[k] for k in keys])
        totals = {k: v / self.world_size / over for k, v in zip(keys, reduced, strict=True)}
        totals |= {
            "grad_norm": dist_utils.as_float(norm),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        return totals | {"tokens": tokens}

    def _prepare(self, batch: PackedBatch, table: pa.Table) -> None:
        """Per-token inputs of the losses computed before the first update."""
        if self.correction is not None:
            batch.prox_logprobs = self._proximal(batch)

    def _metrics(self) -> tuple[str, ...]:
        """The metric columns of this trainer's rows (importance sampling's only with it)."""
        return METRICS + (IS_METRICS if self.correction is not None else ())

    def _trains(self, ctx: NodeContext) -> bool:
        """Whether this iteration updates the policy (not during the critic's warm-up)."""
        return ctx.iteration >= self.p.critic_warmup

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        start = time.perf_counter()
        if not self._trains(ctx):
            return self._table([], 0.0)
        table = self._fresh(inputs["batch"])
        if table.num_rows == 0:
            raise ValueError(NO_FRESH_ROWS)
        batch = pack(table, self.pad_id, self.p.device)
        self._prepare(batch, table)
        total_rows = int(dist_utils.all_reduce([float(batch.rows)])[0])
        steps = -(-total_rows // (self.p.mini_batch_size or total_rows))
        rows: list[dict[str, float]] = []
        for _ in range(self.p.epochs):
            for part in np.array_split(np.arange(batch.rows), steps):
                if len(part):
                    rows.append(self._step(batch.slice(int(part[0]), int(part[-1]) + 1)))
                else:
                    rows.append(self._step(batch.slice(0, 1), live=False))
        return self._report(rows, time.perf_counter() - start)

    def _report(self, rows: list[dict[str, float]], seconds: float) -> pa.Table:
        """The new version's metrics rows (reduced over the group: rank 0 reports them)."""
        self.policy_version += 1
        tokens_per_s = sum(r["tokens"] for r in rows) / max(seconds, 1e-9)
        return self._table(rows if self.rank == 0 else [], tokens_per_s)

    def _table(self, rows: list[dict[str, float]], tokens_per_s: float) -> pa.Table:
        """The metrics rows, one per optimizer step."""
        return pa.table(
            {
                "step": pa.array(range(len(rows)), pa.int64()),
                "policy_version": pa.array([self.policy_version] * len(rows), pa.int64()),
                **{k: pa.array([r[k] for r in rows], pa.float32()) for k in self._metrics()},
                "tokens_per_s": pa.array([tokens_per_s] * len(rows), pa.float32()),
            }
        )


METRICS = ("loss", "pg_loss", "pg_clipfrac", "approx_kl", "entropy", "kl", "mean_logprob")
METRICS += ("grad_norm", "lr", "tokens")
# With `tis` or decoupled PPO (extra columns of the metrics rows, not declared ports):
IS_METRICS = ("is_mismatch_kl", "is_mismatch_k3", "is_capped_frac", "is_weight_mean")

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
    streams=True,  # steps as chunks arrive, unless it waits (waits_for, rldag.graph.streaming)
    consumes_chunks=True,
    waits_for=waits_for,
    description="Policy-gradient trainer: ppo/gspo/cispo by name, KL, TIS (AdamW, grad clip).",
)
