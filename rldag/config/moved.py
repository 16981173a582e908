"""Paths that moved (issue 29's floor plan): code a user wrote against an old module still
imports, with a `MovedPathWarning` naming the new path.

Three forms are covered:

* a Python import of an old module (``from rldag.spec import load_pipeline``,
  ``import operators.agent.loop``): a finder at the end of ``sys.meta_path`` answers for names
  no file holds any more, with a module that forwards every attribute to the new one(s);
* a ``module:attr`` string in a pipeline (``op: operators.rewards.arithmetic:compute_score``):
  `moved` gives the new string, which `import_target` uses;
* an old module whose name is now a package (``rldag.graph``, ``operators.generate``): the
  package forwards the old module's names (`forward`).

``python -m`` of a moved module fails with a message naming the new command.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence


class MovedPathWarning(FutureWarning):
    """Code or a pipeline uses a module path that moved; the message names the new one."""


# Old module -> where it went, then the modules that names split out of it went to; an old
# package is written ``name.*`` (everything below it moved along).
Moves = Mapping[str, Sequence[str]]

CORE_MOVES: Moves = {
    "rldag.errors": ("rldag.config.errors",),
    "rldag.spec": ("rldag.config.spec",),
    "rldag.tracking_spec": ("rldag.config.tracking",),
    "rldag.overrides": ("rldag.config.overrides",),
    "rldag.model_paths": ("rldag.config.model_paths",),
    "rldag.graph": ("rldag.graph.dag",),
    "rldag.operator": ("rldag.graph.operator",),
    "rldag.registry": ("rldag.graph.registry",),
    "rldag.schema": ("rldag.graph.schema",),
    "rldag.metrics": ("rldag.engine.metrics", "rldag.graph.reported"),
    "rldag.driver": ("rldag.engine.driver",),
    "rldag.scheduler": ("rldag.engine.scheduler",),
    "rldag.run": ("rldag.engine.run",),
    "rldag.streams": ("rldag.engine.streams",),
    "rldag.events": ("rldag.engine.events",),
    "rldag.checkpoints": ("rldag.engine.checkpoints", "rldag.engine.export"),
    "rldag.storage": ("rldag.storage.store",),
    "rldag.run_lock": ("rldag.storage.run_lock",),
    "rldag.stored_run": ("rldag.storage.stored_run", "rldag.console.inspect"),
    "rldag.parquet_io": ("rldag.storage.parquet_io",),
    "rldag.pools": ("rldag.compute.in_process", "rldag.compute.runner", "rldag.compute.host"),
    "rldag.ray_pools": ("rldag.compute.ray_pools",),
    "rldag.ray_cluster": ("rldag.compute.cluster",),
    "rldag.worker": ("rldag.compute.worker",),
    "rldag.placement": ("rldag.compute.placement",),
    "rldag.dispatch": ("rldag.compute.dispatch",),
    "rldag.log_capture": ("rldag.compute.log_capture",),
    "rldag.allocator": ("rldag.compute.allocator",),
    "rldag.weights": ("rldag.compute.weights.wire",),
    "rldag.weight_buckets": ("rldag.compute.weights.buckets",),
    "rldag.shared_buckets": ("rldag.compute.weights.shared_buckets",),
    "rldag.weight_broadcast": ("rldag.compute.weights.broadcast",),
    "rldag.broadcast_edges": ("rldag.compute.weights.edges",),
    "rldag.costs": ("rldag.planning.costs",),
    "rldag.simulator": ("rldag.planning.simulator",),
    "rldag.auto_plan": ("rldag.planning.auto_plan",),
    "rldag.profiling": ("rldag.planning.profiling",),
    "rldag.report": ("rldag.report.rollouts", "rldag.report.reward_curve"),
    "rldag.trajectory": ("rldag.report.trajectory", "rldag.console.trajectory"),
    "rldag.trackers.*": ("rldag.report.trackers",),
    "rldag.plan_view": ("rldag.console.plan", "rldag.compute.cluster"),
    "rldag.auto_plan_view": ("rldag.console.auto_plan",),
    "rldag.progress": ("rldag.console.progress",),
}

_TABLE: dict[str, tuple[str, ...]] = {}


def install(moves: Moves) -> None:
    """Adds `moves` to the table and puts the finder for old modules in place (once)."""
    _TABLE.update({old: tuple(new) for old, new in moves.items()})
    if not any(isinstance(finder, _OldModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_OldModuleFinder())


def _target(module: str) -> tuple[str, ...] | None:
    """The new modules of old `module`: an old module itself, or one below an old package."""
    if module in _TABLE:
        return _TABLE[module]
    if module + ".*" in _TABLE:
        return _TABLE[module + ".*"]
    for old in sorted(_TABLE, key=len, reverse=True):
        package = old.removesuffix(".*")
        if old.endswith(".*") and module.startswith(package + "."):
            return (_TABLE[old][0] + module[len(package) :],)
    return None


def moved(path: str) -> str | None:
    """The new form of ``module[:attr]`` `path` where its module moved, else None."""
    module, colon, attr = path.partition(":")
    targets = _target(module)
    if targets is None:
        return None
    if not attr or len(targets) == 1:
        return targets[0] + colon + attr
    for target in targets:
        try:
            if hasattr(importlib.import_module(target), attr.split(".")[0]):
                return f"{target}:{attr}"
        except ImportError:
            continue
    return f"{targets[0]}:{attr}"


def warn_moved(old: str, new: str, where: str = "", stacklevel: int = 3) -> None:
    """Warns that `old` moved to `new` (`where`: the file or key path that names it)."""
    prefix = f"{where}: " if where else ""
    warnings.warn(MovedPathWarning(f"{prefix}'{old}' moved to '{new}'"), stacklevel=stacklevel)


def _forwarding_getattr(name: str, targets: Sequence[str]) -> Callable[[str], object]:
    def __getattr__(attr: str) -> object:
        if attr.startswith("__"):
            raise AttributeError(attr)
        for target in targets:
            try:
                module = importlib.import_module(target)
            except ModuleNotFoundError:
                continue
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module '{name}' (moved to '{targets[0]}') has no attribute '{attr}'")

    return __getattr__


def forward(package: str, old_module: str) -> Callable[[str], object]:
    """A package's ``__getattr__`` for the names of the old module that had the package's name
    (PEP 562): ``rldag.graph.build_graph`` still finds ``rldag.graph.dag.build_graph``."""

    def __getattr__(attr: str) -> object:
        if importlib.util.find_spec(f"{package}.{attr}") is not None:
            return importlib.import_module(f"{package}.{attr}")  # a submodule, not an old name
        value = _forwarding_getattr(package, _TABLE.get(package) or (old_module,))(attr)
        warn_moved(f"{package}.{attr}", f"{old_module}.{attr}")
        return value

    return __getattr__


class _OldModuleLoader(importlib.abc.Loader):
    """Makes an old module: a forwarding module (a package too, so old submodules import)."""

    def __init__(self, targets: Sequence[str]) -> None:
        self.targets = tuple(targets)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        try:
            importlib.import_module(self.targets[0])
        except ModuleNotFoundError as error:
            raise ImportError(
                f"'{spec.name}' moved to '{self.targets[0]}', which is not importable here "
                f"(examples/ is in the rldag repository, not the installed package): {error}"
            ) from error
        warn_moved(spec.name, self.targets[0], stacklevel=2)
        module = types.ModuleType(spec.name, f"Moved to {self.targets[0]}.")
        module.__getattr__ = _forwarding_getattr(spec.name, self.targets)  # type: ignore[method-assign]
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module forwards."""

    def get_code(self, fullname: str) -> None:
        new = self.targets[0].removesuffix(".__main__")
        raise ImportError(f"'{fullname}' moved: run python -m {new}")


class _OldModuleFinder(importlib.abc.MetaPathFinder):
    """Answers, after every other finder, for module names that moved."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        targets = _target(fullname)
        if targets is None:
            return None
        package = not fullname.endswith(".__main__")  # runpy runs a __main__, not a package
        return importlib.machinery.ModuleSpec(
            fullname, _OldModuleLoader(targets), is_package=package
        )
