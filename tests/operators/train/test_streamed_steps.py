"""A trainer fed its batch chunk by chunk (operators.train.streamed) takes the optimizer steps
the whole batch gives: the same gradients, weights and metrics, whole batch or mini-batches
(a chunk that crosses a mini-batch boundary is cut there); what needs the whole batch waits."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

from operators.train.policy_gradient import PolicyGradientTrainer
from operators.train.policy_gradient_params import PolicyGradientParams, waits_for
from rldag import NodeContext
from tests.support.tiny_models import random_causal_lm
from tests.support.train_tables import grpo_table

CTX = NodeContext("train", 0, 0, "")
# Measured over 8 tables x 2 aggregations x (whole batch, mini-batches) on a 2-core x86 CPU:
# weights differ by at most 2.7e-7 (fp32's spacing near 1 is 1.2e-7), gradients by 1.8e-6 of
# the largest, metrics by 3e-6 relative; the allowances below are about 4x that. A wrong
# normalisation or mini-batch moves weights by up to lr = 1e-3.
WEIGHTS_ATOL = 1e-6
GRADS_RTOL = 1e-5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    random_causal_lm().save_pretrained(path)
    return path


def trainer(model_dir, **params) -> PolicyGradientTrainer:
    """A fresh trainer, grad clipping off. Adam divides each gradient by its own size plus
    eps: with eps = 1e-8 a weight whose gradient is ~1e-8 moves by up to lr on a rounding
    difference; eps = 1e-3 keeps the step smooth in the gradient, so weights compare at the
    gradients' rounding."""
    p = PolicyGradientParams(model_path=str(model_dir), lr=1e-3, grad_clip=1e9, **params)
    out = PolicyGradientTrainer(p)
    out.optimizer.param_groups[0]["eps"] = 1e-3
    return out


def group_chunks(table: pa.Table, sizes: list[int]) -> list[pa.Table]:
    """`table` cut into chunks of `sizes` whole prompt groups (rows of a group are adjacent)."""
    prompts = table["prompt_ids"].to_pylist()
    starts = [i for i, p in enumerate(prompts) if i == 0 or p != prompts[i - 1]]
    starts.append(len(prompts))
    assert len(starts) - 1 == sum(sizes)
    cuts = [starts[sum(sizes[:k])] for k in range(len(sizes) + 1)]
    return [table.slice(a, b - a) for a, b in zip(cuts, cuts[1:], strict=False)]


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("mini_batch_size", [0, 6])
def test_streamed_chunks_give_the_whole_batch_update(model_dir, loss_agg_mode, mini_batch_size):
    table = grpo_table(groups=8, seed=0)  # 18 rows: 3 mini-batches of 6
    params = dict(loss_agg_mode=loss_agg_mode, mini_batch_size=mini_batch_size, kl_coef=0.1)
    whole, streamed = trainer(model_dir, **params), trainer(model_dir, **params)
    expected = whole({"batch": table}, CTX)
    for chunk in group_chunks(table, [3, 1, 4]):  # 8, 2 and 8 rows: boundaries inside chunks
        streamed.consume({"batch": chunk}, CTX)
    got = streamed.finish(CTX)
    assert got.num_rows == expected.num_rows == (3 if mini_batch_size else 1)
    assert streamed.policy_version == whole.policy_version == 1
    keys = ["loss", "pg_loss", "kl", "entropy", "grad_norm", "tokens"]
    if loss_agg_mode == "token-mean":  # (a token-mean metric weighs micro-batches by rows else)
        keys.append("mean_logprob")
    for key in keys:
        assert got[key].to_pylist() == pytest.approx(
            expected[key].to_pylist(), rel=4 * GRADS_RTOL, abs=1e-7
        )
    pairs = list(zip(streamed.model.parameters(), whole.model.parameters(), strict=True))
    largest = max(float(w.grad.abs().max()) for _, w in pairs if w.grad is not None)
    for s, w in pairs:
        torch.testing.assert_close(s.detach(), w.detach(), rtol=0, atol=WEIGHTS_ATOL)
        if w.grad is not None:  # the last step's gradients
            torch.testing.assert_close(s.grad, w.grad, rtol=0, atol=4 * GRADS_RTOL * largest)


def test_a_new_iteration_drops_what_a_failed_one_left(model_dir):
    table = grpo_table(groups=4, seed=1)
    fresh, reused = trainer(model_dir), trainer(model_dir)
    reused.consume({"batch": table}, CTX)  # iteration 0 never finishes
    later = NodeContext("train", 1, 0, "")
    for t in (fresh, reused):
        t.consume({"batch": table}, later)
    assert fresh.finish(later)["loss"].to_pylist() == reused.finish(later)["loss"].to_pylist()


def test_a_streamed_trainer_without_rows_says_so(model_dir):
    with pytest.raises(ValueError, match="no fresh rows"):
        trainer(model_dir).finish(CTX)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({}, ""),
        ({"off_policy": "decoupled"}, ""),  # one step: every row's log-probs come first
        ({"epochs": 2}, "epochs: 2 passes over the whole batch"),
        ({"stream": False}, "stream: false"),
        ({"tis": "token", "mini_batch_size": 4}, "importance correction"),
    ],
)
def test_what_waits_for_the_whole_batch(params, reason):
    got = waits_for(PolicyGradientParams(model_path="m", **params))
    assert (reason in got) if reason else got == ""
