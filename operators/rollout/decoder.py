"""The engine's decoder for a model: the fast ``LlamaFamilyDecoder``
(``operators.rollout.llama_decoder``) for Llama-family models, else ``HFDecoder``
(``operators.rollout.hf_decoder``), which calls the model's own forward.
"""

from __future__ import annotations

import torch

from operators.rollout.decoding import Decoder
from operators.rollout.hf_decoder import HFDecoder
from operators.rollout.llama_decoder import LLAMA_FAMILY, LlamaFamilyDecoder, supports_fast_path

__all__ = ["make_decoder"]


def make_decoder(model: torch.nn.Module, kind: str = "auto") -> Decoder:
    """The fast Llama-family decoder when ``model`` supports it (or ``kind='fast'``), else HF's.

    ``kind`` is ``auto``, ``fast`` or ``hf``.
    """
    if kind not in ("auto", "fast", "hf"):
        raise ValueError(f"decoder must be auto, fast or hf, got {kind!r}")
    if kind == "hf" or (kind == "auto" and not supports_fast_path(model)):
        return HFDecoder(model)
    if not supports_fast_path(model):
        raise ValueError(
            f"the fast decoder supports {', '.join(LLAMA_FAMILY)} without sliding windows; "
            f"got model_type={getattr(model.config, 'model_type', None)!r} (use decoder='hf')"
        )
    return LlamaFamilyDecoder(model)
