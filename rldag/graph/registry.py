"""Name -> OperatorDef registry, filled by plugins (entry point group `rldag.operators`)
and resolvable from `module:function` paths for user code.

A plugin registers an operator either as its OperatorDef or by name, kind and the
`module:attr` path of its OperatorDef (``register_path``): the module is imported when a node
uses the operator, so a process (a pool's worker, `rldag validate`) imports only the
operators its nodes run (the built-ins' modules together import torch, transformers and
torch.distributed.checkpoint: ~5 CPU-seconds per process)."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from rldag.config.errors import GraphError, describe
from rldag.config.spec import NodeKind
from rldag.graph.operator import OperatorDef

_OPERATORS: dict[str, OperatorDef] = {}
_PATHS: dict[str, tuple[NodeKind, str]] = {}  # name -> (kind, `module:attr` of its def)
_ADAPTERS: dict[NodeKind, Callable[[str, Callable[..., Any]], OperatorDef]] = {}
_loaded = False


def register(op: OperatorDef) -> OperatorDef:
    """Register an operator under its name; names are unique."""
    existing = _OPERATORS.get(op.name)
    if existing is not None and existing is not op:
        raise ValueError(f"operator {op.name!r} is already registered")
    _OPERATORS[op.name] = op
    return op


def register_path(name: str, kind: NodeKind, path: str) -> None:
    """Register the operator `name` of `kind` whose OperatorDef is at `module:attr`, imported
    on first use."""
    if _PATHS.get(name, (kind, path)) != (kind, path):
        raise ValueError(f"operator {name!r} is already registered")
    _PATHS[name] = (kind, path)


def _registered(name: str) -> OperatorDef:
    """The OperatorDef registered as `name`, importing its module on first use."""
    if name not in _OPERATORS:
        kind, path = _PATHS[name]
        op = import_target(path)
        if not isinstance(op, OperatorDef) or (op.name, op.kind) != (name, kind):
            raise GraphError(f"'{path}' is not the {kind.value} operator '{name}'")
        register(op)
    return _OPERATORS[name]


def _kind_of(name: str) -> NodeKind:
    return _PATHS[name][0] if name in _PATHS else _OPERATORS[name].kind


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
    return sorted(set(_OPERATORS) | set(_PATHS))


def import_target(path: str) -> Any:
    """Import `module:attr` with the working directory importable, as `python -m` does."""
    module_name, _, attr = path.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise GraphError(f"cannot import module '{module_name}': {err}") from None
    except SyntaxError as err:  # the user's file does not parse: name the file and line
        where = f"{err.filename}, line {err.lineno}" if err.filename else f"line {err.lineno}"
        raise GraphError(
            f"module '{module_name}' has a syntax error ({where}): {err.msg}; fix the file"
        ) from None
    except Exception as err:  # the module raised while being imported
        raise GraphError(
            f"importing module '{module_name}' raised {describe(err)}"
            f"{_raised_at(err)}; its top-level code must run without error"
        ) from None
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise GraphError(f"module '{module_name}' has no attribute '{attr}'")
        target = getattr(target, part)
    return target


def _raised_at(err: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of `err`'s traceback outside importlib."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "importlib" not in f.filename]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def resolve(op: str, kind: NodeKind) -> OperatorDef:
    """The OperatorDef for a node's `op`: a registered name or a `module:function` path."""
    load_plugins()
    if ":" not in op:
        if op not in _OPERATORS and op not in _PATHS:
            known = ", ".join(n for n in operator_names() if _kind_of(n) == kind)
            raise GraphError(f"unknown operator '{op}' for kind {kind.value} (known: {known})")
        found = _registered(op)
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
