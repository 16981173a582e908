"""Overrides files: a YAML mapping of pipeline keys (as `rldag plan --auto --apply` writes),
read as OmegaConf dotlist strings like the `key=value` overrides of the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rldag.errors import SpecError


def read_overrides_file(path: str | Path) -> list[str]:
    """An overrides file (a YAML mapping, as `rldag plan --auto --apply` writes) as OmegaConf
    dotlist strings, nested keys joined by dots; SpecError naming the file when it is not a
    mapping."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"overrides file not found: {path}", path="--overrides", where=str(path))
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SpecError(f"not valid YAML: {err}".replace("\n", " "), where=str(path)) from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise SpecError("an overrides file must be a mapping of keys", where=str(path))

    def flatten(prefix: str, value: Any) -> list[str]:
        if isinstance(value, dict) and value:
            return [item for k, v in value.items() for item in flatten(f"{prefix}{k}.", v)]
        return [f"{prefix[:-1]}={json.dumps(value)}"]

    return flatten("", data)
