"""Rollout engines with one injected fault on the weights edge, for the tests of attested
weights: each is the `torch_engine` operator whose engine mishandles a load, while the
operator acknowledges the new version as a healthy one does.

- STALE_ENGINE keeps its old weights (its engine's load does nothing);
- UNMERGED_ENGINE keeps a LoRA adapter's base weights without merging the adapter in;
- TRUNCATED_ENGINE loads weights whose bucket arrived short: the second half of the buffer
  the received tensors view (a broadcast bucket) is zeros.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from operators.generate.single_turn import TORCH_ENGINE, TorchGenerate
from operators.model.lora_weights import is_adapter, pairs


class _StaleGenerate(TorchGenerate):
    def __init__(self, params: object) -> None:
        super().__init__(params)
        self.engine.load_state_dict = lambda weights: None


class _UnmergedGenerate(TorchGenerate):
    def __init__(self, params: object) -> None:
        super().__init__(params)
        engine = self.engine
        healthy = engine.load_state_dict

        def load(weights: dict) -> None:
            if not is_adapter(weights):
                return healthy(weights)
            own = engine.model.state_dict()
            for key, _, _ in pairs(weights):  # the base is kept, the adapter never merged
                engine.lora_base.setdefault(key, own[key].clone())
            return None

        engine.load_state_dict = load


class _TruncatedGenerate(TorchGenerate):
    def __init__(self, params: object) -> None:
        super().__init__(params)
        healthy = self.engine.load_state_dict

        def load(weights: dict) -> None:
            last = list(weights.values())[-1]
            bucket = torch.empty(0, dtype=torch.uint8).set_(last.untyped_storage())
            bucket[bucket.numel() // 2 :].zero_()  # what never arrived
            healthy(weights)

        self.engine.load_state_dict = load


STALE_ENGINE = replace(TORCH_ENGINE, name="stale_engine", factory=_StaleGenerate)
UNMERGED_ENGINE = replace(TORCH_ENGINE, name="unmerged_engine", factory=_UnmergedGenerate)
TRUNCATED_ENGINE = replace(TORCH_ENGINE, name="truncated_engine", factory=_TruncatedGenerate)
