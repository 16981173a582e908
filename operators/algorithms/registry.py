"""A typed name -> function registry for the RL math (advantage estimators, policy losses,
KL estimators, loss aggregations), extensible with `module:function` like reward functions.

Params dataclasses call `check(key, name)` in `__post_init__`, so a typo is a SpecError at
`rldag validate` time that names the key path and lists the registered names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from rldag.config.errors import GraphError, SpecError
from rldag.graph.registry import import_target

T = TypeVar("T", bound=Callable)


class UnknownAlgorithmError(SpecError, ValueError):
    """A name that is not registered and is not importable user code."""


class AlgorithmRegistry(Generic[T]):
    """Functions of one kind by name; `module:attr` names resolve to user code."""

    def __init__(self, what: str, kind: type | None = None, modules: tuple[str, ...] = ()) -> None:
        self.what = what  # e.g. "policy loss", for error messages
        self.kind = kind  # user code must be an instance of this type (None: any callable)
        self.modules = modules  # more built-in entries, imported on first lookup
        self._entries: dict[str, T] = {}

    def _load(self) -> None:
        for module in self.modules:
            importlib.import_module(module)

    def register(self, *names: str) -> Callable[[T], T]:
        """Decorator: register a function under one or more names (aliases)."""

        def add(fn: T) -> T:
            for name in names:
                if name in self._entries:
                    raise ValueError(f"{self.what} {name!r} is already registered")
                self._entries[name] = fn
            return fn

        return add

    def names(self) -> list[str]:
        """Registered names, sorted."""
        self._load()
        return sorted(self._entries)

    def get(self, name: str) -> T:
        """The function registered as `name`, or user code at `module:attr`.

        Raises UnknownAlgorithmError (no path: the caller's key) listing the known names."""
        if ":" in name:
            try:
                found = import_target(name)
            except GraphError as err:
                raise UnknownAlgorithmError(f"{self.what} {err.message}") from None
            if not callable(found) or (self.kind is not None and not isinstance(found, self.kind)):
                wanted = self.kind.__name__ if self.kind is not None else "a function"
                raise UnknownAlgorithmError(f"{self.what} '{name}' is not {wanted}")
            return found
        self._load()
        if name not in self._entries:
            known = ", ".join(self.names())
            raise UnknownAlgorithmError(
                f"unknown {self.what} {name!r} (known: {known}; or module:function for your own)"
            )
        return self._entries[name]

    def check(self, key: str, name: str) -> None:
        """For params dataclasses' __post_init__: `name` must resolve; errors name `key`."""
        try:
            self.get(name)
        except SpecError as err:
            raise SpecError(err.message, path=key) from None
