"""Loading Hugging Face causal LMs and tokenizers the way every operator does it."""

from __future__ import annotations

from typing import Any

import torch


def load_causal_lm(
    path: str, *, device: str = "cpu", dtype: torch.dtype = torch.float32, **kw: Any
) -> torch.nn.Module:
    """`AutoModelForCausalLM.from_pretrained(path)` on `device`, without progress bars."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw).to(device)
