"""Token-level advantages and the response mask in the trainer: `token_advantage` is trained
on when present, `response_mask` 0 tokens (tool / environment output) get no gradient and do
not count in token-mean normalisation, and misaligned per-token columns are refused."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

from operators.algorithms.aggregation import LOSS_AGGREGATIONS
from operators.algorithms.kl import KL_ESTIMATORS
from operators.algorithms.logprobs import entropy_from_logits, token_logprobs
from operators.algorithms.policy_losses import POLICY_LOSSES, PolicyLossConfig
from operators.train.batch import pack
from operators.train.policy_gradient import PolicyGradientTrainer
from operators.train.policy_gradient_params import PolicyGradientParams
from rldag.config.errors import InputError
from tests.support.tiny_models import random_causal_lm

PROMPTS = [[5, 6], [10]]
RESPONSES = [[7, 8, 9], [11, 12]]
BEHAVIOUR = [[-2.0, -3.0, -1.5], [-2.5, -2.2]]
RESPONSE_MASK = [[1, 0, 1], [1, 1]]  # row 0's middle token came from a tool


def multi_turn_table(token_adv=((1.0, 5.0, -0.5), (0.3, 0.3)), behaviour=BEHAVIOUR) -> pa.Table:
    return pa.table(
        {
            "prompt_ids": pa.array(PROMPTS, pa.list_(pa.int32())),
            "response_ids": pa.array(RESPONSES, pa.list_(pa.int32())),
            "response_logprobs": pa.array(behaviour, pa.list_(pa.float32())),
            "response_mask": pa.array(RESPONSE_MASK, pa.list_(pa.int8())),
            "advantage": pa.array([0.0, 0.0], pa.float32()),  # the token form wins
            "token_advantage": pa.array([list(a) for a in token_adv], pa.list_(pa.float32())),
        }
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    random_causal_lm(seed=3).save_pretrained(path)
    return path


def trainer_step(model_dir, table: pa.Table, **params) -> tuple[dict, dict]:
    trainer = PolicyGradientTrainer(
        PolicyGradientParams(model_path=str(model_dir), lr=1e-3, grad_clip=1e9, **params)
    )
    metrics = trainer._step(pack(table, trainer.pad_id))
    return metrics, {n: w.grad.clone() for n, w in trainer.model.named_parameters()}


def test_pack_multiplies_the_loss_mask_by_response_mask_and_keeps_token_advantages():
    batch = pack(multi_turn_table(), pad_id=0)
    assert batch.mask.tolist() == [[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    torch.testing.assert_close(
        batch.token_advantages, torch.tensor([[1.0, 5.0, -0.5], [0.3, 0.3, 0.0]])
    )


def test_a_per_token_column_of_the_wrong_length_is_refused_naming_column_and_row():
    table = multi_turn_table(token_adv=((1.0, 5.0, -0.5), (0.3,)))
    with pytest.raises(InputError, match="column 'token_advantage' row 1 has 1 values for 2"):
        pack(table, pad_id=0)


def test_the_step_is_the_hand_written_masked_ppo_loss(model_dir):
    """PPO-clip token-mean over the 4 model tokens only, with their own advantages."""
    metrics, grads = trainer_step(model_dir, multi_turn_table())
    model = PolicyGradientTrainer(PolicyGradientParams(model_path=str(model_dir))).model
    total, counted = 0.0, 0
    for prompt, response, behav, keep, adv in zip(
        PROMPTS, RESPONSES, BEHAVIOUR, RESPONSE_MASK, [[1.0, 5.0, -0.5], [0.3, 0.3]], strict=True
    ):
        ids = torch.tensor([prompt + response])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        logp = token_logprobs(logits, ids[0, len(prompt) :])
        for t in range(len(response)):
            if keep[t]:
                ratio = torch.exp(logp[t] - behav[t])
                total = total + torch.maximum(-adv[t] * ratio, -adv[t] * ratio.clamp(0.8, 1.2))
                counted += 1
    (total / counted).backward()
    assert counted == 4 and metrics["tokens"] == 4
    assert metrics["pg_loss"] == pytest.approx(float(total.detach()) / counted, rel=1e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-4, atol=1e-6)
    assert max(float(g.abs().max()) for g in grads.values()) > 1e-4


@pytest.mark.parametrize("policy_loss", ["ppo", "gspo", "cispo"])
def test_a_masked_tokens_values_do_not_change_the_step(model_dir, policy_loss):
    """Whatever a tool token's advantage and behaviour log-prob, the step is the same: it
    has no gradient of its own and counts nowhere (loss, entropy, KL, normalisation)."""
    params = {"policy_loss": policy_loss, "entropy_coef": 0.1, "kl_coef": 0.1}
    base_metrics, base = trainer_step(model_dir, multi_turn_table(), **params)
    changed = multi_turn_table(
        token_adv=((1.0, -40.0, -0.5), (0.3, 0.3)),
        behaviour=[[-2.0, -0.01, -1.5], [-2.5, -2.2]],
    )
    metrics, grads = trainer_step(model_dir, changed, **params)
    for key in ("loss", "pg_loss", "entropy", "tokens", "approx_kl"):
        assert metrics[key] == pytest.approx(base_metrics[key], rel=1e-6, abs=1e-7)
    for name, grad in base.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("policy_loss", ["ppo", "gspo", "cispo"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_masked_positions_get_zero_gradient_in_every_loss_and_term(policy_loss, mode):
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]], requires_grad=True)
    logits = torch.randn(2, 3, 5, requires_grad=True)
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    old, adv = torch.full((2, 3), -1.1), torch.tensor([[1.0, 2.0, -1.0], [0.5, 0.5, 3.0]])
    loss, _, _ = POLICY_LOSSES.get(policy_loss)(
        logp, old, adv * mask, mask, PolicyLossConfig(loss_agg_mode=mode), None
    )
    aggregate = LOSS_AGGREGATIONS.get(mode)
    entropy = aggregate(entropy_from_logits(logits), mask)
    kl = aggregate(KL_ESTIMATORS.get("k3")(logp, torch.full((2, 3), -1.3)), mask)
    (loss + entropy + kl).backward()
    assert logp.grad[0, 1] == 0 and logp.grad[1, 2] == 0
    assert logits.grad[0, 1].abs().max() == 0 and logits.grad[1, 2].abs().max() == 0
    assert logp.grad[0, 0] != 0 and logits.grad[1, 1].abs().max() > 0


def test_token_mean_normalises_by_counted_tokens_only():
    losses = torch.tensor([[2.0, 100.0, 4.0], [6.0, 8.0, 100.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    assert LOSS_AGGREGATIONS.get("token-mean")(losses, mask).item() == pytest.approx(20.0 / 4)
