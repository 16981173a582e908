"""A trainer's optimizer steps taken while its batch streams in (`async.chunk_groups` > 0):
each chunk of whole prompt groups is forwarded and backwarded as it arrives, its gradients
accumulating unnormalised, and a step is taken once `mini_batch_size` rows have arrived
(0: all of them, at the end). Before the step the gradients and the metrics are divided by
the step's tokens (or sequences), so the step is the one the same rows give unstreamed.

Mini-batches are the rows in arrival order (a chunk that crosses a mini-batch boundary is
cut there); the last one takes what is left. Several epochs need the whole batch: such a
trainer waits for it (`one_pass_waits_for`), as does one with several ranks (rldag.graph.streaming).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from operators.algorithms.aggregation import Unit
from operators.train.batch import pack
from rldag import NodeContext

NO_FRESH_ROWS = (
    "this training worker got no fresh rows: fewer training workers or a larger max_staleness"
)


def one_pass_waits_for(params: Any) -> str:
    """Why a trainer waits for its whole batch instead of stepping as chunks arrive."""
    if not params.stream:
        return "stream: false"
    if params.epochs > 1:
        return f"epochs: {params.epochs} passes over the whole batch"
    return ""


@dataclass
class _Pending:
    """One iteration's steps so far and the mini-batch being accumulated."""

    iteration: int
    seconds: float = 0.0  # spent in consume and finish (not waiting for chunks)
    rows: int = 0  # of the open mini-batch
    tokens: float = 0.0
    sequences: float = 0.0
    totals: dict[str, float] = field(default_factory=dict)  # weighted metric sums
    steps: list[dict[str, float]] = field(default_factory=list)


class StreamedSteps:
    """`consume` and `finish` (rldag's ChunkConsumer), mixed into PolicyGradientTrainer: they
    use its `_fresh`, `_trains`, `_prepare`, `_accumulate`, `_apply` and `_report`."""

    _pending: _Pending | None = None

    def _pending_of(self, ctx: NodeContext) -> _Pending:
        """This iteration's state (a new one drops what a failed iteration left)."""
        if self._pending is None or self._pending.iteration != ctx.iteration:
            self._pending = _Pending(ctx.iteration)
        return self._pending

    def consume(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> None:
        """Forward/backward a chunk's rows, stepping at each mini-batch boundary."""
        start = time.perf_counter()
        pending = self._pending_of(ctx)
        table = self._fresh(inputs["batch"])
        if self._trains(ctx) and table.num_rows:
            batch = pack(table, self.pad_id, self.p.device)
            self._prepare(batch, table)
            size, at = self.p.mini_batch_size, 0
            while at < batch.rows:
                take = batch.rows - at if not size else min(batch.rows - at, size - pending.rows)
                if not pending.rows:
                    self.optimizer.zero_grad(set_to_none=True)
                totals, tokens, rows = self._accumulate(batch.slice(at, at + take), normalise=False)
                for k, v in totals.items():
                    pending.totals[k] = pending.totals.get(k, 0.0) + v
                pending.rows, at = pending.rows + take, at + take
                pending.tokens, pending.sequences = (
                    pending.tokens + tokens,
                    pending.sequences + rows,
                )
                if pending.rows == size:
                    self._step_pending(pending)
        pending.seconds += time.perf_counter() - start

    def _step_pending(self, pending: _Pending) -> None:
        """The open mini-batch's step, its gradients and metrics divided by its total."""
        over = pending.sequences if self.aggregation.unit == Unit.sequence else pending.tokens
        pending.steps.append(self._apply(pending.totals, pending.tokens, max(over, 1.0)))
        pending.rows, pending.tokens, pending.sequences, pending.totals = 0, 0.0, 0.0, {}

    def finish(self, ctx: NodeContext) -> pa.Table:
        """The last step, on what is left; the metrics rows of the iteration's steps."""
        start = time.perf_counter()
        pending = self._pending_of(ctx)
        self._pending = None
        if not self._trains(ctx):
            return self._table([], 0.0)
        if pending.rows:
            self._step_pending(pending)
        if not pending.steps:
            raise ValueError(NO_FRESH_ROWS)
        return self._report(pending.steps, pending.seconds + time.perf_counter() - start)
