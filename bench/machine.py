"""What a bench ran on, for its output: the CPU model, its vector ISA, torch's CPU capability,
and the load average (this machine is shared; a figure means little without the load beside it).

    from machine import describe, load_line
    print(describe())          # once at the start
    print(load_line("start"))  # and again with "end" when done
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["cpu_model", "describe", "load_line", "vector_isa"]

# Widest first: the first one the CPU has names its vector ISA.
_ISAS = (
    ("amx_tile", "amx"),
    ("avx512f", "avx512"),
    ("avx2", "avx2"),
    ("avx", "avx"),
    ("sse4_2", "sse4.2"),
    ("asimd", "neon"),
)


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name, flags) of the first CPU in /proc/cpuinfo ("" and {} where there is none)."""
    model, flags = "", set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model or platform.machine(), flags


def cpu_model() -> str:
    return _cpuinfo()[0]


def vector_isa() -> str:
    """The widest vector ISA the CPU flags show, plus the bf16 extension where present."""
    flags = _cpuinfo()[1]
    isa = next((name for flag, name in _ISAS if flag in flags), "scalar")
    if "avx512_bf16" in flags:
        isa += "+avx512_bf16"
    return isa


def _torch_capability() -> str:
    try:
        import torch

        return f"torch {torch.__version__} cpu capability {torch.backends.cpu.get_cpu_capability()}"
    except Exception:  # torch absent or too old: the line still prints
        return "torch capability unknown"


def describe() -> str:
    """One line: CPU model, vector ISA, cores, torch's CPU capability, Python."""
    return (
        f"machine: {cpu_model()} ({vector_isa()}, {os.cpu_count()} cores); "
        f"{_torch_capability()}; Python {platform.python_version()}"
    )


def load_line(when: str) -> str:
    """``load average at <when>: 1-min 5-min 15-min``."""
    one, five, fifteen = os.getloadavg()
    return f"load average at {when}: {one:.2f} {five:.2f} {fifteen:.2f}"
