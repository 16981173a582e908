"""Name -> OperatorDef registry, filled by plugins (entry point group `rldag.operators`)
and resolvable from `module:function` paths for user code."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from rldag.errors import GraphError
from rldag.operator import OperatorDef
from rldag.spec import NodeKind

_OPERATORS: dict[str, OperatorDef] = {}
_ADAPTERS: dict[NodeKind, Callable[[str, Callable[..., Any]], OperatorDef]] = {}
_loaded = False


def register(op: OperatorDef) -> OperatorDef:
    """Register an operator under its name; names are unique."""
    existing = _OPERATORS.get(op.name)
    if existing is not None and existing is not op:
        raise ValueError(f"operator {op.name!r} is already registered")
    _OPERATORS[op.name] = op
    return op


def register_adapter(kind: NodeKind, adapt: Callable[[str, Callable[..., Any]], OperatorDef]):
    """Let plain user functions (`module:function`) serve as operators of `kind`."""
    _ADAPTERS[kind] = adapt


def load_plugins() -> None:
    """Import every module named in the `rldag.operators` entry point group (once)."""
    global _loaded
    if _loaded:
        return
    for ep in entry_points(group="rldag.operators"):
        ep.load()
    _loaded = True


def operator_names() -> list[str]:
    """All registered operator names, sorted."""
    load_plugins()
    return sorted(_OPERATORS)


def import_target(path: str) -> Any:
    """Import `module:attr` with the working directory importable, as `python -m` does."""
    module_name, _, attr = path.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise GraphError(f"cannot import module '{module_name}': {err}") from None
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise GraphError(f"module '{module_name}' has no attribute '{attr}'")
        target = getattr(target, part)
    return target


def resolve(op: str, kind: NodeKind) -> OperatorDef:
    """The OperatorDef for a node's `op`: a registered name or a `module:function` path."""
    load_plugins()
    if ":" not in op:
        if op not in _OPERATORS:
            known = ", ".join(n for n in sorted(_OPERATORS) if _OPERATORS[n].kind == kind)
            raise GraphError(f"unknown operator '{op}' for kind {kind.value} (known: {known})")
        found = _OPERATORS[op]
    else:
        target = import_target(op)
        if isinstance(target, OperatorDef):
            found = target
        elif callable(target) and kind in _ADAPTERS:
            found = _ADAPTERS[kind](op, target)
        else:
            raise GraphError(
                f"'{op}' is neither an OperatorDef nor a function usable as a {kind.value} node"
            )
    if found.kind != kind:
        raise GraphError(
            f"operator '{op}' is a {found.kind.value} operator, the node is kind {kind.value}"
        )
    return found
