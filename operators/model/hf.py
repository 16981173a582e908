"""Loading Hugging Face causal LMs and tokenizers the way every operator does it: a directory
that cannot be loaded is a ModelLoadError naming the path and the cause (the run names the
node), never a bare OSError from the hub client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from rldag import ModelLoadError
from rldag.config.model_paths import HUB_OPT_IN, hub_offline, looks_local


@contextmanager
def loading(path: str, what: str = "model") -> Iterator[None]:
    """Turn a failure to load `what` from `path` into a ModelLoadError saying why."""
    try:
        yield
    except (OSError, ValueError, KeyError, ImportError) as err:
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = ""
        if hub_offline() and not looks_local(path):
            hint = f" (the Hugging Face hub is offline; to download it run with {HUB_OPT_IN})"
        raise ModelLoadError(f"cannot load the {what} from {path!r}: {cause}{hint}") from err


def load_causal_lm(
    path: str, *, device: str = "cpu", dtype: torch.dtype = torch.float32, **kw: Any
) -> torch.nn.Module:
    """`AutoModelForCausalLM.from_pretrained(path)` on `device`, without progress bars."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with loading(path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw).to(device)


def load_tokenizer(path: str) -> Any:
    """`AutoTokenizer.from_pretrained(path)`; a ModelLoadError naming `path` if it fails."""
    from transformers import AutoTokenizer

    with loading(path, "tokenizer"):
        return AutoTokenizer.from_pretrained(path)
