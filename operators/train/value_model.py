"""A value model: a Hugging Face transformer backbone with a scalar head on its last hidden
state (PPO's critic). It answers like a causal LM whose "logits" are one value per
position, so the trainer's forward routes (plain and shared prompt prefix) and FSDP2's
per-decoder-layer sharding apply unchanged; the value at response position t is
V(prompt, response[:t]), the state before the model picks token t.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import slice_logits_to_keep

from operators.model.hf import loading

HEAD_FILE = "value_head.pt"


class ValueModel(torch.nn.Module):
    """backbone (AutoModel) + Linear(hidden, 1), the head initialised to zero (V = 0)."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = torch.nn.Linear(backbone.config.hidden_size, 1)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    @property
    def config(self):  # noqa: ANN201  (the backbone's PretrainedConfig)
        return self.backbone.config

    def forward(
        self, *, logits_to_keep: int | torch.Tensor = 0, **kwargs: object
    ) -> CausalLMOutputWithPast:
        out = self.backbone(**kwargs)
        hidden = slice_logits_to_keep(out.last_hidden_state, logits_to_keep)
        return CausalLMOutputWithPast(
            logits=self.value_head(hidden).float(), past_key_values=out.past_key_values
        )

    def save_pretrained(self, path: str, state_dict: dict[str, torch.Tensor]) -> None:
        """A directory: the backbone as `save_pretrained` plus the head's weights."""
        prefix = "backbone."
        self.backbone.save_pretrained(
            path,
            state_dict={k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)},
        )
        head = {
            k[len("value_head.") :]: v for k, v in state_dict.items() if k.startswith("value_head.")
        }
        torch.save(head, Path(path) / HEAD_FILE)


def load_value_model(path: str, *, device: str = "cpu") -> ValueModel:
    """The backbone of the causal LM (or value model) at `path`, with its head if saved."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with loading(path):
        model = ValueModel(AutoModel.from_pretrained(path, dtype=torch.float32))
    head = Path(path) / HEAD_FILE
    if head.is_file():
        model.value_head.load_state_dict(torch.load(head, weights_only=True))
    return model.to(device)
