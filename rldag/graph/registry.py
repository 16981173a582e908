"""Things of one kind by name: one generic `Registry` (built-ins and plugins by name, user code
by `module:attr`), and the operator registry on it, filled by plugins (entry point group
`rldag.operators`).

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
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from rldag.config.errors import GraphError, InputError, SpecError, UnknownNameError, describe
from rldag.config.moved import MovedPathWarning, moved, warn_moved
from rldag.config.spec import NodeKind
from rldag.graph.operator import OperatorDef

T = TypeVar("T")
Accept = Callable[[str, Any], T]  # (path, the object imported from it) -> the registry's value


def callable_target(path: str, found: Any) -> Any:
    """The default accept hook: user code must be a function (any callable)."""
    if not callable(found):
        raise SpecError(f"'{path}' is not a function")
    return found


def instance_of(cls: type[T]) -> Accept[T]:
    """An accept hook that takes only instances of `cls`."""

    def accept(path: str, found: Any) -> T:
        if not isinstance(found, cls):
            raise SpecError(f"'{path}' is not {cls.__name__}")
        return found

    return accept


class Registry(Generic[T]):
    """Things of one kind by name (built-ins, plugins) or by `module:attr` (user code).

    `what` names the kind in messages ("policy loss"). `accept(path, found)` turns a user
    object into a value (a type check or an adapter) or raises an InputError saying why not.
    `modules` and the entry point group `entry_points` are imported on the first lookup (they
    register more names). `form` is the user-code form the unknown-name message offers.
    """

    def __init__(
        self,
        what: str,
        *,
        accept: Accept[T] = callable_target,
        modules: tuple[str, ...] = (),
        entry_points: str | None = None,
        form: str = "module:function",
    ) -> None:
        self.what = what
        self.accept = accept
        self.modules = modules
        self.entry_points = entry_points
        self.form = form
        self._values: dict[str, T] = {}
        self._paths: dict[str, tuple[str, Accept[T]]] = {}  # lazy: name -> (path, its check)
        self._imported: dict[str, T] = {}  # lazy entries imported so far
        self._loaded = False

    def load(self) -> None:
        """Import the modules and entry points that register more names (once)."""
        if self._loaded:
            return
        for module in self.modules:
            importlib.import_module(module)
        if self.entry_points:
            for ep in entry_points(group=self.entry_points):
                ep.load()
        self._loaded = True

    def register(self, *names: str) -> Callable[[T], T]:
        """Decorator: register a value under one or more names (aliases)."""

        def add(value: T) -> T:
            for name in names:
                self.add(name, value)
            return value

        return add

    def add(self, name: str, value: T) -> T:
        """Register `value` as `name`; a name holds one value (another one: ValueError)."""
        if name in self._paths or self._values.get(name, value) is not value:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._values[name] = value
        return value

    def add_path(self, name: str, path: str, accept: Accept[T] | None = None) -> None:
        """Register `name` as the object at `module:attr`, imported on its first `get` and
        checked by `accept` (default: the registry's)."""
        if name in self._values or self._paths.get(name, (path,))[0] != path:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._paths.setdefault(name, (path, accept or self.accept))

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self.load()
        return sorted({*self._values, *self._paths})

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._values or name in self._paths

    def get(self, name: str, key: str = "") -> T:
        """The value registered as `name`, or the user object at `module:attr` (through
        `accept`). Errors are InputErrors at the key path `key`; a name that is neither is an
        UnknownNameError listing the known names."""
        if ":" in name:
            return self._import(name, self.accept, key)
        self.load()
        if name in self._values:
            return self._values[name]
        if name in self._paths:
            if name not in self._imported:
                self._imported[name] = self._import(*self._paths[name], key)
            return self._imported[name]
        known = ", ".join(self.names()) or "none"
        message = f"unknown {self.what} {name!r} (known: {known}; or {self.form})"
        raise UnknownNameError(message, path=key)

    def _import(self, path: str, accept: Accept[T], key: str) -> T:
        try:
            found = import_target(path, key)
        except GraphError as err:
            raise UnknownNameError(err.message, path=key) from None
        try:
            return accept(path, found)
        except InputError as err:
            raise type(err)(err.message, path=key) from None

    def check(self, key: str, name: str) -> None:
        """For params' `__post_init__`: `name` must resolve; an error names `key`."""
        self.get(name, key)

    def entries(self) -> Iterator[tuple[str, T | str]]:
        """(name, value) per name, sorted; a lazy entry not imported yet gives its path."""
        for name in self.names():
            if name in self._values:
                yield name, self._values[name]
            else:
                yield name, self._imported.get(name, self._paths[name][0])


def import_target(path: str, key: str = "") -> Any:
    """Import `module:attr` with the working directory importable, as `python -m` does.

    Every `module:attr` a user writes (operators, every Registry) is resolved here; a path
    whose module moved is followed, with a MovedPathWarning naming `key` and the new path."""
    new = moved(path)
    if new is not None:
        warn_moved(path, new, key)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MovedPathWarning)  # said once, above
            return import_target(new)
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


