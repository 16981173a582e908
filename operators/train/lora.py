"""LoRA on the trainer (`lora:` in a train node's params), with peft.

The base model's weights stay frozen; only the adapters' tensors train, are checkpointed and
travel on the weights edge (operators.model.lora_weights). Adapters are initialised from a fixed
seed, so every rank of a sharded trainer (and every run) starts from the same ones.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from operators.model.lora_weights import base_weights, is_adapter_key, merge, payload
from operators.train import checkpoint
from operators.train import distributed as dist_utils
from rldag import SpecError, check_positive

TrainerParams = Any  # PolicyGradientParams (which imports this module)

INIT_SEED = 0


@dataclass
class LoraParams:
    """Low-rank adapters on the policy (peft's LoraConfig)."""

    rank: int = 8  # r: the adapters' rank
    alpha: float = 16.0  # lora_alpha: the update is scaled by alpha / rank
    # layer names to adapt (peft's target_modules); [all-linear]: every linear but the head
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    dropout: float = 0.0  # lora_dropout on the adapters' input while training
    export_merged: bool = False  # HF export: also `merged/`, the base with adapters merged

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


def check_lora(lora: LoraParams) -> None:
    """For the trainer's params: the values, and that peft is installed (key path `lora`)."""
    check_positive("lora.rank", lora.rank)
    check_positive("lora.alpha", lora.alpha)
    if not 0 <= lora.dropout < 1:
        raise SpecError(f"must be in [0, 1), got {lora.dropout!r}", path="lora.dropout")
    if not lora.target_modules:
        raise SpecError("name at least one module (or all-linear)", path="lora.target_modules")
    if importlib.util.find_spec("peft") is None:
        raise SpecError(
            "LoRA needs the Python package 'peft', which is not installed; "
            "install it with: pip install 'rldag[lora]' (or: pip install peft)",
            path="lora",
        )


def apply_lora(model: torch.nn.Module, lora: LoraParams) -> torch.nn.Module:
    """`model` wrapped by peft with fresh adapters (seeded) and its base weights frozen."""
    from peft import LoraConfig, get_peft_model

    targets = lora.target_modules
    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules="all-linear" if targets == ["all-linear"] else list(targets),
        lora_dropout=lora.dropout,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing")  # peft's call
        torch.manual_seed(INIT_SEED)
        try:
            return get_peft_model(model, config)
        except ValueError as err:  # a name that matches no layer
            linear = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if _is_linear(m)}
            raise SpecError(
                f"{err} The model's linear layers: {', '.join(sorted(linear))}",
                path="lora.target_modules",
            ) from None


def _is_linear(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.Linear)


def adapter_state(model: torch.nn.Module, distributed: bool) -> dict[str, torch.Tensor]:
    """The adapters' tensors under peft's names (gathered on every rank when sharded: a
    collective, and only the adapters are gathered)."""
    if distributed:
        options = StateDictOptions(full_state_dict=True, ignore_frozen_params=True)
        state = get_model_state_dict(model, options=options)
    else:
        state = model.state_dict()
    return {name: tensor for name, tensor in state.items() if is_adapter_key(name)}


def export_hf(
    path: str, model: torch.nn.Module, distributed: bool, rank: int, params: TrainerParams
) -> None:
    """peft's adapter directory at `path` (loadable with PeftModel.from_pretrained over the
    base model) and, with `lora.export_merged`, a plain HF model with the adapters merged in
    at `path/merged` (every rank calls it; rank 0 writes)."""
    lora: LoraParams = params.lora
    adapters = adapter_state(model, distributed)
    full = dist_utils.full_state_dict(model, distributed) if lora.export_merged else None
    if rank != 0:
        return
    checkpoint.export_hf(path, model, adapters, params.model_path)  # PeftModel: the adapter
    if full is not None:
        merged = merge(base_weights(full), payload(full, lora.scaling))
        checkpoint.export_hf(f"{path}/merged", model.get_base_model(), merged, params.model_path)
