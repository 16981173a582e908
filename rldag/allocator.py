"""The C allocator of a long-running driver. glibc's malloc gives threads that allocate at
the same time arenas of their own (up to 8 per core); a driver whose threads come and go
(a Prefect task runner per iteration subflow, Ray's and the storage writer's) spreads its
allocations over many arenas that each keep their free pages, so its RSS creeps up while its
live objects do not (README "Soak": +1.9 MB per 100 iterations, +1.0 capped). Capping the
arenas is what `MALLOC_ARENA_MAX=2` does; the driver sets it in-process with mallopt."""

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
