"""The trainer's fast paths change nothing but speed: the shared-prefix forward (each GRPO
group's prompt once, responses against its cached keys/values) gives the plain padded
forward's log-probs and gradients (also for the reference and proximal log-probs, and under
FSDP2 with 2 ranks), and token-budget micro-batches give the same optimizer step as one row
per micro-batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from operators.algorithms.logprobs import token_logprobs
from operators.train.batch import pack
from operators.train.micro_batches import plan_micro_batches
from operators.train.policy_gradient import PolicyGradientTrainer
from operators.train.policy_gradient_params import PolicyGradientParams
from operators.train.prefix_forward import response_logits, supports_shared_prefix
from operators.train.reference import ReferenceParams, ReferencePolicy
from tests.support.tiny_models import random_causal_lm
from tests.support.train_tables import grpo_table


def test_pack_places_tokens_and_groups():
    table = pa.concat_tables([grpo_table(seed=1), grpo_table(seed=1)])  # two chunks
    batch = pack(table, pad_id=0)
    prompts, responses = table["prompt_ids"].to_pylist(), table["response_ids"].to_pylist()
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        assert batch.prompt_ids[i, : len(p)].tolist() == p and batch.prompt_lens[i] == len(p)
        assert batch.response_ids[i, : len(r)].tolist() == r and batch.response_lens[i] == len(r)
        assert batch.mask[i].sum() == len(r)
        assert batch.group[i] == batch.group[prompts.index(p)]
    assert batch.groups == len({tuple(p) for p in prompts})
    sub = batch.select(torch.tensor([3, 1]))
    assert sub.prompt_lens.tolist() == [len(prompts[3]), len(prompts[1])]
    assert sub.response_ids.shape[1] == max(len(responses[3]), len(responses[1]))


@pytest.mark.parametrize("shared", [False, True])
def test_micro_batch_plan_respects_limits(shared):
    batch = pack(grpo_table(groups=12), pad_id=0)
    plan, total = plan_micro_batches(batch, max_tokens=24, max_rows=5, shared=shared)
    rows = torch.cat(plan).sort().values
    assert rows.tolist() == list(range(batch.rows))  # every row exactly once
    assert all(len(index) <= 5 for index in plan)
    assert total == sum(_padded(batch.select(i), shared) for i in plan)
    for index in plan:
        if len(index) > 1:
            assert _padded(batch.select(index), shared) <= 24


def _padded(mb, shared: bool) -> int:
    """Tokens one forward over `mb` processes, padding included (computed from scratch)."""
    prompt, response = int(mb.prompt_lens.max()), int(mb.response_lens.max())
    if shared:
        return mb.groups * prompt + mb.rows * max(response - 1, 1)
    return mb.rows * int((mb.prompt_lens + mb.response_lens).max())


@pytest.mark.parametrize("shared", [False, True])
def test_skewed_lengths_split_only_where_it_pays(shared):
    """RL batches are skewed: most answers end early, one runs long. The planner cuts the long
    row off instead of padding every short one to it, but leaves even batches whole."""
    even = pack(grpo_table(groups=8, prompt_len=(4, 4), response_len=(3, 3)), pad_id=0)
    assert len(plan_micro_batches(even, shared=shared)[0]) == 1
    lengths = {"prompt_len": (4, 4), "response_len": (2, 2)}
    skewed = pack(grpo_table(groups=8, long_row=5, **lengths), pad_id=0)  # one 30-token answer
    plan, total = plan_micro_batches(skewed, shared=shared)
    assert len(plan) == 2 and 5 in plan[-1].tolist() and len(plan[-1]) < len(plan[0])
    assert total < _padded(skewed, shared) / 2


def test_shared_prefix_matches_plain_forward():
    model = random_causal_lm().train()
    assert supports_shared_prefix(model)
    batch = pack(grpo_table(), pad_id=0)
    assert batch.groups < batch.rows
    logprobs, grads = {}, {}
    for shared in (False, True):
        model.zero_grad()
        logits = response_logits(model, batch, pad_id=0, shared=shared)
        logp = token_logprobs(logits, batch.response_ids) * batch.mask
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        logprobs[shared] = logp.detach()
        grads[shared] = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.testing.assert_close(logprobs[True], logprobs[False], rtol=0, atol=1e-5)
    for name, grad in grads[False].items():
        torch.testing.assert_close(grads[True][name], grad, rtol=1e-4, atol=1e-5)
    assert max(float(g.abs().max()) for g in grads[True].values()) > 1e-3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    random_causal_lm().save_pretrained(path)
    return path


def step_gradients(model_dir, table: pa.Table, **params) -> tuple[dict, dict, bool]:
    """Metrics and gradients of one optimizer step (grad_clip off) of a fresh trainer, and
    whether it shared prompts."""
    p = PolicyGradientParams(model_path=str(model_dir), lr=1e-3, grad_clip=1e9, **params)
    trainer = PolicyGradientTrainer(p)
    batch = pack(table, trainer.pad_id)
    metrics = trainer._step(batch)
    grads = {n: w.grad.clone() for n, w in trainer.model.named_parameters()}
    return metrics, grads, trainer._plan(batch)[1]


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_fast_paths_give_the_same_step(model_dir, loss_agg_mode):
    table = grpo_table(groups=8)
    common = {"loss_agg_mode": loss_agg_mode, "kl_coef": 0.1, "entropy_coef": 0.01}
    runs = {
        "one row each": dict(micro_batch_tokens=0, micro_batch_size=1, shared_prefix=False),
        "token budget": dict(micro_batch_tokens=40, shared_prefix=False),
        "shared prefix": dict(shared_prefix=True),
        "both": dict(micro_batch_tokens=60, shared_prefix=True),
    }
    results = {name: step_gradients(model_dir, table, **common, **kw) for name, kw in runs.items()}
    assert [shared for *_, shared in results.values()] == [False, False, True, True]
    base_metrics, base_grads, _ = results.pop("one row each")
    keys = ["loss", "pg_loss", "kl", "entropy", "tokens"]
    if loss_agg_mode == "token-mean":  # (a token-mean metric is weighted by rows otherwise)
        keys.append("mean_logprob")
    for metrics, grads, _ in results.values():
        for key in keys:
            assert metrics[key] == pytest.approx(base_metrics[key], rel=1e-4, abs=1e-6)
        for name, grad in base_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6)


def test_proximal_and_reference_logprobs_match(model_dir):
    table = grpo_table(groups=8, seed=2)
    prox, ref = {}, {}
    for shared in (False, True):
        trainer = PolicyGradientTrainer(
            PolicyGradientParams(model_path=str(model_dir), shared_prefix=shared)
        )
        batch = pack(table, trainer.pad_id)
        assert trainer._plan(batch)[1] is shared  # groups make the shared prefix cheaper
        prox[shared] = trainer._proximal(batch)
        reference = ReferencePolicy(
            ReferenceParams(model_path=str(model_dir), shared_prefix=shared)
        )
        ref[shared] = reference({"rollouts": table}, None)["ref_logprobs"].to_pylist()
    torch.testing.assert_close(prox[True], prox[False], rtol=0, atol=1e-5)
    for a, b, r in zip(ref[True], ref[False], table["response_ids"].to_pylist(), strict=True):
        assert len(a) == len(r)
        np.testing.assert_allclose(a, b, atol=1e-5)
    with torch.no_grad():  # and both are the model's log-probs of each response
        row = table.slice(0, 1)
        ids = torch.tensor([row["prompt_ids"][0].as_py() + row["response_ids"][0].as_py()])
        logits = trainer.model(input_ids=ids).logits[0, :-1]
        n = len(row["response_ids"][0].as_py())
        expected = token_logprobs(logits[-n:], ids[0, -n:])
    np.testing.assert_allclose(ref[True][0], expected.numpy(), atol=1e-5)


def _fsdp_rank(rank: int, model_dir: str, table: pa.Table, out: str) -> None:
    """One of 2 FSDP2 ranks: a step on its part of the rows (rank 0: a third, so it runs
    fewer micro-batches and pads with fillers); rank 0 saves the gradients."""
    trainer = PolicyGradientTrainer(PolicyGradientParams(model_dir, **FSDP_PARAMS))
    third = table.num_rows // 3
    rows = table.slice(0, third) if rank == 0 else table.slice(third)
    batch = pack(rows, trainer.pad_id)
    assert trainer._plan(batch)[1]  # shared prefix
    trainer._step(batch)
    grads = {n: p.grad.full_tensor() for n, p in trainer.model.named_parameters()}
    if rank == 0:
        torch.save(grads, out)


FSDP_PARAMS = {"grad_clip": 1e9, "micro_batch_tokens": 40, "loss_agg_mode": "seq-mean-token-sum"}


@pytest.mark.slow
def test_shared_prefix_under_fsdp_matches_one_worker(model_dir, tmp_path):
    from tests.support.gloo_ranks import run_ranks

    table = grpo_table(groups=10, seed=3)
    out = tmp_path / "fsdp.pt"
    run_ranks(_fsdp_rank, str(model_dir), table, str(out))
    one = PolicyGradientTrainer(PolicyGradientParams(str(model_dir), **FSDP_PARAMS))
    one._step(pack(table, one.pad_id))
    two = torch.load(out)
    for name, param in one.model.named_parameters():
        torch.testing.assert_close(two[name], param.grad, rtol=1e-4, atol=1e-6)
