"""The driver caps glibc's malloc arenas (rldag/compute/allocator.py): threads that come and go then
share two arenas instead of taking one each. Measured with glibc's own `malloc_info`."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the cap is glibc's mallopt"
)

PROBE = """
import ctypes, sys, threading
from rldag.compute.allocator import cap_malloc_arenas
if sys.argv[2] == "capped":
    assert cap_malloc_arenas()
alive = threading.Barrier(12)
def churn():  # 12 threads alive together, each allocating past pymalloc (the C malloc)
    kept = [bytearray(4096) for _ in range(100)]
    alive.wait()
threads = [threading.Thread(target=churn) for _ in range(12)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
out = libc.fopen(sys.argv[1].encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
"""


def _arenas(tmp_path: Path, mode: str) -> int:
    report = tmp_path / f"{mode}.xml"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run([sys.executable, "-c", PROBE, str(report), mode], env=env, check=True)
    return len(re.findall(r'<heap nr="\d+">', report.read_text()))


def test_capped_threads_share_two_arenas_where_uncapped_ones_take_their_own(tmp_path):
    assert _arenas(tmp_path, "capped") <= 2
    assert _arenas(tmp_path, "uncapped") > 4  # one each: 12 threads, 8 per core allowed


def test_the_users_malloc_arena_max_stands(monkeypatch):
    from rldag.compute.allocator import cap_malloc_arenas

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_malloc_arenas() is False
