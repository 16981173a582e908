"""Test-only kill points for the chaos harness (bench/chaos_resume.py, tests/e2e/test_chaos.py).

With ``RLDAG_CHAOS_KILL_AT="<point>:<n>"`` in its environment, the n-th time a process
reaches the named point it SIGKILLs its whole process group, at once and without cleanup,
as a crash would. Only a process that leads its own process group acts on it (the harness
starts `rldag run` in a session of its own), so Ray workers that inherit the variable never
do. Unset, `kill_point` is one comparison. The points:

| point | where |
|---|---|
| ``parquet`` | a Parquet file is written to its temporary name, not yet renamed into place |
| ``checkpoint`` | a trainer's state is saved; its policy versions and ``latest.json`` not yet |
| ``weight_sync`` | a generate step is about to load its policy version |
| ``stream_chunk`` | a streaming step has appended a chunk to its output stream |
| ``refill`` | a refill round (rldag.engine.refill) is about to start; the rounds before it ran |
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "RLDAG_CHAOS_KILL_AT"
POINTS = ("parquet", "checkpoint", "weight_sync", "stream_chunk", "refill")


def _target(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    point, _, count = value.partition(":")
    if point not in POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"{ENV}={value!r}: expected <point>:<n> with a point of {POINTS}")
    return point, int(count)


_TARGET = _target(os.environ.get(ENV))
_hits = 0
_lock = threading.Lock()


def kill_point(point: str, where: str = "") -> None:
    """The process reached `point` (at `where`): SIGKILL its process group if this is the hit
    ``RLDAG_CHAOS_KILL_AT`` names."""
    if _TARGET is None or point != _TARGET[0]:
        return
    global _hits
    with _lock:
        _hits += 1
        if _hits != _TARGET[1] or os.getpgrp() != os.getpid():
            return
        os.write(2, f"\nchaos: killed at {point}:{_hits} {where}\n".encode())
        os.killpg(os.getpgrp(), signal.SIGKILL)
