"""Error types a user can act on. Every bad-input error names where the problem is."""

from __future__ import annotations


class RldagError(Exception):
    """Base of all rldag errors."""


class InputError(RldagError):
    """Bad input (pipeline, overrides, data, model path): the CLI exits 2 and runs nothing.

    `where` is the file, `path` the key path inside it (``nodes.score.inputs.rollouts``).
    """

    def __init__(self, message: str, *, path: str = "", where: str = "") -> None:
        self.message = message
        self.path = path
        self.where = where
        super().__init__(str(self))

    def __str__(self) -> str:
        prefix = ": ".join(p for p in (self.where, self.path) if p)
        return f"{prefix}: {self.message}" if prefix else self.message


class SpecError(InputError):
    """pipeline.yaml does not match the schema (unknown key, wrong type, missing field)."""


class UnknownNameError(SpecError, ValueError):
    """A name that no registry holds and that is not a `module:attr` path (the message lists
    the known names; `path` is the key that gave it)."""


class GraphError(InputError):
    """The node graph is invalid (cycle, dangling input, unknown operator, bad port)."""


class SchemaError(InputError):
    """An edge's Arrow schema does not give the consumer the columns it requires."""


class RunError(RldagError):
    """A run failed while executing a node: the CLI exits 1."""


class RunStopped(RunError):
    """The run stopped at a safe point because it was asked to (SIGTERM, SIGINT, a cancel in
    Prefect): what it stored is whole and `rldag run --resume RUN_ID` continues it.
    `exit_code` is the CLI's (rldag.engine.stop)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class WeightsMismatch(RunError):
    """A rollout worker serves other weights than the policy version it loaded: the digest of
    what it holds differs from the trainer's digest of that version (the message names the
    node, the worker, the version and both digests)."""


class PlacementError(InputError):
    """The pools cannot be placed on the cluster (or the local machine) as asked."""


class DeadlineExceeded(RunError):
    """A wait on a component passed its deadline: the message names the component and the
    setting that bounds it (the run adds the node)."""


class RowError(RunError):
    """A row cannot be used (bad data, or a user function failed on it): the run fails
    (exit 1) with a message naming the node, the iteration and the row."""


class ModelLoadError(RunError):
    """A model or tokenizer directory could not be loaded at run time (its message names the
    path and the cause; the run adds the node)."""


def describe(err: BaseException) -> str:
    """One line saying what went wrong: an rldag error's message; another error as
    ``Type: message``; a Ray task error by the error its task raised (Ray's own text is a
    remote traceback, its repr empty); an error without a message by its type and cause."""
    cause = getattr(err, "cause", None)  # ray.exceptions.RayTaskError
    if isinstance(cause, BaseException) and cause is not err:
        return describe(cause)
    text = str(err).strip()
    if isinstance(err, RldagError) and text:
        return text
    if text:
        return f"{type(err).__name__}: {text}"
    inner = err.__cause__ or err.__context__
    return type(err).__name__ + (f" (from {describe(inner)})" if inner is not None else "")
