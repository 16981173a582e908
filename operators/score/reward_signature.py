"""A reward function's signature, checked when the pipeline is validated.

The score node calls ``fn(data_source, solution_str, ground_truth, extra_info)`` positionally
(veRL's ``compute_score``), so a function that cannot take those four arguments would fail on
every row: `check_reward_signature` refuses it before anything runs. `reads_ground_truth`
tells whether the function uses its ``ground_truth`` argument at all (a format or length
reward may not), so that only a function that needs one refuses a source without answers.
"""

from __future__ import annotations

import dis
import inspect
from collections.abc import Callable
from typing import Any

from rldag import GraphError

EXPECTED = "compute_score(data_source, solution_str, ground_truth, extra_info=None, ...)"
_GROUND_TRUTH = object()  # stands for the ground_truth argument when binding a call


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or extension function: nothing to check
        return None


def check_reward_signature(name: str, fn: Callable[..., Any]) -> None:
    """GraphError unless `fn` can be called as the score node calls it (four positional
    arguments), naming what its signature is and what was expected."""
    signature = _signature(fn)
    if signature is None:
        return
    try:
        signature.bind("data_source", "solution_str", _GROUND_TRUTH, {})
    except TypeError as err:
        raise GraphError(
            f"reward function '{name}' has the signature {name.rpartition(':')[2]}{signature}, "
            f"but a score node calls it veRL's way, as {EXPECTED} ({err}): add the missing "
            "parameters (keep them in this order; more must have defaults)"
        ) from None


def _code(fn: Callable[..., Any]) -> Any:
    target = inspect.unwrap(fn)
    code = getattr(target, "__code__", None)
    if code is None and not inspect.isroutine(target):  # an object with __call__
        code = getattr(type(target).__call__, "__code__", None)
    return code


def reads_ground_truth(fn: Callable[..., Any]) -> bool:
    """Whether `fn` reads the argument the score node passes as ground_truth; True whenever
    that cannot be told (it lands in ``*args``/``**kwargs``, or the code is not Python's)."""
    signature, code = _signature(fn), _code(fn)
    if signature is None or code is None:
        return True
    try:
        bound = signature.bind("data_source", "solution_str", _GROUND_TRUTH, {})
    except TypeError:
        return True
    names = [k for k, v in bound.arguments.items() if v is _GROUND_TRUTH]
    if not names or "locals" in code.co_names or "vars" in code.co_names:
        return True
    (name,) = names
    if name in code.co_cellvars:  # read by a nested function
        return True
    for instruction in dis.get_instructions(code):
        if instruction.opname.startswith("LOAD_FAST"):
            value = instruction.argval
            if value == name or (isinstance(value, tuple) and name in value):
                return True
    return False
