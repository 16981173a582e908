"""Whole prompt groups out of episodes that finish in any order: what a multi-turn generate
operator streams (``agent_loop``, ``agent_gateway``)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any


def finished_groups(
    running: dict[Future, tuple[int, int]], n: int, size: int
) -> Iterator[tuple[list[int], list[list[Any]]]]:
    """``(prompt indices, their groups)`` of ``size`` whole groups at a time (fewer for the
    last), in prompt order within a chunk, as the futures of ``running`` (each keyed by its
    ``(prompt index, sample index)``, of ``n`` samples per prompt) finish. A future's
    exception is raised here."""
    done: dict[int, list[Any]] = {}
    ready: list[int] = []
    while running:
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in finished:
            i, k = running.pop(future)
            group = done.setdefault(i, [None] * n)
            group[k] = future.result()
            if all(e is not None for e in group):
                ready.append(i)
        while len(ready) >= size or (ready and not running):
            chunk, ready = sorted(ready[:size]), ready[size:]
            yield chunk, [done.pop(i) for i in chunk]
