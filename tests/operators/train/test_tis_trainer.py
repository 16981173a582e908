"""Truncated importance sampling in the trainer: the ratio is taken against the trainer's
own log-probs and each token weighted by min(pi_trainer / pi_rollout, cap) — decoupled PPO's
correction at token level — and the metrics rows gain the mismatch KL and capped fraction."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

from operators.train.batch import pack
from operators.train.policy_gradient import PolicyGradientTrainer
from operators.train.policy_gradient_params import PolicyGradientParams
from rldag.graph.operator import NodeContext
from tests.support.tiny_models import random_causal_lm
from tests.support.train_tables import grpo_table

CTX = NodeContext(node="train", iteration=0, seed=0, run_uri="")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    random_causal_lm(seed=5).save_pretrained(path)
    return path


def trainer(model_dir, **params) -> PolicyGradientTrainer:
    return PolicyGradientTrainer(
        PolicyGradientParams(model_path=str(model_dir), lr=1e-3, grad_clip=1e9, **params)
    )


def step(model_dir, table: pa.Table, **params) -> tuple[dict, dict]:
    t = trainer(model_dir, **params)
    batch = pack(table, t.pad_id)
    batch.prox_logprobs = t._proximal(batch) if t.correction is not None else None
    metrics = t._step(batch)
    return metrics, {n: w.grad.clone() for n, w in t.model.named_parameters()}


def test_token_tis_is_decoupled_ppos_correction(model_dir):
    table = grpo_table(groups=6, seed=4)  # behaviour log-probs far from the model's
    tis, tis_grads = step(model_dir, table, tis="token", tis_cap=3.0)
    dec, dec_grads = step(model_dir, table, off_policy="decoupled", is_cap=3.0)
    for key in ("loss", "pg_loss", "is_mismatch_kl", "is_capped_frac", "is_weight_mean"):
        assert tis[key] == pytest.approx(dec[key], rel=1e-6)
    for name, grad in dec_grads.items():
        torch.testing.assert_close(tis_grads[name], grad)
    assert 0 < tis["is_capped_frac"] < 1 and tis["is_mismatch_kl"] > 0.1


def test_masking_tis_drops_tokens_outside_the_bound(model_dir):
    table = grpo_table(groups=6, seed=4)
    truncated, _ = step(model_dir, table, tis="token", tis_cap=3.0)
    masked, _ = step(model_dir, table, tis="token", tis_mode="mask", tis_cap=3.0)
    assert masked["is_capped_frac"] == pytest.approx(truncated["is_capped_frac"])
    assert masked["is_weight_mean"] < truncated["is_weight_mean"]  # capped -> 0, not 3


def test_the_metrics_rows_carry_tis_metrics_only_with_a_correction(model_dir):
    table = grpo_table(groups=3, seed=1)
    plain = trainer(model_dir)({"batch": table}, CTX)
    assert not any(name.startswith("is_") for name in plain.column_names)
    corrected = trainer(model_dir, tis="sequence")({"batch": table}, CTX)
    assert {"is_mismatch_kl", "is_mismatch_k3", "is_capped_frac"} <= set(corrected.column_names)
    assert corrected["is_mismatch_k3"].to_pylist()[0] >= 0
