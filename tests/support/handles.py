"""Checks a typed actor handle (a Protocol of `Remote` members) against the actor's class,
without Ray: the same methods, each with the same parameter and return types."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args, get_origin, get_type_hints

from rldag.compute.remote import Remote, StreamingRemote


def public_methods(actor: type) -> set[str]:
    return {name for name, value in vars(actor).items() if callable(value) and name[0] != "_"}


def mismatches(handle: type, actor: type) -> list[str]:
    """Every member of `handle` whose types differ from `actor`'s method of that name."""
    found = []
    for name, member in get_type_hints(handle).items():
        params, returns = get_args(member)
        method = getattr(actor, name)
        # Its own annotations and parameters: once Ray made an actor of the class, each
        # method's __signature__ (what inspect.signature reads) has Ray's tracing keyword too.
        hints = get_type_hints(method)
        code = method.__code__
        own = tuple(hints[p] for p in code.co_varnames[1 : code.co_argcount])  # minus self
        if get_origin(member) is StreamingRemote:
            returns = Iterator[returns]  # a generator method: one reference per item
        elif get_origin(member) is not Remote:
            found.append(f"{name}: not a Remote member")
            continue
        if own != tuple(params) or hints["return"] != returns:
            found.append(f"{name}: {own} -> {hints['return']} vs {tuple(params)} -> {returns}")
    return found
