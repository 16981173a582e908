"""Overrides files: a YAML mapping of pipeline keys (as `rldag plan --auto --apply` writes),
read as OmegaConf dotlist strings like the `key=value` overrides of the command line."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rldag.config.errors import InputError, SpecError


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


def override_key(item: str) -> str:
    """The pipeline key a `key=value` override sets (pipeline.yaml's spelling)."""
    return item.partition("=")[0].strip()


def blame_override(
    err: InputError, source: str, overrides: Sequence[str], origins: Mapping[str, str]
) -> InputError:
    """`err` blamed on the override that set its key, when it names a key of `source` (the
    pipeline file) that an override set: the value came from the command line (or from an
    overrides file: `origins` maps its items to ``overrides file PATH``), not from the file.
    Other errors are returned as is."""
    if err.where != source or not err.path:
        return err
    for item in reversed(overrides):  # the last override of a key wins
        key = override_key(item)
        if err.path == key or err.path.startswith(key + "."):
            origin = origins.get(item, "command-line")
            return type(err)(err.message, path=err.path, where=f"{origin} override {item!r}")
    return err
