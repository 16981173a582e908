"""LoRA on the policy trainer: only the adapters train, checkpoint and travel on the weights
edge; the base weights stay bit for bit what the model directory holds; the rollout engine
(in process and behind a rollout server) serves the merged policy; a resumed trainer goes on
exactly as the one that saved; the HF export loads with peft and transformers; FSDP2 on 2
gloo ranks computes the adapters' gradients one worker does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from flows.cli import main
from operators.algorithms.logprobs import token_logprobs
from operators.generate.single_turn import GenerateParams, TorchGenerate
from operators.model.lora_weights import base_weights, is_adapter_key, merge, nbytes
from operators.rollout.engine_loop import EngineLoop
from operators.rollout.torch_engine import TorchEngine
from operators.rollout.weight_update import InFlight
from operators.rollout.weights import save_checkpoint
from operators.train import distributed as dist_utils
from operators.train.batch import pack
from operators.train.lora import LoraParams
from operators.train.policy_gradient import PolicyGradientTrainer
from operators.train.policy_gradient_params import PolicyGradientParams
from operators.train.prefix_forward import response_logits
from rldag.config.errors import SpecError
from rldag.graph.operator import NodeContext
from tests.support.gloo_ranks import run_ranks
from tests.support.paths import ROOT
from tests.support.tiny_models import random_causal_lm
from tests.support.tolerances import rounding_atol
from tests.support.train_tables import grpo_table

IDS = torch.tensor([[3, 9, 4, 17, 5, 30, 6]])
LORA = {"rank": 4, "alpha": 8.0, "target_modules": ["all-linear"]}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lora") / "model"
    random_causal_lm(seed=2).save_pretrained(path)
    return path


def lora_trainer(model_dir: Path, lr: float = 1e-2, **lora: object) -> PolicyGradientTrainer:
    params = PolicyGradientParams(str(model_dir), lr=lr, lora=LoraParams(**{**LORA, **lora}))
    return PolicyGradientTrainer(params)


def base_model(model_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(model_dir)


def base_state(model_dir: Path) -> dict[str, torch.Tensor]:
    return base_model(model_dir).state_dict()


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=IDS).logits


def test_training_changes_only_adapters_and_leaves_the_base_bit_identical(model_dir):
    trainer = lora_trainer(model_dir)
    trained = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    named = dict(trainer.model.named_parameters())
    assert {n for n, p in named.items() if id(p) in trained} == {
        n for n in named if is_adapter_key(n)
    }
    batch = pack(grpo_table(groups=6, seed=1), trainer.pad_id)
    for _ in range(3):
        trainer._step(batch)
    base = base_state(model_dir)
    after = base_weights(trainer.model.state_dict())
    assert after.keys() == base.keys()
    assert all(torch.equal(after[k], base[k]) for k in base)  # bit for bit
    lora_b = [p for n, p in named.items() if ".lora_B." in n]
    assert all(p.abs().max() > 0 for p in lora_b)  # initialised to 0, so they trained


def test_with_kl_the_reference_is_the_base_model_without_a_copy(model_dir):
    lora = LoraParams(**LORA)
    trainer = PolicyGradientTrainer(
        PolicyGradientParams(str(model_dir), lr=1e-2, kl_coef=0.1, lora=lora)
    )
    assert trainer.ref is None  # the policy with its adapters off
    batch = pack(grpo_table(groups=6, seed=7), trainer.pad_id)
    trainer._step(batch)
    kl = trainer._step(batch)["kl"]
    base_logits = response_logits(base_model(model_dir), batch, trainer.pad_id, False)
    expected = token_logprobs(base_logits, batch.response_ids)
    torch.testing.assert_close(trainer._ref_logprobs(batch, False), expected, atol=1e-5, rtol=0)
    assert kl > 0  # the trained policy moved away from it


@pytest.mark.parametrize("targets", [["all-linear"], ["q_proj", "v_proj"]])
def test_the_weights_edge_carries_adapters_the_engine_serves_merged(model_dir, targets):
    trainer = lora_trainer(model_dir, target_modules=targets)
    engine = TorchEngine.from_pretrained(str(model_dir))
    batch = pack(grpo_table(groups=6, seed=2), trainer.pad_id)
    full = sum(t.nbytes for t in engine.state_dict().values())
    for _ in range(2):  # the second update merges over the base, not over the first merge
        trainer._step(batch)
        weights = trainer.export_weights()
        assert weights and all(k.endswith((".lora_A", ".lora_B")) for k in weights)
        assert nbytes(weights) < full / 5
        engine.load_state_dict(weights)
        atol = rounding_atol(trainer.model, logits)
        torch.testing.assert_close(logits(engine.model), logits(trainer.model), atol=atol, rtol=0)
        trainer.model.train()
    assert not torch.allclose(logits(engine.model), logits(base_model(model_dir)), atol=1e-3)


def test_a_rollout_server_loads_the_adapter_checkpoint_merged(model_dir, tmp_path):
    trainer = lora_trainer(model_dir)
    trainer._step(pack(grpo_table(groups=6, seed=3), trainer.pad_id))
    path = save_checkpoint(trainer.export_weights(), tmp_path / "v1", like=model_dir)
    assert all(k.endswith((".lora_A", ".lora_B")) for k in load_file(path / "model.safetensors"))
    loop = EngineLoop(TorchEngine.from_pretrained(str(model_dir)))  # what the server runs
    try:
        assert loop.update_weights(str(path), 1, InFlight.finish).result(timeout=60)[0]
        merged = logits(loop.engine.model)
    finally:
        loop.close()
    atol = rounding_atol(trainer.model, logits)
    torch.testing.assert_close(merged, logits(trainer.model), atol=atol, rtol=0)


@pytest.mark.slow
def test_a_rollout_server_process_samples_from_the_merged_policy(model_dir, tmp_path):
    from operators.rollout.sampling import SamplingParams
    from operators.rollout.service import RolloutService

    trainer = lora_trainer(model_dir)
    trainer._step(pack(grpo_table(groups=6, seed=6), trainer.pad_id))
    service = RolloutService(str(model_dir), servers=1, weights_dir=str(tmp_path / "w"))
    try:
        path = service.push(trainer.export_weights(), 1)
        params = SamplingParams(n=2, max_new_tokens=6, ignore_eos=True)
        ((completions, version),) = service.generate([[3, 4, 5]], params, [7])
    finally:
        service.close()
    assert all(k.endswith((".lora_A", ".lora_B")) for k in load_file(path / "model.safetensors"))
    assert version == 1
    policy, base = trainer.model.eval(), base_model(model_dir)
    for c in completions:  # the sampled tokens' log-probs are the trained policy's
        ids = torch.tensor([[3, 4, 5, *c.token_ids]])
        for model, close in ((policy, True), (base, False)):
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ids).logits[0, 2:-1], -1)
            want = logp.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
            assert torch.allclose(want, torch.tensor(c.logprobs), atol=1e-4) is close


def test_the_generate_node_reports_the_edge_size_and_time(tiny_task):
    model = str(tiny_task / "model")
    weights = lora_trainer(model).export_weights()
    node = TorchGenerate(GenerateParams(model, max_new_tokens=2))
    node.load_weights(weights, 1)
    prompts = pa.table({"prompt_id": [0, 1], "prompt": ["1+2=", "3+4="]})
    ctx = NodeContext(node="generate", iteration=1, seed=0, run_uri="")
    table = node({"prompts": prompts}, ctx)
    figures = json.loads(table.schema.metadata[b"rldag.metrics:generate"])
    assert figures["weights/bytes"] == nbytes(weights) and figures["weights/lora"] == 1
    assert figures["weights/tensors"] == len(weights) and figures["weights/load_s"] > 0
    again = node({"prompts": prompts}, NodeContext("generate", 2, 0, ""))
    reported = json.loads(again.schema.metadata[b"rldag.metrics:generate"])
    assert set(reported) == {"rollout/busy_slot_s"}  # no new weights: no weights figures


def test_resume_from_a_lora_checkpoint_continues_identically(model_dir, tmp_path):
    table = grpo_table(groups=6, seed=4)
    first = lora_trainer(model_dir, dropout=0.2)  # dropout: the restored RNG matters too
    batch = pack(table, first.pad_id)
    first._step(batch)
    first.policy_version = 1
    first.save_checkpoint(str(tmp_path / "ckpt"))
    expected = first._step(batch)
    saved = dcp.FileSystemReader(str(tmp_path / "ckpt")).read_metadata().state_dict_metadata
    model_keys = [k for k in saved if k.startswith("model.")]
    assert model_keys and all(is_adapter_key(k) for k in model_keys)  # only adapters
    assert all(is_adapter_key(k) for k in saved if k.startswith("optim.state."))

    torch.manual_seed(123)  # a fresh process would start elsewhere: the checkpoint decides
    resumed = lora_trainer(model_dir, dropout=0.2)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert resumed.policy_version == 1
    assert resumed._step(pack(table, resumed.pad_id)) == expected
    for name, tensor in first.export_weights().items():
        assert torch.equal(resumed.export_weights()[name], tensor), name


def test_hf_export_loads_as_peft_adapter_and_as_merged_model(model_dir, tmp_path):
    from peft import PeftModel

    trainer = lora_trainer(model_dir, export_merged=True)
    trainer._step(pack(grpo_table(groups=6, seed=5), trainer.pad_id))
    trainer.export_hf(str(tmp_path / "hf"))
    want = logits(trainer.model)
    adapter = PeftModel.from_pretrained(base_model(model_dir), tmp_path / "hf")
    assert all(is_adapter_key(k) for k in load_file(tmp_path / "hf" / "adapter_model.safetensors"))
    atol = rounding_atol(trainer.model, logits)
    torch.testing.assert_close(logits(adapter), want, atol=atol, rtol=0)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "hf" / "merged")
    torch.testing.assert_close(logits(merged), want, atol=atol, rtol=0)


def test_lora_params_are_checked_with_key_paths(capsys, monkeypatch):
    example = str(ROOT / "examples" / "lora.yaml")
    assert main(["validate", example]) == 0
    assert main(["validate", example, "nodes.train.params.lora.rank=0"]) == 2
    assert "nodes.train.params.lora.rank: must be > 0, got 0" in capsys.readouterr().err
    assert main(["validate", example, "nodes.train.params.lora.dropout=1.5"]) == 2
    assert "nodes.train.params.lora.dropout: must be in [0, 1)" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "peft", None)  # what an environment without it sees
    assert main(["validate", example]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "nodes.train.params.lora: LoRA needs the Python package 'peft'" in err
    assert "pip install 'rldag[lora]'" in err


def test_target_modules_the_model_lacks_are_named_with_the_layers_it_has(model_dir):
    with pytest.raises(SpecError) as err:
        lora_trainer(model_dir, target_modules=["q_prj"])
    assert err.value.path == "lora.target_modules"
    assert "q_prj" in err.value.message and "q_proj, up_proj, v_proj" in err.value.message


FSDP_PARAMS = {"grad_clip": 1e9, "micro_batch_tokens": 40, "loss_agg_mode": "seq-mean-token-sum"}


def fsdp_trainer(model_dir: str) -> PolicyGradientTrainer:
    lora = LoraParams(**{**LORA, "export_merged": True})
    return PolicyGradientTrainer(PolicyGradientParams(model_dir, lr=1e-3, lora=lora, **FSDP_PARAMS))


def _fsdp_rank(rank: int, model_dir: str, table: pa.Table, out: str) -> None:
    """A LoRA step on this rank's rows (rank 0: a third), then the weights edge, a checkpoint
    and the HF export, all sharded; rank 0 saves what the test compares."""
    trainer = fsdp_trainer(model_dir)
    third = table.num_rows // 3
    rows = table.slice(0, third) if rank == 0 else table.slice(third)
    trainer._step(pack(rows, trainer.pad_id))
    named = dict(trainer.model.named_parameters())
    grads = {n: p.grad.full_tensor() for n, p in named.items() if p.requires_grad}
    frozen_grads = [n for n, p in named.items() if not p.requires_grad and p.grad is not None]
    weights = trainer.export_weights()
    full = dist_utils.full_state_dict(trainer.model, True)
    trainer.save_checkpoint(f"{out}/ckpt")
    trainer.export_hf(f"{out}/hf")
    if rank == 0:
        saved = {"grads": grads, "frozen_grads": frozen_grads, "weights": weights}
        torch.save(saved | {"base": base_weights(full)}, f"{out}/rank0.pt")


@pytest.mark.slow
def test_lora_under_fsdp_on_two_gloo_ranks(model_dir, tmp_path):
    table = grpo_table(groups=10, seed=3)
    run_ranks(_fsdp_rank, str(model_dir), table, str(tmp_path))
    got = torch.load(tmp_path / "rank0.pt")
    one = fsdp_trainer(str(model_dir))
    one._step(pack(table, one.pad_id))
    named = dict(one.model.named_parameters())
    assert got["grads"].keys() == {n for n in named if is_adapter_key(n)}
    for name, grad in got["grads"].items():
        torch.testing.assert_close(grad, named[name].grad, rtol=1e-4, atol=1e-6)
    assert got["frozen_grads"] == []
    base = base_state(model_dir)
    assert all(torch.equal(got["base"][k], base[k]) for k in base)  # frozen, bit for bit
    assert got["weights"].keys() == one.export_weights().keys()  # adapters only, gathered

    resumed = fsdp_trainer(str(model_dir))  # the sharded checkpoint on one worker
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    for name, tensor in got["weights"].items():
        assert torch.equal(resumed.export_weights()[name], tensor), name
    merged = load_file(tmp_path / "hf" / "merged" / "model.safetensors")
    expected = merge(base, got["weights"])
    for name, tensor in merged.items():
        torch.testing.assert_close(tensor, expected[name], atol=1e-6, rtol=0)
