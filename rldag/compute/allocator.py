"""The C allocator of long-running processes (the driver, pool workers). glibc's malloc gives
threads that allocate at the same time arenas of their own (up to 8 per core); a process
whose threads come and go (a Prefect task runner per iteration subflow, Ray's and the storage
writer's) spreads its allocations over many arenas that each keep their free pages, so its
RSS creeps up while its live objects do not (docs/operations/soak.md: the driver +1.86 MB per 100
iterations, +0.54 capped). Capping the arenas is what `MALLOC_ARENA_MAX=2` does; these
processes set it in-process with mallopt as they start."""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter
DRIVER_ARENAS = 2


def cap_malloc_arenas(arenas: int = DRIVER_ARENAS) -> bool:
    """Let threads started from now on share at most `arenas` malloc arenas. False where the
    C library has no mallopt that takes it (not glibc) or the user set MALLOC_ARENA_MAX
    (their choice stands)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_ARENA_MAX, arenas) == 1
