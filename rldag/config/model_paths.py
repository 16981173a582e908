"""Model paths in a pipeline: a local directory that is not there is found at validation, and
the Hugging Face hub is offline unless the user asks for it.

`model.path` and every node param named ``model_path`` (or ``*_model_path``) is either a
local Hugging Face model directory or a hub id ``org/name``. A path that looks local (absolute,
``./``, ``../``, ``~``, or with a separator and not of the ``org/name`` form, or whose first
part is a local directory) must be a directory with a ``config.json``. A hub id is left to
``from_pretrained``; `rldag` sets ``HF_HUB_OFFLINE=1`` unless the environment sets
``HF_HUB_OFFLINE`` itself (``HF_HUB_OFFLINE=0`` downloads), so a missing model fails at once
instead of retrying the hub for minutes.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from rldag.config.errors import InputError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")  # org/name
HUB_OPT_IN = "HF_HUB_OFFLINE=0"


def hub_offline_by_default() -> None:
    """``HF_HUB_OFFLINE=1`` unless the environment says otherwise (before transformers or
    huggingface_hub is imported: they read it once)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def hub_offline() -> bool:
    """Whether the Hugging Face hub is offline in this process."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def looks_local(path: str) -> bool:
    """Whether `path` names a local directory rather than a hub id ``org/name``."""
    if "://" in path:
        return False
    if path in (".", "..", "~") or path.startswith(("/", "./", "../", "~/")):
        return True
    if "/" not in path and os.sep not in path:
        return False  # a bare name: a hub id of the old kind (gpt2), or a file-less stub
    if not HUB_ID.match(path):
        return True
    return Path(path.split("/", 1)[0]).is_dir()  # models/my-llama under the working directory


def check_model_path(value: str, key: str, where: str) -> None:
    """InputError at `key` unless `value` is a model directory with a config.json, or a hub
    id (left to from_pretrained)."""
    path = Path(value).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(
                f"{value!r} has no config.json: it is not a Hugging Face model directory "
                "(write one with model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR))",
                path=key,
                where=where,
            )
        return
    if path.exists():
        message = f"{value!r} is a file; expected a Hugging Face model directory"
        raise InputError(message, path=key, where=where)
    if looks_local(value):
        raise InputError(
            f"model directory not found: {value!r} (looked in {path.resolve()}; relative paths "
            f"start from the directory rldag runs in, {os.getcwd()}): give the directory "
            "holding config.json, the weights and the tokenizer, or a hub id org/name",
            path=key,
            where=where,
        )


def is_model_key(name: str) -> bool:
    """Whether a params field holds a model path (``model_path``, ``ref_model_path``...)."""
    return name == "model_path" or name.endswith("_model_path")


def check_param_model_paths(params: object, prefix: str, where: str) -> None:
    """`check_model_path` on every model path field of a params dataclass."""
    if not dataclasses.is_dataclass(params):
        return
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if is_model_key(f.name) and isinstance(value, str) and value:
            check_model_path(value, f"{prefix}.{f.name}", where)
