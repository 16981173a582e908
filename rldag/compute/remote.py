"""Typed methods of Ray actor handles: `Remote` for one call, `StreamingRemote` for a generator
method. Lightweight (no Ray, no worker code), so any actor's handle protocol can use them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from ray import ObjectRef

P = ParamSpec("P")
R = TypeVar("R", covariant=True)


class Remote(Protocol[P, R]):
    """One method of an actor handle: `.remote(...)` starts it and gives a reference to its
    result."""

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ObjectRef[R]: ...


class Streaming(Protocol[P, R]):
    def remote(self, *args: P.args, **kwargs: P.kwargs) -> Iterator[ObjectRef[R]]: ...


class StreamingRemote(Protocol[P, R]):
    """A generator method of an actor handle: `.options(num_returns="streaming").remote(...)`
    gives a reference to each item as it is made."""

    def options(self, *, num_returns: Literal["streaming"]) -> Streaming[P, R]: ...
