"""Policy checkpoints on disk for rollout servers: a Hugging Face model directory per version.

The trainer's state dict is written as ``model.safetensors`` next to copies of the original
model directory's config and tokenizer files, so the directory is a complete HF model that both
our rollout server and SGLang's ``/update_weights_from_disk`` can load. Writes are atomic (a
temporary directory renamed into place).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

__all__ = ["load_checkpoint", "save_checkpoint"]

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")


def save_checkpoint(
    state_dict: dict[str, torch.Tensor], directory: str | Path, *, like: str | Path | None = None
) -> Path:
    """Write ``state_dict`` as an HF model directory at ``directory`` and return its path.

    Tensors that share storage (tied embeddings) are stored once, under their first name.
    ``like`` is a model directory whose non-weight files (config, tokenizer) are copied along.
    """
    target = Path(directory)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    seen: set[tuple[int, int]] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach()
        ident = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if ident in seen:
            continue
        seen.add(ident)
        tensors[name] = tensor.to("cpu").contiguous().clone()
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    if like is not None:
        for source in Path(like).iterdir():
            if source.is_file() and not source.name.endswith(_WEIGHT_SUFFIXES):
                shutil.copy2(source, tmp / source.name)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def load_checkpoint(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of the ``*.safetensors`` files in ``directory`` (one dict)."""
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors file in {directory}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state
