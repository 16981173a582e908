"""The typed handles of the pool workers match PoolWorker itself, without Ray: every method
a handle calls exists with the same parameters (their annotations, in order, minus self)
and return type, and every public method of PoolWorker has its member in WorkerHandle."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args, get_origin, get_type_hints

import pytest

from rldag.compute.handles import Remote, StreamingRemote, WorkerHandle
from rldag.compute.worker import PoolWorker

MEMBERS = get_type_hints(WorkerHandle)


def test_every_public_method_of_the_worker_has_a_handle_member():
    public = {
        name
        for name, value in vars(PoolWorker).items()
        if callable(value) and not name.startswith("_")
    }
    assert public == set(MEMBERS)


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_the_handle_member_has_the_worker_method_signature(name):
    member = MEMBERS[name]
    params, returns = get_args(member)
    method = getattr(PoolWorker, name)
    # Its own annotations and parameters: once Ray made an actor of the class, each method's
    # __signature__ (what inspect.signature reads) also has Ray's tracing keyword.
    hints = get_type_hints(method)
    code = method.__code__
    worker_params = [hints[p] for p in code.co_varnames[1 : code.co_argcount]]  # minus self
    assert tuple(worker_params) == tuple(params), name
    if get_origin(member) is StreamingRemote:
        returns = Iterator[returns]  # a generator method: one reference per item
    else:
        assert get_origin(member) is Remote
    assert hints["return"] == returns, name
