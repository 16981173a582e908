"""The critic under FSDP2: a step on 2 gloo ranks (each with part of the rows) gives the
gradients one worker computes on all of them, as the policy's does."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from operators.train.batch import pack
from operators.train.critic import CriticParams, CriticTrainer
from operators.train.value_model import HEAD_FILE
from tests.support.gloo_ranks import run_ranks
from tests.support.tiny_models import random_causal_lm
from tests.support.train_tables import grpo_table

pytestmark = pytest.mark.slow
PARAMS = {"grad_clip": 1e9, "micro_batch_tokens": 40, "lam": 0.9}


def critic_table() -> pa.Table:
    table = grpo_table(groups=10, seed=6)
    rng = np.random.default_rng(1)
    lens = [len(r) for r in table["response_ids"].to_pylist()]
    values = [rng.normal(size=n).astype(np.float32).tolist() for n in lens]
    table = table.append_column("values", pa.array(values, pa.list_(pa.float32())))
    return table.append_column("reward", pa.array(rng.choice([0.0, 1.0], len(lens)), pa.float32()))


def step(critic: CriticTrainer, table: pa.Table) -> None:
    batch = pack(table, critic.pad_id)
    critic._prepare(batch, table)
    critic._step(batch)


def _rank(rank: int, model_dir: str, table: pa.Table, out: str) -> None:
    critic = CriticTrainer(CriticParams(model_dir, **PARAMS))
    third = table.num_rows // 3
    step(critic, table.slice(0, third) if rank == 0 else table.slice(third))
    grads = {n: p.grad.full_tensor() for n, p in critic.model.named_parameters()}
    if rank == 0:
        torch.save(grads, out)


def test_the_critic_under_fsdp_matches_one_worker(tmp_path):
    model_dir = tmp_path / "model"
    model = random_causal_lm(seed=4)
    model.save_pretrained(model_dir)
    torch.manual_seed(0)  # a head that is not zero, so the backbone gets gradients too
    head = torch.nn.Linear(model.config.hidden_size, 1)
    torch.save(head.state_dict(), model_dir / HEAD_FILE)
    table = critic_table()
    out = tmp_path / "grads.pt"
    run_ranks(_rank, str(model_dir), table, str(out))
    one = CriticTrainer(CriticParams(str(model_dir), **PARAMS))
    step(one, table)
    two = torch.load(out)
    for name, param in one.model.named_parameters():
        torch.testing.assert_close(two[name], param.grad, rtol=1e-4, atol=1e-6)
    assert one.model.backbone.layers[0].mlp.up_proj.weight.grad.abs().max() > 1e-4