OPERATORS: Registry[OperatorDef] = Registry(
    "operator", accept=instance_of(OperatorDef), entry_points="rldag.operators"
)
_KINDS: dict[str, NodeKind] = {}  # the kind of each operator registered by path
_ADAPTERS: dict[NodeKind, Callable[[str, Callable[..., Any]], OperatorDef]] = {}


def register(op: OperatorDef) -> OperatorDef:
    """Register an operator under its name; names are unique."""
    return OPERATORS.add(op.name, op)


def register_path(name: str, kind: NodeKind, path: str) -> None:
    """Register the operator `name` of `kind` whose OperatorDef is at `module:attr`, imported
    on first use."""
    if _KINDS.get(name, kind) != kind:
        raise ValueError(f"operator {name!r} is already registered")
    OPERATORS.add_path(name, path, accept=_the_operator(name, kind))
    _KINDS[name] = kind


def _the_operator(name: str, kind: NodeKind) -> Accept[OperatorDef]:
    """The check of a registered path: it must hold the `kind` operator `name`."""

    def accept(path: str, found: Any) -> OperatorDef:
        if not isinstance(found, OperatorDef) or (found.name, found.kind) != (name, kind):
            raise GraphError(f"'{path}' is not the {kind.value} operator '{name}'")
        return found

    return accept


def register_adapter(kind: NodeKind, adapt: Callable[[str, Callable[..., Any]], OperatorDef]):
    """Let plain user functions (`module:function`) serve as operators of `kind`."""
    _ADAPTERS[kind] = adapt


def load_plugins() -> None:
    """Import every module named in the `rldag.operators` entry point group (once)."""
    OPERATORS.load()


def operator_names() -> list[str]:
    """All registered operator names, sorted."""
    return OPERATORS.names()


def _kind_of(name: str) -> NodeKind:
    return _KINDS[name] if name in _KINDS else OPERATORS.get(name).kind


def resolve(op: str, kind: NodeKind, key: str = "") -> OperatorDef:
    """The OperatorDef for a node's `op` (at key path `key`): a registered name or a
    `module:function` path."""
    load_plugins()
    if ":" in op:
        found = _user_operator(op, import_target(op, key), kind)
    elif op in OPERATORS:
        try:
            found = OPERATORS.get(op)
        except InputError as err:
            raise GraphError(err.message) from None
    else:
        known = ", ".join(n for n in operator_names() if _kind_of(n) == kind)
        raise GraphError(f"unknown operator '{op}' for kind {kind.value} (known: {known})")
    if found.kind != kind:
        raise GraphError(
            f"operator '{op}' is a {found.kind.value} operator, the node is kind {kind.value}"
        )
    return found


def _user_operator(path: str, target: Any, kind: NodeKind) -> OperatorDef:
    """User code at `path` as an operator of `kind`: its OperatorDef, or a plain function
    through the kind's adapter."""
    if isinstance(target, OperatorDef):
        return target
    if callable(target) and kind in _ADAPTERS:
        return _ADAPTERS[kind](path, target)
    raise GraphError(
        f"'{path}' is neither an OperatorDef nor a function usable as a {kind.value} node"
    )
