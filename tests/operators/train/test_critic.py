"""PPO's critic: the clipped value loss by hand and against its published form, the value
model's forward routes and export, and a critic step equal to the hand-written loss."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from operators.algorithms.aggregation import LOSS_AGGREGATIONS
from operators.algorithms.gae import gae
from operators.algorithms.value_loss import clipped_value_loss
from operators.train.batch import pack
from operators.train.critic import CriticParams, CriticTrainer, CriticValues, ValuesParams
from operators.train.prefix_forward import response_logits
from operators.train.value_model import load_value_model
from rldag.graph.operator import NodeContext
from tests.support.tiny_models import random_causal_lm
from tests.support.train_tables import grpo_table

TOKEN_MEAN = LOSS_AGGREGATIONS.get("token-mean")
CTX = NodeContext(node="critic", iteration=0, seed=0, run_uri="")


def test_clipped_value_loss_by_hand():
    # token 0: V 0.9 moved 0.7 from 0.2, clipped to 0.7; R = 1: errors 0.01 vs 0.09 -> 0.045
    # token 1: V 0.1 moved 0.1 from 0.0 (inside); R = 0.5: error 0.16 -> 0.08
    values = torch.tensor([[0.9, 0.1]], requires_grad=True)
    loss, clipfrac = clipped_value_loss(
        values,
        torch.tensor([[0.2, 0.0]]),
        torch.tensor([[1.0, 0.5]]),
        torch.ones(1, 2),
        0.5,
        TOKEN_MEAN,
    )
    assert loss.item() == pytest.approx((0.045 + 0.08) / 2)
    assert clipfrac.item() == 0.5
    loss.backward()
    # the clipped token has no gradient; the other: (V - R) / 2 tokens
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, -0.2]]))


def test_clipped_value_loss_matches_ppo2():
    """OpenAI baselines ppo2: vpredclipped = OLDVPRED + clip(vpred - OLDVPRED, -c, c);
    vf_loss = .5 * mean(max((vpred - R)^2, (vpredclipped - R)^2))."""
    g = torch.Generator().manual_seed(0)
    values, old = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    returns, mask = torch.randn(3, 4, generator=g), (torch.rand(3, 4, generator=g) > 0.3).float()
    expected, count = 0.0, 0
    for i in range(3):
        for t in range(4):
            if mask[i, t]:
                clipped = float(old[i, t]) + max(-0.2, min(0.2, float(values[i, t] - old[i, t])))
                a, b = (
                    float(values[i, t] - returns[i, t]) ** 2,
                    (clipped - float(returns[i, t])) ** 2,
                )
                expected, count = expected + 0.5 * max(a, b), count + 1
    loss, _ = clipped_value_loss(values, old, returns, mask, 0.2, TOKEN_MEAN)
    assert loss.item() == pytest.approx(expected / count, rel=1e-6)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    random_causal_lm(seed=2).save_pretrained(path)
    return path


def test_value_model_routes_agree_and_export_round_trips(model_dir, tmp_path):
    model = load_value_model(str(model_dir))
    torch.nn.init.normal_(model.value_head.weight)  # a trained-looking head
    batch = pack(grpo_table(groups=4, seed=3), pad_id=0)
    plain = response_logits(model, batch, 0, shared=False).squeeze(-1) * batch.mask
    shared = response_logits(model, batch, 0, shared=True).squeeze(-1) * batch.mask
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-5)
    assert plain.abs().max() > 1e-3
    model.save_pretrained(str(tmp_path / "critic"), state_dict=model.state_dict())
    again = load_value_model(str(tmp_path / "critic"))
    torch.testing.assert_close(response_logits(again, batch, 0).squeeze(-1) * batch.mask, plain)


def test_a_fresh_critic_values_every_token_at_zero(model_dir):
    table = grpo_table(groups=2, seed=1)
    out = CriticValues(ValuesParams(model_path=str(model_dir)))({"rollouts": table}, CTX)
    values = out["values"].to_pylist()
    assert [len(v) for v in values] == [len(r) for r in table["response_ids"].to_pylist()]
    assert all(v == 0.0 for row in values for v in row)


def test_the_critic_step_is_the_hand_written_value_loss(model_dir, tmp_path):
    table = grpo_table(groups=4, seed=5)
    rng = np.random.default_rng(0)
    lens = [len(r) for r in table["response_ids"].to_pylist()]
    old = [rng.normal(size=n).astype(np.float32).tolist() for n in lens]
    table = table.append_column("values", pa.array(old, pa.list_(pa.float32())))
    table = table.append_column("reward", pa.array(rng.choice([0.0, 1.0], len(lens)), pa.float32()))
    params = CriticParams(model_path=str(model_dir), lr=1e-3, grad_clip=1e9, lam=0.9)
    critic = CriticTrainer(params)
    torch.nn.init.normal_(critic.model.value_head.weight, std=0.1)
    reference = load_value_model(str(model_dir))
    reference.load_state_dict(critic.model.state_dict())
    batch = pack(table, critic.pad_id)
    critic._prepare(batch, table)
    metrics = critic._step(batch)

    _, returns = gae(table["reward"].to_numpy(), batch.values.numpy(), batch.mask.numpy(), 1.0, 0.9)
    values = response_logits(reference, batch, 0).squeeze(-1)
    clipped = batch.values + (values - batch.values).clamp(-0.5, 0.5)
    target = torch.from_numpy(returns).float()
    losses = 0.5 * torch.maximum((values - target) ** 2, (clipped - target) ** 2)
    loss = (losses * batch.mask).sum() / batch.mask.sum()
    loss.backward()
    assert metrics["vf_loss"] == pytest.approx(loss.item(), rel=1e-5)
    for name, param in reference.named_parameters():
        grad = dict(critic.model.named_parameters())[name].grad
        torch.testing.assert_close(grad, param.grad, rtol=1e-4, atol=1e-6)
    out = critic({"batch": table}, CTX)
    assert out.column_names[0] == "critic_step" and "critic_vf_loss" in out.column_names
    critic.export_hf(str(tmp_path / "hf"))  # what a run leaves in <run>/hf/critic
    exported = load_value_model(str(tmp_path / "hf")).state_dict()
    assert all(v.equal(exported[k]) for k, v in critic.model.state_dict().items())
