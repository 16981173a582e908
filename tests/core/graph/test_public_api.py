"""The plugin API is `rldag`'s top level: every name it exports resolves to the object the
core defines, and no core module imports through it (that would make import order matter)."""

from __future__ import annotations

import importlib
import re

import rldag
from tests.support.paths import ROOT


def test_every_exported_name_is_the_cores_own_object() -> None:
    assert rldag.__all__ == sorted(rldag.__all__, key=lambda name: (not name.isupper(), name))
    for name in rldag.__all__:
        value = getattr(rldag, name)
        module = getattr(value, "__module__", None)
        if module is not None and module.startswith("rldag."):
            assert getattr(importlib.import_module(module), name) is value, name


def test_no_core_module_imports_the_top_level() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "rldag").rglob("*.py")
        if re.search(r"^\s*from rldag import ", path.read_text(), re.MULTILINE)
    ]
    assert offenders == []
