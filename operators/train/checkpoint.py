"""Trainer checkpoints with torch.distributed.checkpoint (sharded: each rank writes its own
shards), plus what DCP does not hold (policy version, RNG), and the plain HF export.

Paths are directories under the run's storage URI: local paths use DCP's file system
writer, `s3://...` its fsspec writer.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import fsspec
import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from operators.model.lora_weights import is_adapter_key


@contextmanager
def _single_process_ok() -> Iterator[None]:
    """DCP warns when a single worker (no process group) saves or loads; that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _writer(path: str) -> dcp.StorageWriter:
    if "://" in path:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        return FsspecWriter(path)
    return dcp.FileSystemWriter(path)


def _reader(path: str) -> dcp.StorageReader:
    if "://" in path:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(path)
    return dcp.FileSystemReader(path)


def _state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, adapters_only: bool
) -> tuple[dict, dict]:
    """Model and optimizer state dicts (sharded); `adapters_only`: the model's LoRA tensors
    (the frozen base is the model directory's)."""
    options = StateDictOptions(ignore_frozen_params=adapters_only)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    if adapters_only:  # tied weights of frozen layers slip through ignore_frozen_params
        model_sd = {k: v for k, v in model_sd.items() if is_adapter_key(k)}
    return model_sd, optim_sd


def save(
    path: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    policy_version: int,
    rank: int,
    adapters_only: bool = False,
) -> None:
    """Write model and optimizer state (sharded) and this rank's RNG and version."""
    model_sd, optim_sd = _state(model, optimizer, adapters_only)
    with _single_process_ok():
        dcp.save({"model": model_sd, "optim": optim_sd}, storage_writer=_writer(path))
    extra = {"torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state()}
    buf = io.BytesIO()
    torch.save(extra, buf)
    with fsspec.open(f"{path}/rng-rank{rank}.pt", "wb") as f:
        f.write(buf.getvalue())
    if rank == 0:
        with fsspec.open(f"{path}/trainer.json", "w") as f:
            json.dump({"policy_version": policy_version}, f)


def load(
    path: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rank: int,
    adapters_only: bool = False,
) -> int:
    """Restore what `save` wrote; returns the policy version."""
    model_sd, optim_sd = _state(model, optimizer, adapters_only)
    state = {"model": model_sd, "optim": optim_sd}
    with _single_process_ok():
        dcp.load(state, storage_reader=_reader(path))
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=StateDictOptions(strict=not adapters_only),
    )
    with fsspec.open(f"{path}/rng-rank{rank}.pt", "rb") as f:
        extra = torch.load(io.BytesIO(f.read()), weights_only=False)
    torch.set_rng_state(extra["torch_rng"])
    np.random.set_state(extra["numpy_rng"])
    with fsspec.open(f"{path}/trainer.json") as f:
        return int(json.load(f)["policy_version"])


def export_hf(
    path: str, model: torch.nn.Module, weights: dict[str, torch.Tensor], tokenizer_from: str
) -> None:
    """A plain `save_pretrained` directory of the policy (weights already gathered)."""
    import tempfile

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        local = path if "://" not in path else tmp
        model.save_pretrained(local, state_dict=weights)
        AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(local)
        if local != path:
            fs, root = fsspec.core.url_to_fs(path)
            fs.put(f"{tmp}/", root, recursive=True)
