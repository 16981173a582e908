"""The typed handles of the pool workers match PoolWorker itself, without Ray: every method
a handle calls exists with the same parameters and return type, and every public method of
PoolWorker has its member in WorkerHandle."""

from __future__ import annotations

import inspect
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
    signature = inspect.signature(getattr(PoolWorker, name), eval_str=True)
    worker_params = [p.annotation for p in signature.parameters.values()][1:]  # minus self
    assert tuple(worker_params) == tuple(params), name
    if get_origin(member) is StreamingRemote:
        returns = Iterator[returns]  # a generator method: one reference per item
    else:
        assert get_origin(member) is Remote
    expected = type(None) if signature.return_annotation is None else signature.return_annotation
    assert expected == returns, name
