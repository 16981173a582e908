"""What a trainer shares with the run: its weights for the weights edge, its checkpoints and
its Hugging Face export; the full policy, or with LoRA only the adapters (the base weights are
the model directory's)."""

from __future__ import annotations

from typing import Any

import torch

from operators.model import weights_digest as digests
from operators.model.lora_weights import base_weights, is_adapter, payload, to_peft_names
from operators.train import checkpoint
from operators.train import distributed as dist_utils
from operators.train import lora as lora_utils


class PolicyState:
    """The trainers' PolicyHolder and Checkpointable side, over the attributes they set up."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    lora: lora_utils.LoraParams | None
    distributed: bool
    rank: int
    policy_version: int
    p: Any  # the trainer's params (model_path)

    def export_weights(self) -> dict[str, torch.Tensor]:
        """The full policy weights, or with LoRA only the adapters (operators.model.lora_weights);
        references on one worker; gathered on every rank of a sharded group, so all ranks
        must call it."""
        if self.lora is not None:
            adapters = lora_utils.adapter_state(self.model, self.distributed)
            return payload(adapters, self.lora.scaling)
        return dist_utils.full_state_dict(self.model, self.distributed)

    def weights_digest(self) -> str:
        """The digest of the policy it publishes now (operators/model/weights_digest.py): of
        the full weights, or with LoRA of the adapted layers merged. Every rank calls it on a
        sharded trainer, as export_weights."""
        weights = self.export_weights()
        if self.lora is None:
            return digests.weights_digest(weights)
        base = getattr(self, "_digest_base", None)
        if base is None:  # the base weights never change: sampled once
            state = base_weights(dist_utils.full_state_dict(self.model, self.distributed))
            base = self._digest_base = digests.base_samples(state, digests.adapted(weights))
        return digests.adapter_digest(base, weights)

    def load_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        if self.lora is not None and is_adapter(weights):
            adapters = to_peft_names(weights, self.lora.scaling)
            dist_utils.load_full_state_dict(self.model, adapters, self.distributed, strict=False)
        else:
            dist_utils.load_full_state_dict(self.model, weights, self.distributed)
        self.policy_version = version

    def save_checkpoint(self, path: str) -> None:
        """Sharded model (with LoRA: adapters only) + optimizer state, policy version and RNG
        (every rank calls it)."""
        checkpoint.save(
            path, self.model, self.optimizer, self.policy_version, self.rank, self.lora is not None
        )

    def load_checkpoint(self, path: str) -> None:
        self.policy_version = checkpoint.load(
            path, self.model, self.optimizer, self.rank, self.lora is not None
        )

    def export_hf(self, path: str) -> None:
        """The policy as a Hugging Face directory (weights gathered; rank 0 writes); with
        LoRA the adapter (peft's directory) and, with `lora.export_merged`, `merged/`."""
        if self.lora is not None:
            lora_utils.export_hf(path, self.model, self.distributed, self.rank, self.p)
            return
        weights = self.export_weights()
        if self.rank == 0:
            checkpoint.export_hf(path, self.model, weights, self.p.model_path)
